/**
 * dir: datasets are plain directories; snapshots and clones are copies (`cp -a --reflink=auto`, so
 * a filesystem with reflinks shares blocks). Correct everywhere, and slower: a fork costs a copy.
 */
import { mkdir, readdir, rm, statfs } from "node:fs/promises";
import { join } from "node:path";
import { directoryBytes } from "./directory-bytes.ts";
import { runCommand } from "./run-command.ts";
import {
  assertSafeId,
  type DatasetInfo,
  type QuotaEvidence,
  type SnapshotInfo,
  type StorageDriver,
} from "./storage-driver.ts";

export class DirDriver implements StorageDriver {
  readonly kind = "dir" as const;
  private readonly root: string;

  constructor(root: string) {
    this.root = root;
  }

  async init(): Promise<void> {
    await mkdir(join(this.root, "datasets"), { recursive: true });
    await mkdir(join(this.root, "snapshots"), { recursive: true });
  }

  datasetPath(id: string): string {
    assertSafeId(id);
    return join(this.root, "datasets", id);
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
