/**
 * btrfs: a subvolume per dataset, read-only snapshots, and a writable snapshot of a snapshot to
 * fork. Both are copy-on-write metadata operations, so their cost does not grow with the data.
 * Where the host has no btrfs pool, the driver makes one: a sparse image file under its state
 * directory, sized to the disk it is on (defaultPoolBytes), formatted and loop-mounted.
 */
import { existsSync } from "node:fs";
import { access, mkdir, readdir, rename, rm, stat, statfs } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { DenvError } from "@denv/protocol";
import { BTRFS_BUILTIN } from "../exec/agent-protocol.ts";
import { runHostBuiltin } from "../host/host-command.ts";
import { directoryBytes } from "./directory-bytes.ts";
import { runBuiltinOrCommand, runCommand } from "./run-command.ts";
import { commandInput, commandOutput, extractTarInto, type SnapshotSend, tarOf } from "./snapshot-streams.ts";
import {
  assertFormat,
  assertSafeId,
  type DatasetInfo,
  type QuotaEvidence,
  type SnapshotFormat,
  type SnapshotInfo,
  type StorageDriver,
} from "./storage-driver.ts";

const BTRFS_MAGIC = 0x9123683e;
const GIB = 1024 ** 3;
/** The largest pool image made by default. */
export const MAX_POOL_BYTES = 64 * GIB;
/** The smallest pool worth making: a version of a small stack, and room to fork it. */
export const MIN_POOL_BYTES = GIB;

/**
 * The pool image's size when none is given: nine tenths of what the filesystem holding it has
 * free, at most MAX_POOL_BYTES. A sparse image larger than its disk "succeeds" at writes the disk
 * cannot hold, and btrfs aborts its transaction and turns read-only when the disk under it fills
 * (issue 70: a 64 GiB image on a 2 GiB disk); one that fits fails a write with ENOSPC instead,
 * inside the stack, and the pool stays writable. Null when there is too little free for a pool.
 */
export function defaultPoolBytes(freeBytes: number): number | null {
  const size = Math.min(MAX_POOL_BYTES, Math.floor((freeBytes * 0.9) / 4096) * 4096);
  return size >= MIN_POOL_BYTES ? size : null;
}

export interface BtrfsDriverOptions {
  /** A mounted btrfs filesystem to use. When absent, a loop image under stateDir is created. */
  poolPath?: string;
  stateDir: string;
  /** Size of the sparse loop image (it takes disk space only as data is written); default: defaultPoolBytes. */
  imageSizeBytes?: number;
}

export class BtrfsDriver implements StorageDriver {
  readonly kind = "btrfs" as const;
  readonly transferFormats: readonly SnapshotFormat[] = ["btrfs-send", "tar"];
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
        const free = await statfs(this.options.stateDir).then((f) => f.bavail * f.bsize);
        const size = this.options.imageSizeBytes ?? defaultPoolBytes(free);
        if (size === null)
          throw new DenvError(
            "insufficient_storage",
            `the filesystem of ${this.options.stateDir} has ${(free / GIB).toFixed(1)} GiB free: a btrfs pool needs at least ${MIN_POOL_BYTES / GIB} GiB (free space there, or use the dir storage)`,
          );
        await runCommand("truncate", ["-s", String(size), image]);
        await runCommand("mkfs.btrfs", ["-q", image]);
      }
      await runCommand("mount", ["-o", "loop,noatime", image, this.poolPath]);
    }
    await mkdir(join(this.poolPath, "datasets"), { recursive: true });
    await mkdir(join(this.poolPath, "snapshots"), { recursive: true });
    // Replicas from other hosts: staged in receiving/ID/ while they arrive, then kept in
    // received/ID/ (a received subvolume is read-only, so it cannot be moved itself: the
    // directory holding it is).
    await mkdir(join(this.poolPath, "receiving"), { recursive: true });
    await mkdir(join(this.poolPath, "received"), { recursive: true });
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
    if (!Number.isSafeInteger(growthBytes) || growthBytes < 0)
      throw new DenvError(
        "storage_error",
        `a growth limit must be a whole number of bytes, not ${growthBytes}`,
      );
    // The host agent reads the quota and sets its limit in one request, with the ioctls `btrfs` uses.
    const agentSaid = await runHostBuiltin(BTRFS_BUILTIN, ["limit-growth", String(growthBytes), path], {
      timeoutMs: 120_000,
    }).catch(() => null);
    if (agentSaid?.exitCode === 0 && !agentSaid.timedOut) {
      const [, limit] = agentSaid.stdout.trim().split(" ").map(Number);
      if (Number.isSafeInteger(limit)) return { enforced: "btrfs qgroup", limit_bytes: limit as number };
    }
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

  async snapshotTree(id: string): Promise<string> {
    return this.snapshotPath(id);
  }

  private snapshotPath(id: string): string {
    assertSafeId(id);
    const received = join(this.poolPath, "received", id, id);
    return existsSync(received) ? received : join(this.poolPath, "snapshots", id);
  }

  private receivingDir(id: string): string {
    assertSafeId(id);
    return join(this.poolPath, "receiving", id);
  }

  async sendSnapshot(
    snapshotId: string,
    format: SnapshotFormat,
    options: { baseSnapshotId?: string } = {},
  ): Promise<SnapshotSend> {
    assertFormat(this, format);
    if (format === "tar") return tarOf(this.snapshotPath(snapshotId));
    const base = options.baseSnapshotId ? ["-p", this.snapshotPath(options.baseSnapshotId)] : [];
    return commandOutput("btrfs", ["-q", "send", ...base, this.snapshotPath(snapshotId)]);
  }

  async receiveSnapshot(snapshotId: string, format: SnapshotFormat, input: Readable): Promise<void> {
    assertFormat(this, format);
    const dir = this.receivingDir(snapshotId);
    // What an earlier, cut-off attempt left goes first: this one starts clean.
    await this.discardReceived(snapshotId);
    await mkdir(dir, { recursive: true });
    try {
      if (format === "tar") {
        const path = join(dir, snapshotId);
        await subvolumeCreate(path);
        await extractTarInto(input, path);
        await runCommand("btrfs", ["property", "set", "-ts", path, "ro", "true"]);
        return;
      }
      // Chrooted into its own staging directory: the stream names the subvolume it makes, and
      // can name nothing outside that directory. Read to the stream's end, not to its end marker
      // (no -e): a receive that exits at the marker closes its stdin before the relayed stream's
      // own end arrives, and the stream then fails as cut (seen on hosts across a network).
      await commandInput("btrfs", ["-q", "receive", "--chroot", dir], input);
      const made = await readdir(dir);
      if (made.length !== 1 || made[0] !== snapshotId)
        throw new DenvError(
          "storage_error",
          `the stream made ${JSON.stringify(made.slice(0, 5))}, not the snapshot ${snapshotId} it was sent as`,
        );
    } catch (err) {
      await this.discardReceived(snapshotId).catch(() => {});
      throw err;
    }
  }

  async commitReceived(snapshotId: string): Promise<void> {
    const kept = join(this.poolPath, "received", snapshotId);
    if (existsSync(kept) || existsSync(join(this.poolPath, "snapshots", snapshotId)))
      throw new DenvError("conflict", `this host already holds a snapshot ${snapshotId}`);
    await rename(this.receivingDir(snapshotId), kept);
  }

  async discardReceived(snapshotId: string): Promise<void> {
    await removeHolder(this.receivingDir(snapshotId));
  }

  listReceived(): Promise<string[]> {
    return readdir(join(this.poolPath, "receiving")).catch(() => []);
  }

  async createDataset(id: string): Promise<DatasetInfo> {
    const path = this.datasetPath(id);
    await subvolumeCreate(path);
    return { id, path };
  }

  async flush(): Promise<void> {
    await runBuiltinOrCommand({ name: BTRFS_BUILTIN, args: ["sync", this.poolPath] }, "btrfs", [
      "filesystem",
      "sync",
      this.poolPath,
    ]);
  }

  async snapshot(datasetId: string, snapshotId: string): Promise<SnapshotInfo> {
    await snapshotOf(this.datasetPath(datasetId), this.snapshotPath(snapshotId), "ro");
    return { id: snapshotId };
  }

  snapshotBytes(snapshotId: string): Promise<number> {
    return directoryBytes(this.snapshotPath(snapshotId));
  }

  async clone(snapshotId: string, datasetId: string): Promise<DatasetInfo> {
    const path = this.datasetPath(datasetId);
    await snapshotOf(this.snapshotPath(snapshotId), path, "rw");
    return { id: datasetId, path };
  }

  async destroyDataset(id: string): Promise<void> {
    await this.deleteSubvolume(this.datasetPath(id));
  }

  async destroySnapshot(id: string): Promise<void> {
    await this.deleteSubvolume(this.snapshotPath(id));
    await removeHolder(join(this.poolPath, "received", id));
  }

  private async deleteSubvolume(path: string): Promise<void> {
    const exists = await access(path).then(
      () => true,
      () => false,
    );
    if (exists) await subvolumeDelete(path);
  }

  listDatasets(): Promise<string[]> {
    return readdir(join(this.poolPath, "datasets")).catch(() => []);
  }

  async listSnapshots(): Promise<string[]> {
    const own = await readdir(join(this.poolPath, "snapshots")).catch(() => []);
    const received = await readdir(join(this.poolPath, "received")).catch(() => []);
    return [...own, ...received];
  }

  async freeBytes(): Promise<number> {
    return (await this.capacity()).freeBytes;
  }

  async capacity(): Promise<{ totalBytes: number; freeBytes: number }> {
    const s = await statfs(this.poolPath);
    const pool = { totalBytes: s.blocks * s.bsize, freeBytes: s.bavail * s.bsize };
    if (this.options.poolPath) return pool;
    // The image is sparse: what the pool has free, it can only take while the disk under it has.
    const under = await statfs(this.options.stateDir).catch(() => null);
    return under ? { ...pool, freeBytes: Math.min(pool.freeBytes, under.bavail * under.bsize) } : pool;
  }

  /** Unmounts a pool this driver mounted from its loop image (tests and teardown). */
  async unmount(): Promise<void> {
    if (!this.options.poolPath && (await isBtrfs(this.poolPath))) {
      await runCommand("umount", [this.poolPath]);
    }
  }
}

/** A directory holding received subvolumes, removed with them (a subvolume is deleted, not unlinked). */
async function removeHolder(dir: string): Promise<void> {
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const path = join(dir, name);
    // A subvolume's root is inode 256.
    if ((await stat(path).catch(() => null))?.ino === 256) await subvolumeDelete(path);
  }
  await rm(dir, { recursive: true, force: true });
}

/*
 * Subvolumes made, snapshotted and deleted by the host agent's ioctls where it runs
 * (agent/agent-btrfs.c: the calls `btrfs` makes, without loading a program for each), else by `btrfs`.
 */
function subvolumeCreate(path: string): Promise<string> {
  return runBuiltinOrCommand({ name: BTRFS_BUILTIN, args: ["subvolume-create", path] }, "btrfs", [
    "-q",
    "subvolume",
    "create",
    path,
  ]);
}

function snapshotOf(source: string, path: string, mode: "ro" | "rw"): Promise<string> {
  return runBuiltinOrCommand({ name: BTRFS_BUILTIN, args: ["snapshot", mode, source, path] }, "btrfs", [
    "-q",
    "subvolume",
    "snapshot",
    ...(mode === "ro" ? ["-r"] : []),
    source,
    path,
  ]);
}

function subvolumeDelete(path: string): Promise<string> {
  return runBuiltinOrCommand({ name: BTRFS_BUILTIN, args: ["subvolume-delete", path] }, "btrfs", [
    "-q",
    "subvolume",
    "delete",
    path,
  ]);
}

async function isBtrfs(path: string): Promise<boolean> {
  try {
    return (await statfs(path)).type === BTRFS_MAGIC;
  } catch {
    return false;
  }
}
