/**
 * btrfs: a subvolume per dataset, read-only snapshots, and a writable snapshot of a snapshot to
 * fork. Both are copy-on-write metadata operations, so their cost does not grow with the data.
 * Where the host has no btrfs pool, the driver makes one: a sparse image file under its state
 * directory, formatted and loop-mounted.
 */
import { access, mkdir, readdir, statfs } from "node:fs/promises";
import { join } from "node:path";
import { DenvError } from "@denv/protocol";
import { directoryBytes } from "./directory-bytes.ts";
import { runCommand } from "./run-command.ts";
import {
  assertSafeId,
  type DatasetInfo,
  type QuotaEvidence,
  type SnapshotInfo,
  type StorageDriver,
} from "./storage-driver.ts";

const BTRFS_MAGIC = 0x9123683e;

export interface BtrfsDriverOptions {
  /** A mounted btrfs filesystem to use. When absent, a loop image under stateDir is created. */
  poolPath?: string;
  stateDir: string;
  /** Size of the sparse loop image (it takes disk space only as data is written). */
  imageSizeBytes?: number;
}

export class BtrfsDriver implements StorageDriver {
  readonly kind = "btrfs" as const;
  readonly poolPath: string;
  private readonly options: BtrfsDriverOptions;

  constructor(options: BtrfsDriverOptions) {
    this.options = options;
    this.poolPath = options.poolPath ?? join(options.stateDir, "btrfs-pool");
  }

  async init(): Promise<void> {
    if (!(await isBtrfs(this.poolPath))) {
      if (this.options.poolPath) {
        throw new DenvError("storage_error", `${this.poolPath} is not a mounted btrfs filesystem`);
      }
      const image = join(this.options.stateDir, "btrfs-pool.img");
      await mkdir(this.poolPath, { recursive: true });
      const exists = await access(image).then(
        () => true,
        () => false,
      );
      if (!exists) {
        const size = this.options.imageSizeBytes ?? 64 * 1024 ** 3;
        await runCommand("truncate", ["-s", String(size), image]);
        await runCommand("mkfs.btrfs", ["-q", image]);
      }
      await runCommand("mount", ["-o", "loop,noatime", image, this.poolPath]);
    }
    await mkdir(join(this.poolPath, "datasets"), { recursive: true });
    await mkdir(join(this.poolPath, "snapshots"), { recursive: true });
    // Quotas (qgroups) let each dataset's growth be capped: no environment fills the pool.
    await runCommand("btrfs", ["quota", "enable", this.poolPath]);
  }

  /**
   * A limit on the dataset's referenced bytes: what it holds now plus the growth allowed. The
   * subvolume's own (level 0) qgroup is used: a fork's counts stay right when the snapshot it came
   * from is deleted, which a shared parent group's exclusive count would not.
   */
  async limitGrowth(id: string, growthBytes: number): Promise<QuotaEvidence> {
    const path = this.datasetPath(id);
    const out = await runCommand("btrfs", ["qgroup", "show", "--raw", "-f", path]);
    const line = out.split("\n").find((l) => /^0\/\d+\s/.test(l.trim()));
    const referenced = Number(line?.trim().split(/\s+/)[1]);
    if (!Number.isFinite(referenced))
      throw new DenvError("storage_error", `the quota of dataset ${id} could not be read`);
    const limit = referenced + growthBytes;
    await runCommand("btrfs", ["qgroup", "limit", String(limit), path]);
    return { enforced: "btrfs qgroup", limit_bytes: limit };
  }

  datasetPath(id: string): string {
    assertSafeId(id);
    return join(this.poolPath, "datasets", id);
  }

  private snapshotPath(id: string): string {
    assertSafeId(id);
    return join(this.poolPath, "snapshots", id);
  }

  async createDataset(id: string): Promise<DatasetInfo> {
    const path = this.datasetPath(id);
    await runCommand("btrfs", ["-q", "subvolume", "create", path]);
    return { id, path };
  }

  async flush(): Promise<void> {
    await runCommand("btrfs", ["filesystem", "sync", this.poolPath]);
  }

  async snapshot(datasetId: string, snapshotId: string): Promise<SnapshotInfo> {
    await runCommand("btrfs", [
      "-q",
      "subvolume",
      "snapshot",
      "-r",
      this.datasetPath(datasetId),
      this.snapshotPath(snapshotId),
    ]);
    return { id: snapshotId };
  }

  snapshotBytes(snapshotId: string): Promise<number> {
    return directoryBytes(this.snapshotPath(snapshotId));
  }

  async clone(snapshotId: string, datasetId: string): Promise<DatasetInfo> {
    const path = this.datasetPath(datasetId);
    await runCommand("btrfs", ["-q", "subvolume", "snapshot", this.snapshotPath(snapshotId), path]);
    return { id: datasetId, path };
  }

  async destroyDataset(id: string): Promise<void> {
    await this.deleteSubvolume(this.datasetPath(id));
  }

  async destroySnapshot(id: string): Promise<void> {
    await this.deleteSubvolume(this.snapshotPath(id));
  }

  private async deleteSubvolume(path: string): Promise<void> {
    const exists = await access(path).then(
      () => true,
      () => false,
    );
    if (exists) await runCommand("btrfs", ["-q", "subvolume", "delete", path]);
  }

  listDatasets(): Promise<string[]> {
    return readdir(join(this.poolPath, "datasets")).catch(() => []);
  }

  listSnapshots(): Promise<string[]> {
    return readdir(join(this.poolPath, "snapshots")).catch(() => []);
  }

  async freeBytes(): Promise<number> {
    return (await this.capacity()).freeBytes;
  }

  async capacity(): Promise<{ totalBytes: number; freeBytes: number }> {
    const s = await statfs(this.poolPath);
    return { totalBytes: s.blocks * s.bsize, freeBytes: s.bavail * s.bsize };
  }

  /** Unmounts a pool this driver mounted from its loop image (tests and teardown). */
  async unmount(): Promise<void> {
    if (!this.options.poolPath && (await isBtrfs(this.poolPath))) {
      await runCommand("umount", [this.poolPath]);
    }
  }
}

async function isBtrfs(path: string): Promise<boolean> {
  try {
    return (await statfs(path)).type === BTRFS_MAGIC;
  } catch {
    return false;
  }
}
