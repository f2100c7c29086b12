/**
 * zfs: a filesystem per dataset under POOL/denv, snapshots as DATASET@ID, forks as `zfs clone`.
 * Written to the zfs(8) commands; ZFS is not available on the machines this project is built on, so
 * its contract tests skip there with the reason printed.
 */
import type { Readable } from "node:stream";
import { DenvError } from "@denv/protocol";
import { runCommand } from "./run-command.ts";
import { commandInput, commandOutput, type SnapshotSend } from "./snapshot-streams.ts";
import {
  assertFormat,
  assertSafeId,
  type DatasetInfo,
  type QuotaEvidence,
  type SnapshotFormat,
  type SnapshotInfo,
  type StorageDriver,
} from "./storage-driver.ts";

export class ZfsDriver implements StorageDriver {
  readonly kind = "zfs" as const;
  /** Full streams only: an incremental `zfs send -i` needs the base in the same lineage on both hosts. */
  readonly transferFormats: readonly SnapshotFormat[] = ["zfs-send"];
  private readonly base: string;
  private readonly mountRoot: string;

  constructor(pool: string, mountRoot = `/var/lib/denvd/zfs/${pool}`) {
    this.base = `${pool}/denv`;
    this.mountRoot = mountRoot;
  }

  async init(): Promise<void> {
    await runCommand("zfs", ["create", "-p", "-o", `mountpoint=${this.mountRoot}`, this.base]);
  }

  datasetPath(id: string): string {
    assertSafeId(id);
    return `${this.mountRoot}/${id}`;
  }

  private name(id: string): string {
    assertSafeId(id);
    return `${this.base}/${id}`;
  }

  async createDataset(id: string): Promise<DatasetInfo> {
    await runCommand("zfs", ["create", this.name(id)]);
    return { id, path: this.datasetPath(id) };
  }

  async snapshot(datasetId: string, snapshotId: string): Promise<SnapshotInfo> {
    assertSafeId(snapshotId);
    await runCommand("zfs", ["snapshot", `${this.name(datasetId)}@${snapshotId}`]);
    return { id: snapshotId };
  }

  private async snapshotName(snapshotId: string): Promise<string | undefined> {
    const all = await runCommand("zfs", ["list", "-H", "-t", "snapshot", "-o", "name", "-r", this.base]);
    return all.split("\n").find((n) => n.endsWith(`@${snapshotId}`));
  }

  /** A mounted dataset shows its snapshots under .zfs/snapshot/ (mounted there when first read). */
  async snapshotTree(snapshotId: string): Promise<string> {
    const name = await this.snapshotName(snapshotId);
    if (!name) throw new DenvError("not_found", `no snapshot ${snapshotId}`);
    const dataset = name.slice(this.base.length + 1, name.lastIndexOf("@"));
    return `${this.datasetPath(dataset)}/.zfs/snapshot/${snapshotId}`;
  }

  async snapshotBytes(snapshotId: string): Promise<number> {
    const name = await this.snapshotName(snapshotId);
    if (!name) throw new DenvError("not_found", `no snapshot ${snapshotId}`);
    return Number((await runCommand("zfs", ["get", "-Hp", "-o", "value", "referenced", name])).trim());
  }

  async clone(snapshotId: string, datasetId: string): Promise<DatasetInfo> {
    const name = await this.snapshotName(snapshotId);
    if (!name) throw new DenvError("not_found", `no snapshot ${snapshotId}`);
    await runCommand("zfs", ["clone", name, this.name(datasetId)]);
    return { id: datasetId, path: this.datasetPath(datasetId) };
  }

  async destroyDataset(id: string): Promise<void> {
    const exists = await runCommand("zfs", ["list", "-H", "-o", "name", this.name(id)]).then(
      () => true,
      () => false,
    );
    // -r takes the dataset's own snapshots with it; clones made from them are separate datasets.
    if (exists) await runCommand("zfs", ["destroy", "-r", this.name(id)]);
  }

  async destroySnapshot(id: string): Promise<void> {
    const name = await this.snapshotName(id);
    // A snapshot with live clones is kept (zfs refuses); it goes with its dataset.
    if (name) await runCommand("zfs", ["destroy", "-d", name]);
  }

  async listDatasets(): Promise<string[]> {
    const out = await runCommand("zfs", ["list", "-H", "-o", "name", "-d", "1", this.base]);
    return (
      out
        .split("\n")
        .filter((n) => n.startsWith(`${this.base}/`))
        .map((n) => n.slice(this.base.length + 1))
        // Replicas' holders (received snapshots live in them), not datasets of stacks.
        .filter((n) => !n.startsWith("rcv-") && !n.startsWith("stg-"))
    );
  }

  async sendSnapshot(snapshotId: string, format: SnapshotFormat): Promise<SnapshotSend> {
    assertFormat(this, format);
    const name = await this.snapshotName(snapshotId);
    if (!name) throw new DenvError("not_found", `no snapshot ${snapshotId}`);
    return commandOutput("zfs", ["send", name]);
  }

  /** Into POOL/denv/stg-ID (unmounted) until committed, then POOL/denv/rcv-ID. A cut stream: zfs receives nothing. */
  async receiveSnapshot(snapshotId: string, format: SnapshotFormat, input: Readable): Promise<void> {
    assertFormat(this, format);
    await this.discardReceived(snapshotId);
    try {
      await commandInput("zfs", ["receive", "-u", `${this.name(`stg-${snapshotId}`)}@${snapshotId}`], input);
    } catch (err) {
      await this.discardReceived(snapshotId).catch(() => {});
      throw err;
    }
  }

  async commitReceived(snapshotId: string): Promise<void> {
    await runCommand("zfs", ["rename", this.name(`stg-${snapshotId}`), this.name(`rcv-${snapshotId}`)]);
  }

  async discardReceived(snapshotId: string): Promise<void> {
    await this.destroyDataset(`stg-${snapshotId}`);
  }

  async listReceived(): Promise<string[]> {
    const out = await runCommand("zfs", ["list", "-H", "-o", "name", "-d", "1", this.base]);
    return out
      .split("\n")
      .map((n) => n.slice(this.base.length + 1))
      .filter((n) => n.startsWith("stg-"))
      .map((n) => n.slice(4));
  }

  async listSnapshots(): Promise<string[]> {
    const out = await runCommand("zfs", ["list", "-H", "-t", "snapshot", "-o", "name", "-r", this.base]);
    return out
      .split("\n")
      .filter(Boolean)
      .map((n) => n.split("@")[1] as string);
  }

  async freeBytes(): Promise<number> {
    return (await this.capacity()).freeBytes;
  }

  /** refquota: what the dataset references now plus the growth (untested here: no ZFS on these machines). */
  async limitGrowth(id: string, growthBytes: number): Promise<QuotaEvidence> {
    const referenced = Number(
      (await runCommand("zfs", ["get", "-Hp", "-o", "value", "referenced", this.name(id)])).trim(),
    );
    const limit = referenced + growthBytes;
    await runCommand("zfs", ["set", `refquota=${limit}`, this.name(id)]);
    return { enforced: "zfs refquota", limit_bytes: limit };
  }

  async capacity(): Promise<{ totalBytes: number; freeBytes: number }> {
    const out = await runCommand("zfs", ["get", "-Hp", "-o", "value", "used,available", this.base]);
    const [used = 0, avail = 0] = out.trim().split("\n").map(Number);
    return { totalBytes: used + avail, freeBytes: avail };
  }
}
