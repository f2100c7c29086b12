/**
 * The storage port: datasets (a stack's volumes), read-only snapshots of them, and writable clones
 * of snapshots (a fork's volumes). Three drivers pass one contract suite: btrfs, dir and zfs.
 */
import type { Readable } from "node:stream";
import { DenvError, type QuotaEvidence } from "@denv/protocol";
import type { SnapshotSend } from "./snapshot-streams.ts";

export type { QuotaEvidence, SnapshotSend };

/**
 * How a snapshot travels to another host: the driver's own stream (incremental against a base both
 * hosts hold), or a tar of its tree, which any driver with files can send and take.
 */
export type SnapshotFormat = "btrfs-send" | "zfs-send" | "tar";

export type StorageKind = "btrfs" | "dir" | "zfs";

export interface DatasetInfo {
  id: string;
  /** Host path the engine mounts into containers. */
  path: string;
}

export interface SnapshotInfo {
  id: string;
}

export interface StorageDriver {
  readonly kind: StorageKind;
  /** Prepares the pool (creates and mounts it when needed). Idempotent. */
  init(): Promise<void>;
  /** A new, empty dataset. */
  createDataset(id: string): Promise<DatasetInfo>;
  /** A read-only, point-in-time copy of a dataset. */
  snapshot(datasetId: string, snapshotId: string): Promise<SnapshotInfo>;
  /**
   * Writes the pool's dirty data out ahead of a snapshot, so the snapshot's own commit (inside the
   * stack's frozen window) has little left to flush. Optional: a no-op where snapshots are atomic.
   */
  flush?(): Promise<void>;
  /** Bytes of data a snapshot holds (what a copy would move). Measured apart from snapshot(), which
   * runs inside the frozen window and must stay fast. */
  snapshotBytes(snapshotId: string): Promise<number>;
  /** A new writable dataset holding a snapshot's data. */
  clone(snapshotId: string, datasetId: string): Promise<DatasetInfo>;
  /** Idempotent: removing what is not there succeeds. */
  destroyDataset(id: string): Promise<void>;
  destroySnapshot(id: string): Promise<void>;
  datasetPath(id: string): string;
  /** Where a snapshot's files can be read (read-only): for comparing it with a dataset. */
  snapshotTree(id: string): Promise<string>;
  listDatasets(): Promise<string[]>;
  listSnapshots(): Promise<string[]>;
  /** Free bytes in the pool, to refuse an operation that cannot finish. */
  freeBytes(): Promise<number>;
  /** Total and used bytes, for the host's capacity report. */
  capacity(): Promise<{ totalBytes: number; freeBytes: number }>;
  /**
   * Caps how much a dataset may grow beyond what it holds now (its data at creation, or the
   * snapshot it was cloned from), so no environment can fill the pool. Says how it is enforced;
   * a driver without quotas says so.
   */
  limitGrowth(id: string, growthBytes: number): Promise<QuotaEvidence>;
  /** The formats it sends and takes, its own first. */
  readonly transferFormats: readonly SnapshotFormat[];
  /**
   * A snapshot as bytes for another host's receiveSnapshot; with a base (a snapshot both hosts
   * hold), only what changed since, where the format has that.
   */
  sendSnapshot(
    snapshotId: string,
    format: SnapshotFormat,
    options?: { baseSnapshotId?: string },
  ): Promise<SnapshotSend>;
  /**
   * Takes another host's bytes into a staging place: not a snapshot (never listed, never cloned)
   * until commitReceived. What a failed or cut stream left is removed before this rejects.
   */
  receiveSnapshot(snapshotId: string, format: SnapshotFormat, input: Readable): Promise<void>;
  /** A received snapshot made one of the pool's snapshots. */
  commitReceived(snapshotId: string): Promise<void>;
  /** A received snapshot thrown away. Idempotent. */
  discardReceived(snapshotId: string): Promise<void>;
  /** Received snapshots not committed (left by a kill mid-transfer; discarded when denvd opens). */
  listReceived(): Promise<string[]>;
}

/** Refuses a format a driver does not take. */
export function assertFormat(
  driver: Pick<StorageDriver, "kind" | "transferFormats">,
  format: SnapshotFormat,
): void {
  if (!driver.transferFormats.includes(format))
    throw new DenvError(
      "invalid_argument",
      `the ${driver.kind} storage driver does not send or take ${format} (it does ${driver.transferFormats.join(", ")})`,
    );
}

/** Ids become path components and zfs dataset names: keep them to a safe alphabet. */
export function isSafeId(id: string): boolean {
  return /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/.test(id) && !id.includes("..");
}

export function assertSafeId(id: string): void {
  if (!isSafeId(id))
    throw new DenvError(
      "invalid_argument",
      `${JSON.stringify(id.slice(0, 200))} is not a storage id denv makes`,
    );
}
