/**
 * dir: datasets are plain directories; snapshots and clones are copies (`cp -a --reflink=auto`, so
 * a filesystem with reflinks shares blocks). Correct everywhere, and slower: a fork costs a copy.
 */
import { existsSync } from "node:fs";
import { mkdir, readdir, rename, rm, statfs } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { DenvError } from "@denv/protocol";
import { directoryBytes } from "./directory-bytes.ts";
import { runCommand } from "./run-command.ts";
import { extractTarInto, type SnapshotSend, tarOf } from "./snapshot-streams.ts";
import {
  assertFormat,
  assertSafeId,
  type DatasetInfo,
  type QuotaEvidence,
  type SnapshotFormat,
  type SnapshotInfo,
  type StorageDriver,
} from "./storage-driver.ts";

export class DirDriver implements StorageDriver {
  readonly kind = "dir" as const;
  readonly transferFormats: readonly SnapshotFormat[] = ["tar"];
  private readonly root: string;

  constructor(root: string) {
    this.root = root;
  }

  async init(): Promise<void> {
    await mkdir(join(this.root, "datasets"), { recursive: true });
    await mkdir(join(this.root, "snapshots"), { recursive: true });
    await mkdir(join(this.root, "receiving"), { recursive: true });
  }

  private receivingDir(id: string): string {
    assertSafeId(id);
    return join(this.root, "receiving", id);
  }

  async sendSnapshot(snapshotId: string, format: SnapshotFormat): Promise<SnapshotSend> {
    assertFormat(this, format);
    return tarOf(this.snapshotPath(snapshotId));
  }

  async receiveSnapshot(snapshotId: string, format: SnapshotFormat, input: Readable): Promise<void> {
    assertFormat(this, format);
    const dir = this.receivingDir(snapshotId);
    await this.discardReceived(snapshotId);
    await mkdir(dir, { recursive: true });
    try {
      await extractTarInto(input, dir);
    } catch (err) {
      await this.discardReceived(snapshotId).catch(() => {});
      throw err;
    }
  }

  async commitReceived(snapshotId: string): Promise<void> {
    const target = this.snapshotPath(snapshotId);
    if (existsSync(target))
      throw new DenvError("conflict", `this host already holds a snapshot ${snapshotId}`);
    await rename(this.receivingDir(snapshotId), target);
  }

  async discardReceived(snapshotId: string): Promise<void> {
    await rm(this.receivingDir(snapshotId), { recursive: true, force: true });
  }

  listReceived(): Promise<string[]> {
    return readdir(join(this.root, "receiving")).catch(() => []);
  }

  datasetPath(id: string): string {
    assertSafeId(id);
    return join(this.root, "datasets", id);
  }

  async snapshotTree(id: string): Promise<string> {
    return this.snapshotPath(id);
  }

  private snapshotPath(id: string): string {
    assertSafeId(id);
    return join(this.root, "snapshots", id);
  }

  async createDataset(id: string): Promise<DatasetInfo> {
    const path = this.datasetPath(id);
    await mkdir(path);
    return { id, path };
  }

  async snapshot(datasetId: string, snapshotId: string): Promise<SnapshotInfo> {
    const target = this.snapshotPath(snapshotId);
    await runCommand("cp", ["-a", "--reflink=auto", this.datasetPath(datasetId), target]);
    return { id: snapshotId };
  }

  snapshotBytes(snapshotId: string): Promise<number> {
    return directoryBytes(this.snapshotPath(snapshotId));
  }

  async clone(snapshotId: string, datasetId: string): Promise<DatasetInfo> {
    const path = this.datasetPath(datasetId);
    await runCommand("cp", ["-a", "--reflink=auto", this.snapshotPath(snapshotId), path]);
    return { id: datasetId, path };
  }

  async destroyDataset(id: string): Promise<void> {
    await rm(this.datasetPath(id), { recursive: true, force: true });
  }

  async destroySnapshot(id: string): Promise<void> {
    await rm(this.snapshotPath(id), { recursive: true, force: true });
  }

  listDatasets(): Promise<string[]> {
    return readdir(join(this.root, "datasets")).catch(() => []);
  }

  listSnapshots(): Promise<string[]> {
    return readdir(join(this.root, "snapshots")).catch(() => []);
  }

  async freeBytes(): Promise<number> {
    return (await this.capacity()).freeBytes;
  }

  async limitGrowth(_id: string, _growthBytes: number): Promise<QuotaEvidence> {
    return {
      enforced: "none",
      limit_bytes: null,
      reason: "the dir driver has no quotas: an environment can fill the filesystem; use btrfs or zfs",
    };
  }

  async capacity(): Promise<{ totalBytes: number; freeBytes: number }> {
    const s = await statfs(this.root);
    return { totalBytes: s.blocks * s.bsize, freeBytes: s.bavail * s.bsize };
  }
}
