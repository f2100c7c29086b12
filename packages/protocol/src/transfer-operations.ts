/**
 * The host operations that move versions between hosts (replication.ts on the server,
 * version-transfers.ts on denvd): a version's record, its volumes' streams and its process images,
 * their adoption, and the images a copy needs. Spread into OPERATIONS (operations.ts).
 */
import { z } from "zod";
import { nameSchema } from "./names.ts";
import { streamId, versionId } from "./operation-fields.ts";
import { resolvedSpecSchema } from "./resolved-spec.ts";

const serviceName = z.string().min(1).max(63);
const empty = z.object({});

/** How a snapshot travels to another host (the storage driver's own stream, or a tar). */
export const transferFormat = z.enum(["btrfs-send", "zfs-send", "tar"]);
/** A snapshot's id on a host's storage (a version's id and the volume's name). */
const snapshotId = z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/, "a snapshot id");
const sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, "a sha256 (64 hex digits)");
/** What one end of a snapshot's transfer counted: the bytes it moved and their sha256. */
const transferResult = z.object({ bytes: z.number().int().nonnegative(), sha256: sha256Hex, ms: z.number() });
/** A version as a host records it: what a replica on another host needs to fork it. */
export const versionRecordSchema = z.strictObject({
  id: versionId,
  /** The stack it was taken of, on the host that took it. */
  stack_id: z.string().max(80),
  spec_hash: z.string().max(200),
  spec: resolvedSpecSchema,
  images: z.record(z.string().max(63), z.string().max(512)),
  /** Volume → snapshot id. */
  snapshots: z.record(nameSchema, snapshotId),
  frozen_ms: z.number().nonnegative(),
  clock_ms: z.number().optional(),
  created_at: z.string().max(64),
  /**
   * A live version's process images: each service's digest (checked by the host that takes them,
   * and before any restore), the services kept disk-only, and the CPU flags of the host that took
   * them (a host whose CPU lacks one of them never restores them).
   */
  live: z
    .strictObject({
      services: z.record(
        serviceName,
        z.strictObject({
          checkpoint_bytes: z.number().int().nonnegative(),
          layer_bytes: z.number().int().nonnegative(),
          dump_ms: z.number().nonnegative(),
          digest: z.string().regex(/^sha256:[0-9a-f]{64}$/, "a sha256: digest"),
        }),
      ),
      skipped: z.record(serviceName, z.string().max(4000)),
      cpu_flags: z
        .array(z.string().regex(/^[a-z0-9_]{1,64}$/))
        .max(1024)
        .optional(),
    })
    .optional(),
});

export const TRANSFER_OPERATIONS = {
  /** A version's record and the formats this host sends it in: what a replica elsewhere starts from. */
  describe_version: {
    deadlineMs: 60_000,
    params: z.strictObject({ version_id: versionId }),
    result: z.object({
      version: versionRecordSchema,
      storage: z.enum(["btrfs", "dir", "zfs"]),
      formats: z.array(transferFormat),
    }),
  },
  /**
   * One volume of a version, as the storage driver's stream, to the server (which relays it to the
   * host that takes it). With a base version, only what changed since it (btrfs-send). The
   * snapshots are held while they are read: deleting the version waits for the transfer. The
   * default deadline; the relay (replication.ts) gives a large version longer.
   */
  send_snapshot: {
    streams: ["out_stream"],
    params: z.strictObject({
      version_id: versionId,
      volume: nameSchema,
      base_version_id: versionId.optional(),
      format: transferFormat,
      out_stream: streamId,
    }),
    result: transferResult,
  },
  /**
   * Another host's snapshot, staged (never cloned, never listed) until adopt_version: a stream cut
   * or refused leaves nothing. Its sha256 is kept for adopt_version to check.
   */
  receive_snapshot: {
    streams: ["in_stream"],
    params: z.strictObject({
      version_id: versionId,
      snapshot_id: snapshotId,
      /** The snapshot an incremental stream is based on, held while it arrives. */
      base_snapshot_id: snapshotId.optional(),
      format: transferFormat,
      in_stream: streamId,
    }),
    result: transferResult,
  },
  /**
   * One service's process images of a live version (CRIU's images and its container layer), as a
   * tar, to the server (which relays it to the host that takes them). Held like a snapshot.
   */
  send_live: {
    streams: ["out_stream"],
    params: z.strictObject({ version_id: versionId, service: serviceName, out_stream: streamId }),
    result: transferResult,
  },
  /**
   * Another host's process images of one service, checked (nothing outside its directory, no
   * link followed) and staged until adopt_version, which checks their digest.
   */
  receive_live: {
    streams: ["in_stream"],
    params: z.strictObject({ version_id: versionId, service: serviceName, in_stream: streamId }),
    result: transferResult,
  },
  /**
   * A replica made a version of this host: every staged snapshot's sha256 checked against what the
   * sending host counted, then committed and recorded; on a mismatch, all of them thrown away.
   * With a live record, each service's staged process images are checked by their count and their
   * digest; a host whose CPU lacks a flag they were taken with keeps the version disk-only and says
   * why (`live_refused`).
   */
  adopt_version: {
    deadlineMs: 5 * 60_000,
    params: z.strictObject({
      version: versionRecordSchema,
      sha256: z.record(snapshotId, sha256Hex),
      /** Service → the sha256 the sender counted of its process images' tar. */
      live_sha256: z.record(serviceName, sha256Hex).optional(),
    }),
    result: z.object({
      version_id: versionId,
      snapshots: z.number().int(),
      /** The services whose processes this host now holds. */
      live: z.array(z.string()).optional(),
      live_refused: z.string().optional(),
    }),
  },
  /** Staged snapshots (and a version's staged process images) thrown away (a transfer given up). Idempotent. */
  discard_received: {
    deadlineMs: 5 * 60_000,
    params: z.strictObject({
      snapshot_ids: z.array(snapshotId).max(256),
      live_version_id: versionId.optional(),
    }),
    result: empty,
  },
  /** Images present: pulled by their pinned digest where missing. One no registry has is refused. */
  ensure_images: {
    params: z.strictObject({ images: z.record(z.string().max(63), z.string().min(1).max(512)) }),
    result: z.object({ present: z.array(z.string()), pulled: z.array(z.string()), ms: z.number() }),
  },
};
