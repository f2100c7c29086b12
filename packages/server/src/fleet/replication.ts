/**
 * Versions that move between a team's hosts. A version is taken on one host; a replica is a copy
 * of its snapshots on another, made by relaying each volume's stream (the storage driver's own:
 * `btrfs send`, incremental against the newest version of the same environment both hosts hold;
 * `zfs send`; or a tar between different drivers) from the host that holds it, through this
 * server, to the host that takes it, over the hosts' own connections (a host never listens on a
 * port). The stream mux's credit gives flow control end to end: the sender reads no faster than
 * the receiver writes. Both ends count the bytes' sha256; the receiver keeps what arrived staged
 * until adopt_version checks its count against the sender's, so a cut or altered stream never
 * becomes a version there. The images follow by digest from their registry, pulled by the
 * receiving host while the snapshots travel.
 */
import { pipeline } from "node:stream/promises";
import { DenvError, isDenvError, type MuxStream, type OpResult, type ResolvedSpec } from "@denv/protocol";
import type { SecretBox } from "../clouds/secret-box.ts";
import { now } from "../ids.ts";
import { serverLog } from "../server-log.ts";
import type { ReplicationObserver } from "../server-metrics.ts";
import { teamHost } from "../store/host-store.ts";
import type { Store } from "../store/open-store.ts";
import type { HostsTable, VersionsTable } from "../store/schema.ts";
import {
  deleteVersionCopy,
  earlierVersionsOnHosts,
  hasVersionCopy,
  insertVersionCopy,
  leftoverVersionCopies,
  versionCopies,
  versionCopyEvidence,
  versionRow,
} from "../store/version-store.ts";
import type {
  StackLifecycle,
  Streaming,
  TransferOutcome,
  VersionRecord,
} from "../targets/stack-lifecycle.ts";

type Format = OpResult<"describe_version">["formats"][number];

/** What a replica's making measured: kept with it and in the evidence of a fork that waited for it. */
export interface ReplicaEvidence {
  version_id: string;
  from_host_id: string;
  to_host_id: string;
  format: Format;
  /** The version an incremental stream was based on (both hosts held it); null: a full stream. */
  base_version_id: string | null;
  volumes: Record<string, { snapshot_id: string; bytes: number; sha256: string; ms: number }>;
  bytes: number;
  images: { present: string[]; pulled: string[]; ms: number };
  /**
   * A live version's process images, per service, as relayed; the services whose processes the
   * host took (all of them, or none where its CPU lacks a flag they were taken with: refused says so).
   */
  live?: {
    services: Record<string, { bytes: number; sha256: string; ms: number }>;
    held: string[];
    refused?: string;
  };
  ms: number;
  mib_per_s: number;
}

/** The hosts that hold a version's snapshots: the one that took it first, then its replicas, oldest first. */
export async function versionHolders(
  store: Store,
  v: Pick<VersionsTable, "id" | "host_id">,
): Promise<string[]> {
  if (!v.host_id) return [];
  const replicas = await versionCopies(store, [v.id]);
  return [v.host_id, ...replicas.map((r) => r.host_id).filter((h) => h !== v.host_id)];
}

/**
 * Copies left behind by a deleted version: rows of version_replicas whose version is gone. They are
 * written when a version is deleted while a host holding it is away (and when a copy finishes just
 * as its version is deleted); each copy is deleted on its host once the host is connected, then
 * its row. Answers how many went.
 */
export async function deleteLeftoverCopies(store: Store, hosts: StackLifecycle): Promise<number> {
  const left = await leftoverVersionCopies(store);
  let gone = 0;
  for (const r of left) {
    if (!hosts.hostConnected(r.host_id)) continue;
    try {
      await hosts.deleteVersion(r.host_id, r.version_id, { waitForHostMs: 0 });
    } catch {
      continue; // still being read by a transfer, or the host just left: the next pass
    }
    await deleteVersionCopy(store, r.version_id, r.host_id);
    gone++;
  }
  return gone;
}

/** Records that a host away still holds a deleted version's snapshots (deleteLeftoverCopies). */
export async function leaveCopy(
  store: Store,
  v: Pick<VersionsTable, "id" | "team_id">,
  hostId: string,
): Promise<void> {
  if (await hasVersionCopy(store, v.id, hostId)) return;
  await insertVersionCopy(store, {
    version_id: v.id,
    host_id: hostId,
    team_id: v.team_id,
    source_host_id: hostId,
    format: "left",
    evidence_json: "{}",
    created_at: now(),
  });
}

/** The hosts holding each of the given versions. */
export async function holdersOf(store: Store, versions: Pick<VersionsTable, "id" | "host_id">[]) {
  const out = new Map<string, string[]>();
  for (const v of versions) out.set(v.id, v.host_id ? [v.host_id] : []);
  if (!versions.length) return out;
  const replicas = await versionCopies(
    store,
    versions.map((v) => v.id),
  );
  for (const r of replicas) out.get(r.version_id)?.push(r.host_id);
  return out;
}

/** How a snapshot travels from a host with one driver to a host with another. */
export function transferFormat(
  from: { storage: string; formats: Format[] },
  to: { storage: string | null },
): Format | null {
  const native = from.formats[0];
  if (native && from.storage === to.storage) return native;
  // A tar is taken by the drivers with plain directories (btrfs, dir), not by zfs.
  if (from.formats.includes("tar") && (to.storage === "btrfs" || to.storage === "dir")) return "tar";
  return null;
}

interface ReplicatorDeps {
  store: Store;
  hosts: StackLifecycle;
  /** Opens the version's sealed spec: the receiving host gets the control plane's, not the sender's. */
  secrets: Pick<SecretBox, "openText">;
  observer?: ReplicationObserver;
}

export class Replicator {
  private readonly deps: ReplicatorDeps;
  /** (version, host) → the replica being made: a second caller waits for the same one. */
  private readonly inFlight = new Map<string, Promise<ReplicaEvidence | null>>();

  constructor(deps: ReplicatorDeps) {
    this.deps = deps;
  }

  /**
   * A replica of the version on the host; resolves to what making it measured, or null when the
   * host already held the version.
   */
  replicate(version: VersionsTable, toHostId: string): Promise<ReplicaEvidence | null> {
    const key = `${version.id} ${toHostId}`;
    let p = this.inFlight.get(key);
    if (!p) {
      p = this.make(version, toHostId).finally(() => this.inFlight.delete(key));
      this.inFlight.set(key, p);
    }
    return p;
  }

  private async make(version: VersionsTable, toHostId: string): Promise<ReplicaEvidence | null> {
    const { store, hosts } = this.deps;
    if (!version.host_id)
      throw new DenvError(
        "not_supported",
        `version ${version.id} is a snapshot at target ${version.target_id}, a hosted provider: it is not copied between hosts`,
      );
    const holders = await versionHolders(store, version);
    if (holders.includes(toHostId)) return null;
    const dest = await teamHost(store, version.team_id, toHostId);
    if (!dest) throw new DenvError("not_found", `no host ${toHostId}`);
    if (!hosts.hostConnected(dest.id))
      throw new DenvError(
        "host_unavailable",
        `host ${dest.name} is not connected: it cannot take a replica now`,
      );
    // A copy the host adopted whose record here was never written (this server stopped between
    // the two): recorded now, nothing sent again.
    const held = await hosts.describeVersion(dest.id, version.id).catch(() => null);
    if (held && held.version.id === version.id) {
      await insertVersionCopy(store, {
        version_id: version.id,
        host_id: dest.id,
        team_id: version.team_id,
        source_host_id: dest.id,
        format: "adopted",
        evidence_json: JSON.stringify({ recorded_from: "the host's own record", version_id: version.id }),
        created_at: now(),
      });
      return null;
    }
    const source = holders.find((h) => hosts.hostConnected(h));
    if (!source)
      throw new DenvError(
        "host_unavailable",
        `no host holding version ${version.id} is connected (${holders.length} hold it): nothing can send it`,
      );
    const started = performance.now();
    const described = await hosts.describeVersion(source, version.id);
    const format = transferFormat(described, dest);
    if (!format)
      throw new DenvError(
        "invalid_argument",
        `host ${dest.name} (${dest.storage ?? "unknown"} storage) cannot take a version from a ${described.storage} host: no stream format both drivers share`,
      );
    return this.observed(format, started, () =>
      this.transfer(version, source, dest, described, format, started),
    );
  }

  /** Reports a copy's end (metrics) and passes its outcome on. */
  private async observed(
    format: Format,
    started: number,
    fn: () => Promise<ReplicaEvidence>,
  ): Promise<ReplicaEvidence> {
    const seconds = () => (performance.now() - started) / 1000;
    try {
      const r = await fn();
      this.deps.observer?.replicationEnded("succeeded", format, r.bytes, seconds());
      return r;
    } catch (err) {
      this.deps.observer?.replicationEnded("failed", format, 0, seconds());
      throw err;
    }
  }

  private async transfer(
    version: VersionsTable,
    source: string,
    dest: HostsTable,
    described: OpResult<"describe_version">,
    format: Format,
    started: number,
  ): Promise<ReplicaEvidence> {
    const { store, hosts } = this.deps;
    const base = format === "btrfs-send" ? await this.sharedBase(version, source, dest.id) : null;
    const baseSnapshots = base ? (await hosts.describeVersion(source, base)).version.snapshots : {};
    // The sending host says which snapshots make the version and when it was frozen; what the
    // version is (its id, spec and images) is the control plane's record, so a host cannot hand
    // another host a different spec under this version's name.
    if (described.version.id !== version.id)
      throw new DenvError(
        "unavailable",
        `host ${source} described ${described.version.id} when asked for ${version.id}: nothing was sent`,
      );
    const { live: describedLive, ...describedRest } = described.version;
    const live = liveToCopy(version, describedLive);
    const rec: VersionRecord = {
      ...describedRest,
      spec: JSON.parse(this.deps.secrets.openText(version.spec_json)) as ResolvedSpec,
      spec_hash: version.spec_hash,
      images: JSON.parse(version.images_json) as Record<string, string>,
      ...(live ? { live } : {}),
    };
    // The images are pulled while the snapshots travel.
    const images = hosts.ensureImages(
      dest.id,
      Object.fromEntries(
        Object.entries(rec.spec.services).map(([name, s]) => [name, s.image_pinned ?? s.image]),
      ),
    );
    images.catch(() => {});
    const volumes: ReplicaEvidence["volumes"] = {};
    const snapshotIds = Object.values(rec.snapshots);
    try {
      await Promise.all(
        Object.entries(rec.snapshots).map(async ([volume, snapshotId]) => {
          const baseSnapshot = base ? baseSnapshots[volume] : undefined;
          const sent = await this.relay(source, dest, {
            versionId: version.id,
            volume,
            snapshotId,
            format,
            ...(base && baseSnapshot ? { baseVersionId: base, baseSnapshotId: baseSnapshot } : {}),
          });
          volumes[volume] = { snapshot_id: snapshotId, ...sent };
        }),
      );
      // The process images follow, one service at a time (each a CRIU dump and a layer).
      const liveSent: NonNullable<ReplicaEvidence["live"]>["services"] = {};
      for (const service of Object.keys(live?.services ?? {})) {
        const req = { version_id: version.id, service };
        liveSent[service] = await this.pipe(
          `service ${service}'s process images`,
          (o) => hosts.receiveLive(dest.id, req, o),
          (o) => hosts.sendLive(source, req, o),
        );
      }
      const pulled = await images;
      const adopted = await hosts.adoptVersion(
        dest.id,
        rec,
        Object.fromEntries(Object.values(volumes).map((v) => [v.snapshot_id, v.sha256])),
        live ? Object.fromEntries(Object.entries(liveSent).map(([svc, v]) => [svc, v.sha256])) : undefined,
      );
      const ms = Math.round(performance.now() - started);
      const bytes = Object.values(volumes).reduce((n, v) => n + v.bytes, 0);
      const evidence: ReplicaEvidence = {
        version_id: version.id,
        from_host_id: source,
        to_host_id: dest.id,
        format,
        base_version_id: base,
        volumes,
        bytes,
        images: pulled,
        ...(live
          ? {
              live: {
                services: liveSent,
                held: adopted.live ?? [],
                ...(adopted.live_refused ? { refused: adopted.live_refused } : {}),
              },
            }
          : {}),
        ms,
        mib_per_s: Math.round((bytes / 1024 ** 2 / Math.max(ms, 1)) * 1000 * 10) / 10,
      };
      await insertVersionCopy(store, {
        version_id: version.id,
        host_id: dest.id,
        team_id: version.team_id,
        source_host_id: source,
        format,
        evidence_json: JSON.stringify(evidence),
        created_at: now(),
      });
      serverLog().info(
        { version_id: version.id, from_host_id: source, to_host_id: dest.id, format, bytes, ms },
        "version copied",
      );
      // Deleted while it travelled: the copy just made goes too (or at the next pass, if it can't now).
      const still = await versionRow(store, version.id);
      if (!still) {
        await deleteLeftoverCopies(store, hosts);
        throw new DenvError("not_found", `version ${version.id} was deleted while it was copied`);
      }
      return evidence;
    } catch (err) {
      // Nothing half-received outlives the attempt: the next one starts clean.
      await hosts.discardReceived(dest.id, snapshotIds, live ? version.id : undefined).catch(() => {});
      throw err;
    }
  }

  /** Relays one volume's stream from the sending host to the receiving one; both counts must agree. */
  private relay(
    source: string,
    dest: HostsTable,
    t: {
      versionId: string;
      volume: string;
      snapshotId: string;
      format: Format;
      baseVersionId?: string;
      baseSnapshotId?: string;
    },
  ): Promise<{ bytes: number; sha256: string; ms: number }> {
    const { hosts } = this.deps;
    return this.pipe(
      t.snapshotId,
      (options) =>
        hosts.receiveSnapshot(
          dest.id,
          {
            version_id: t.versionId,
            snapshot_id: t.snapshotId,
            ...(t.baseSnapshotId ? { base_snapshot_id: t.baseSnapshotId } : {}),
            format: t.format,
          },
          options,
        ),
      (options) =>
        hosts.sendSnapshot(
          source,
          {
            version_id: t.versionId,
            volume: t.volume,
            ...(t.baseVersionId ? { base_version_id: t.baseVersionId } : {}),
            format: t.format,
          },
          options,
        ),
    );
  }

  /**
   * One stream from the sending host's verb to the receiving host's (the receiver opened first, so
   * nothing is sent that has nowhere to go); both counts must agree.
   */
  private async pipe(
    what: string,
    receive: (options: { timeoutMs: number }) => Promise<Streaming<TransferOutcome, [MuxStream]>>,
    send: (options: { timeoutMs: number }) => Promise<Streaming<TransferOutcome, [MuxStream]>>,
  ): Promise<{ bytes: number; sha256: string; ms: number }> {
    const timeoutMs = 2 * 60 * 60_000;
    const receiving = await receive({ timeoutMs });
    const [into] = receiving.streams;
    let sending: Streaming<TransferOutcome, [MuxStream]>;
    try {
      sending = await send({ timeoutMs });
    } catch (err) {
      into.destroy(err as Error);
      await receiving.result.catch(() => {});
      throw err;
    }
    const [from] = sending.streams;
    // Read once, by the relay: each frame is freed as it goes on, not left for the collector.
    from.handsOverReads = true;
    // A failure on either side fails both streams: the receiver never takes a cut stream as whole.
    const relayed = pipeline(from, into);
    relayed.catch(() => {});
    const [sent, got, moved] = await Promise.allSettled([sending.result, receiving.result, relayed]);
    if (sent.status === "rejected") {
      into.destroy(new Error("the sending host failed"));
      // A sender told "the other side closed the stream" failed because the relay did: say why.
      if (moved.status === "rejected" && isDenvError(sent.reason))
        throw new DenvError(
          sent.reason.code,
          `${sent.reason.message} (the relay: ${(moved.reason as Error).message})`,
        );
      throw sent.reason;
    }
    if (got.status === "rejected") throw got.reason;
    if (moved.status === "rejected")
      throw new DenvError("unavailable", `the relay of ${what} failed: ${(moved.reason as Error).message}`);
    if (sent.value.sha256 !== got.value.sha256 || sent.value.bytes !== got.value.bytes)
      throw new DenvError(
        "storage_error",
        `${what} arrived as ${got.value.bytes} bytes (sha256 ${got.value.sha256}) but was sent as ${sent.value.bytes} (sha256 ${sent.value.sha256})`,
      );
    return { bytes: sent.value.bytes, sha256: sent.value.sha256, ms: Math.max(sent.value.ms, got.value.ms) };
  }

  /** The newest earlier version of the same environment that both hosts hold: an incremental stream's base. */
  private async sharedBase(version: VersionsTable, source: string, dest: string): Promise<string | null> {
    const earlier = await earlierVersionsOnHosts(this.deps.store, version, 20);
    const holders = await holdersOf(this.deps.store, earlier);
    for (const v of earlier) {
      const h = holders.get(v.id) ?? [];
      if (h.includes(source) && h.includes(dest)) return v.id;
    }
    return null;
  }
}

type WireLive = NonNullable<VersionRecord["live"]>;

/**
 * What a copy of a live version carries of its processes: the services and their digests as the
 * control plane recorded them when the version was taken (never the sending host's say: a host
 * cannot hand another host other images under this version's name), with the sending host's
 * sizes and CPU flags. None where the record has no digest for a service (older versions).
 */
export function liveToCopy(
  version: Pick<VersionsTable, "evidence_json">,
  described: WireLive | undefined,
): WireLive | undefined {
  if (!described) return undefined;
  let recorded: Record<string, { digest?: string }> = {};
  try {
    recorded =
      (JSON.parse(version.evidence_json) as { live?: { services?: Record<string, { digest?: string }> } })
        .live?.services ?? {};
  } catch {
    return undefined;
  }
  const services: WireLive["services"] = {};
  for (const [svc, s] of Object.entries(recorded)) {
    const sent = Object.hasOwn(described.services, svc) ? described.services[svc] : undefined;
    if (!s.digest || !sent) return undefined;
    services[svc] = { ...sent, digest: s.digest };
  }
  if (!Object.keys(services).length) return undefined;
  return { ...described, services };
}

/**
 * The hosts that hold a live version's processes: the one that took it, and each copy that took
 * every service's process images (a copy whose CPU refused them holds the volumes only).
 */
export async function liveHolders(store: Store, v: Pick<VersionsTable, "id" | "host_id">): Promise<string[]> {
  if (!v.host_id) return [];
  const copies = await versionCopyEvidence(store, v.id);
  const held = copies.filter((c) => {
    try {
      const e = JSON.parse(c.evidence_json) as ReplicaEvidence;
      return !!e.live && !e.live.refused && e.live.held.length === Object.keys(e.live.services).length;
    } catch {
      return false;
    }
  });
  return [v.host_id, ...held.map((c) => c.host_id).filter((h) => h !== v.host_id)];
}
