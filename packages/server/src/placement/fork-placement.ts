/**
 * Where a fork runs: a connected host that holds the version (the one that took it, or a replica)
 * and has a free create turn, the least busy first. When every holder is busy (or the connected
 * ones are drained or full), a connected host with room takes a replica first (replication.ts) and
 * the fork runs there, the copy's figures in the fork's place evidence. When no holder is
 * connected, the one that took the version is awaited (its join phase waits for a reconnect), as
 * before there were replicas.
 */
import { DenvError } from "@denv/protocol";
import { liveHolders, type Replicator, versionHolders } from "../fleet/replication.ts";
import { hostFreeBytes, teamHosts } from "../store/host-store.ts";
import type { Store } from "../store/open-store.ts";
import type { VersionsTable } from "../store/schema.ts";
import type { StackLifecycle } from "../targets/stack-lifecycle.ts";
import type { Admission } from "./admission.ts";
import { MIN_FREE_BYTES } from "./placement.ts";

export interface ForkPlacement {
  hostId: string;
  evidence: Record<string, unknown>;
}

interface Deps {
  store: Store;
  stacks: StackLifecycle;
  admission: Admission;
  replicator: Replicator;
}

/**
 * Connected hosts of the team with room for another environment, least busy first; a drained host
 * (`denv host drain`) takes nothing new.
 */
export async function hostsWithRoom(
  deps: Pick<Deps, "store" | "stacks" | "admission">,
  teamId: string,
): Promise<string[]> {
  const rows = await teamHosts(deps.store, teamId);
  return rows
    .filter((h) => deps.stacks.hostConnected(h.id) && !h.draining && hostFreeBytes(h) >= MIN_FREE_BYTES)
    .map((h) => h.id)
    .sort((a, b) => deps.admission.load(a).busy - deps.admission.load(b).busy);
}

/** The hosts holding a version that could take a fork of it now, least busy first. */
export async function holdersWithRoom(
  deps: Pick<Deps, "store" | "stacks" | "admission">,
  version: VersionsTable,
): Promise<string[]> {
  // A live version's forks go where its processes are: the host that took it, and the copies
  // that took its process images.
  const holders = new Set(
    isLiveVersion(version)
      ? await liveHolders(deps.store, version)
      : await versionHolders(deps.store, version),
  );
  return (await hostsWithRoom(deps, version.team_id)).filter((h) => holders.has(h));
}

/** Whether a version keeps processes: its snapshot's evidence names the services it holds. */
export function isLiveVersion(version: Pick<VersionsTable, "evidence_json">): boolean {
  try {
    const e = JSON.parse(version.evidence_json) as { live?: { services?: Record<string, unknown> } };
    return Object.keys(e.live?.services ?? {}).length > 0;
  } catch {
    return false;
  }
}

function replicationSummary(r: Awaited<ReturnType<Replicator["replicate"]>>) {
  if (!r) return null;
  return {
    from_host_id: r.from_host_id,
    format: r.format,
    base_version_id: r.base_version_id,
    bytes: r.bytes,
    ms: r.ms,
    mib_per_s: r.mib_per_s,
  };
}

/**
 * A host for one fork. `onHost`: the host a fan-out assigned it (a replica made there first when
 * it does not hold the version); when that fails, placed as any other fork, the failure noted,
 * unless the caller named the host (`pinned`): then the fork fails.
 */
export async function placeFork(
  deps: Deps,
  version: VersionsTable,
  options: { onHost?: string; pinned?: boolean } = {},
): Promise<ForkPlacement> {
  const origin = version.host_id;
  if (!origin) throw new DenvError("invalid_argument", `version ${version.id} is not on a denvd host`);
  const holders = await versionHolders(deps.store, version);
  const notes: string[] = [];
  if (options.onHost) {
    try {
      const made = await deps.replicator.replicate(version, options.onHost);
      return {
        hostId: options.onHost,
        evidence: {
          host_id: options.onHost,
          reason: made
            ? "a fan-out spreads over every host with room: a replica was made here first"
            : "a fan-out spreads over every host with room; this one holds the version",
          replication: replicationSummary(made),
          holders,
        },
      };
    } catch (err) {
      // Asked for by name: there or nowhere.
      if (options.pinned) throw err;
      notes.push(`the replica on ${options.onHost} failed: ${(err as Error).message}`);
    }
  }
  const roomy = new Set(await hostsWithRoom(deps, version.team_id));
  const load = (h: string) => deps.admission.load(h);
  // Ties go to the earlier holder: the host that took the version first.
  const live = holders.filter((h) => roomy.has(h)).sort((a, b) => load(a).busy - load(b).busy);
  const best = live[0];
  if (best && load(best).busy < load(best).parallel)
    return {
      hostId: best,
      evidence: {
        host_id: best,
        reason:
          best === origin
            ? "holds the version's snapshots (snapshot locality)"
            : "holds a replica of the version, and has a free create turn",
        holders,
        ...(notes.length ? { notes } : {}),
      },
    };
  // Every holder busy, or the connected ones drained: a host with room takes a replica, when one
  // can be sent.
  if (best || holders.some((h) => deps.stacks.hostConnected(h))) {
    for (const h of [...roomy].filter((x) => !holders.includes(x) && load(x).busy < load(x).parallel)) {
      try {
        const made = await deps.replicator.replicate(version, h);
        return {
          hostId: h,
          evidence: {
            host_id: h,
            reason: best
              ? "every host holding the version was busy: a replica was made on a host with room"
              : "the hosts holding the version are drained: a replica was made on a host with room",
            replication: replicationSummary(made),
            holders,
          },
        };
      } catch (err) {
        notes.push(`the replica on ${h} failed: ${(err as Error).message}`);
      }
    }
    if (best)
      return {
        hostId: best,
        evidence: {
          host_id: best,
          reason: "every host holding the version is busy: waits for a turn on the least busy",
          holders,
          ...(notes.length ? { notes } : {}),
        },
      };
  }
  // None connected (or none could take a copy): the one that took it, awaited if it is away.
  const connected = holders.find((h) => deps.stacks.hostConnected(h));
  return {
    hostId: connected ?? origin,
    evidence: {
      host_id: connected ?? origin,
      reason: connected
        ? "only drained hosts hold the version, and no other host could take a copy: it runs on one of them"
        : "no host holding the version is connected: the one that took it is awaited",
      holders,
      ...(notes.length ? { notes } : {}),
    },
  };
}
