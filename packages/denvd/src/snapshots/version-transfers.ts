/**
 * Versions that move between hosts. The sending host streams each volume's snapshot as its storage
 * driver's own bytes (btrfs send, zfs send, or a tar) and counts their sha256; the receiving host
 * stages what arrives and counts it again; adopt_version commits the staged snapshots and records
 * the version only when every count matches what the sender counted. A stream cut short can still
 * look whole to `btrfs receive` (it stops at the last complete command), which is why the count,
 * not the command's exit, decides.
 *
 * A snapshot being read is held: deleting its version waits out the transfer, so no one removes
 * the base of an incremental stream while it is read.
 */
import { createHash } from "node:crypto";
import { type Duplex, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenvError, type OpCheckedParams, type OpResult, type ResolvedSpec } from "@denv/protocol";
import type { LiveRecord, VersionRecord } from "../host/state-store.ts";
import type { StackContext } from "../stack/stack-context.ts";
import { assertSafeId, type SnapshotFormat } from "../storage/storage-driver.ts";
import { liveEvidence, removeLive } from "./live-capture.ts";
import { adoptLive, discardLive, receiveLive, sendLive } from "./live-transfers.ts";

type WireLive = NonNullable<OpResult<"describe_version">["version"]["live"]>;

/**
 * A live record as the wire carries it: its evidence (liveEvidence), with the CPU flags; none where
 * a service's images have no digest (older records), which a copy could not check.
 */
function liveToWire(live: LiveRecord | undefined): WireLive | undefined {
  if (!live || Object.values(live.services).some((s) => !s.digest)) return undefined;
  const { services, skipped } = liveEvidence(live);
  return {
    services: services as WireLive["services"],
    skipped,
    ...(live.cpuFlags ? { cpu_flags: live.cpuFlags } : {}),
  };
}

function liveFromWire(live: WireLive): LiveRecord {
  return {
    services: Object.fromEntries(
      Object.entries(live.services).map(([svc, s]) => [
        svc,
        {
          checkpointBytes: s.checkpoint_bytes,
          layerBytes: s.layer_bytes,
          dumpMs: s.dump_ms,
          digest: s.digest,
        },
      ]),
    ),
    skipped: live.skipped,
    ...(live.cpu_flags ? { cpuFlags: live.cpu_flags } : {}),
  };
}

interface Counted {
  bytes: number;
  sha256: string;
}

/** A pass-through that counts and digests what goes through it. */
function counter(): { stream: Transform; result: () => Counted } {
  const hash = createHash("sha256");
  let bytes = 0;
  let digest: string | null = null;
  const stream = new Transform({
    highWaterMark: 1024 * 1024,
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      bytes += chunk.length;
      done(null, chunk);
    },
  });
  return {
    stream,
    result: () => {
      digest ??= hash.digest("hex");
      return { bytes, sha256: digest };
    },
  };
}

export class VersionTransfers {
  private readonly ctx: StackContext;
  /** Snapshot id → transfers reading (or basing a receive on) it now. */
  private readonly holds = new Map<string, number>();
  /** Staged snapshots this process received, with what it counted. */
  private readonly received = new Map<string, Counted>();
  /** Staged process images ("version/service") this process received, with what it counted. */
  private readonly receivedLive = new Map<string, Counted>();

  constructor(ctx: StackContext) {
    this.ctx = ctx;
  }

  /** Whether a snapshot of the version is being read by a transfer. */
  holdsAny(version: VersionRecord): boolean {
    return Object.values(version.snapshots).some((s) => (this.holds.get(s) ?? 0) > 0);
  }

  private async held<T>(snapshots: string[], fn: () => Promise<T>): Promise<T> {
    for (const s of snapshots) this.holds.set(s, (this.holds.get(s) ?? 0) + 1);
    try {
      return await fn();
    } finally {
      for (const s of snapshots) {
        const n = (this.holds.get(s) ?? 1) - 1;
        if (n > 0) this.holds.set(s, n);
        else this.holds.delete(s);
      }
    }
  }

  describe(versionId: string): OpResult<"describe_version"> {
    const v = this.ctx.version(versionId);
    const live = liveToWire(v.live);
    return {
      version: {
        id: v.id,
        stack_id: v.stackId,
        spec_hash: v.specHash,
        spec: v.spec,
        images: v.images,
        snapshots: v.snapshots,
        frozen_ms: v.frozenMs,
        ...(v.clockMs !== undefined ? { clock_ms: v.clockMs } : {}),
        created_at: v.createdAt,
        ...(live ? { live } : {}),
      },
      storage: this.ctx.storage.kind,
      formats: [...this.ctx.storage.transferFormats],
    };
  }

  /** One volume of a recorded version, streamed to `out` (ended when all of it is written). */
  async send(p: OpCheckedParams<"send_snapshot">, out: Duplex): Promise<OpResult<"send_snapshot">> {
    const started = performance.now();
    const v = this.ctx.version(p.version_id);
    const snapshot = Object.hasOwn(v.snapshots, p.volume) ? v.snapshots[p.volume] : undefined;
    if (!snapshot) throw new DenvError("not_found", `version ${v.id} has no volume ${p.volume}`);
    let base: string | undefined;
    if (p.base_version_id) {
      const b = this.ctx.version(p.base_version_id);
      base = Object.hasOwn(b.snapshots, p.volume) ? b.snapshots[p.volume] : undefined;
      if (!base) throw new DenvError("not_found", `base version ${b.id} has no volume ${p.volume}`);
    }
    return this.held([snapshot, ...(base ? [base] : [])], async () => {
      const send = await this.ctx.storage.sendSnapshot(snapshot, p.format as SnapshotFormat, {
        ...(base ? { baseSnapshotId: base } : {}),
      });
      const count = counter();
      try {
        await pipeline(send.stream, count.stream, out);
      } catch (err) {
        send.cancel();
        throw new DenvError("unavailable", `sending ${snapshot} stopped: ${(err as Error).message}`, {
          cause: err,
        });
      }
      // Every byte was read; the command must also say it made all of them.
      await send.done;
      this.ctx.log("Sent snapshot", { version: v.id, volume: p.volume, base, bytes: count.result().bytes });
      return { ...count.result(), ms: Math.round(performance.now() - started) };
    });
  }

  /** Another host's snapshot, staged; its count kept for adopt. */
  async receive(
    p: OpCheckedParams<"receive_snapshot">,
    input: Duplex,
  ): Promise<OpResult<"receive_snapshot">> {
    const started = performance.now();
    assertSafeId(p.snapshot_id);
    if (this.ctx.store.versions().some((v) => Object.values(v.snapshots).includes(p.snapshot_id)))
      throw new DenvError("conflict", `this host already holds snapshot ${p.snapshot_id}`);
    this.received.delete(p.snapshot_id);
    const base = p.base_snapshot_id ? [p.base_snapshot_id] : [];
    return this.held(base, async () => {
      const count = counter();
      const counting = pipeline(input, count.stream);
      counting.catch(() => {});
      await Promise.all([
        counting,
        this.ctx.storage.receiveSnapshot(p.snapshot_id, p.format as SnapshotFormat, count.stream),
      ]).catch(async (err) => {
        input.destroy();
        await this.ctx.storage.discardReceived(p.snapshot_id).catch(() => {});
        throw err;
      });
      const got = count.result();
      this.received.set(p.snapshot_id, got);
      this.ctx.log("Received snapshot", { version: p.version_id, snapshot: p.snapshot_id, bytes: got.bytes });
      return { ...got, ms: Math.round(performance.now() - started) };
    });
  }

  /** One service's process images of a recorded live version, as a tar to `out`, counted. */
  async sendLive(p: OpCheckedParams<"send_live">, out: Duplex): Promise<OpResult<"send_live">> {
    const started = performance.now();
    const v = this.ctx.version(p.version_id);
    return this.held(Object.values(v.snapshots), async () => {
      const count = counter();
      const piped = pipeline(count.stream, out);
      piped.catch(() => {});
      await sendLive(this.ctx, v.id, p.service, count.stream);
      await piped;
      return { ...count.result(), ms: Math.round(performance.now() - started) };
    });
  }

  /** Another host's process images of one service, staged; their count kept for adopt. */
  async receiveLive(p: OpCheckedParams<"receive_live">, input: Duplex): Promise<OpResult<"receive_live">> {
    const started = performance.now();
    const key = `${p.version_id}/${p.service}`;
    this.receivedLive.delete(key);
    const count = counter();
    const counting = pipeline(input, count.stream);
    counting.catch(() => {});
    await Promise.all([counting, receiveLive(this.ctx, p.version_id, p.service, count.stream)]).catch(
      (err) => {
        input.destroy();
        throw err;
      },
    );
    const got = count.result();
    this.receivedLive.set(key, got);
    return { ...got, ms: Math.round(performance.now() - started) };
  }

  /** The staged snapshots, checked against the sender's counts, committed and recorded as a version. */
  async adopt(p: OpCheckedParams<"adopt_version">): Promise<OpResult<"adopt_version">> {
    const rec = p.version;
    const existing = this.ctx.store.version(rec.id);
    // Sent again after an answer that was lost: already done.
    if (existing && sameSnapshots(existing.snapshots, rec.snapshots))
      return {
        version_id: rec.id,
        snapshots: Object.keys(rec.snapshots).length,
        ...(rec.live ? { live: Object.keys(existing.live?.services ?? {}) } : {}),
      };
    if (existing) throw new DenvError("conflict", `this host already holds another version ${rec.id}`);
    const ids = Object.values(rec.snapshots);
    const problems: string[] = [];
    for (const id of ids) {
      const got = this.received.get(id);
      const want = Object.hasOwn(p.sha256, id) ? p.sha256[id] : undefined;
      if (!got) problems.push(`${id} was not received here`);
      else if (got.sha256 !== want)
        problems.push(
          `${id} arrived as ${got.bytes} bytes with sha256 ${got.sha256}, sent as ${want ?? "unknown"}`,
        );
    }
    const live = rec.live ? liveFromWire(rec.live) : undefined;
    for (const svc of Object.keys(live?.services ?? {})) {
      const got = this.receivedLive.get(`${rec.id}/${svc}`);
      const want = p.live_sha256 && Object.hasOwn(p.live_sha256, svc) ? p.live_sha256[svc] : undefined;
      if (!got) problems.push(`service ${svc}'s process images were not received here`);
      else if (got.sha256 !== want)
        problems.push(
          `service ${svc}'s process images arrived as ${got.bytes} bytes with sha256 ${got.sha256}, sent as ${want ?? "unknown"}`,
        );
    }
    if (problems.length) {
      await this.discard(ids, live ? rec.id : undefined);
      throw new DenvError(
        "storage_error",
        `the replica of ${rec.id} is not what was sent: ${problems.join("; ")}`,
      );
    }
    const committed: string[] = [];
    let held: Awaited<ReturnType<typeof adoptLive>> = { kept: null };
    try {
      if (live) held = await adoptLive(this.ctx, rec.id, live);
      for (const id of ids) {
        await this.ctx.storage.commitReceived(id);
        committed.push(id);
        this.received.delete(id);
      }
      const version: VersionRecord = {
        id: rec.id,
        stackId: rec.stack_id,
        specHash: rec.spec_hash,
        spec: rec.spec as ResolvedSpec,
        images: rec.images,
        snapshots: rec.snapshots,
        frozenMs: rec.frozen_ms,
        ...(rec.clock_ms !== undefined ? { clockMs: rec.clock_ms } : {}),
        createdAt: rec.created_at,
        ...(held.kept ? { live: held.kept } : {}),
      };
      await this.ctx.store.putVersion(version);
    } catch (err) {
      for (const id of committed) await this.ctx.storage.destroySnapshot(id).catch(() => {});
      // Never recorded here: none of its process images stay (some may have been moved into place).
      if (live) await removeLive(this.ctx, rec.id).catch(() => {});
      await this.discard(ids, live ? rec.id : undefined);
      throw err;
    }
    for (const svc of Object.keys(live?.services ?? {})) this.receivedLive.delete(`${rec.id}/${svc}`);
    this.ctx.log("Adopted version", { version: rec.id, snapshots: ids.length, live: !!held.kept });
    return {
      version_id: rec.id,
      snapshots: ids.length,
      ...(live ? { live: held.kept ? Object.keys(held.kept.services) : [] } : {}),
      ...(held.refused ? { live_refused: held.refused } : {}),
    };
  }

  async discard(snapshotIds: string[], liveVersionId?: string): Promise<void> {
    for (const id of snapshotIds) {
      this.received.delete(id);
      await this.ctx.storage.discardReceived(id);
    }
    if (liveVersionId) {
      for (const key of [...this.receivedLive.keys()])
        if (key.startsWith(`${liveVersionId}/`)) this.receivedLive.delete(key);
      await discardLive(this.ctx, liveVersionId);
    }
  }

  /** Images present on this host's engine, pulled by digest where missing. */
  async ensureImages(images: Record<string, string>): Promise<OpResult<"ensure_images">> {
    const started = performance.now();
    const present: string[] = [];
    const pulled: string[] = [];
    await Promise.all(
      Object.entries(images).map(async ([service, ref]) => {
        if (await this.ctx.runtime.hasImage(ref)) {
          present.push(ref);
          return;
        }
        if (ref.startsWith("sha256:") || !ref.includes("@sha256:"))
          throw new DenvError(
            "image_not_found",
            `service ${service}'s image ${ref} is not on this host and has no registry digest to pull it by (an image built on another host stays there)`,
          );
        await this.ctx.runtime.pullImage(ref);
        pulled.push(ref);
      }),
    );
    return { present, pulled, ms: Math.round(performance.now() - started) };
  }
}

function sameSnapshots(a: Record<string, string>, b: Record<string, string>): boolean {
  const ka = Object.keys(a).sort();
  return ka.length === Object.keys(b).length && ka.every((k) => a[k] === b[k]);
}
