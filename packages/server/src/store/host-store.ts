/** Hosts: joined with a single-use token, known by the hash of their secret. */
import { DenvError } from "@denv/protocol";
import { hashSecret, newId, newSecret, now } from "../ids.ts";
import type { Store } from "./open-store.ts";
import type { HostsTable } from "./schema.ts";

/**
 * Trades a join token for a new host and its secret. The token is single use: of two hosts
 * racing with one token, only the first claim succeeds.
 */
export async function redeemJoinToken(
  store: Store,
  token: string,
  name: string | undefined,
): Promise<{ hostId: string; secret: string }> {
  const row = await store
    .selectFrom("join_tokens")
    .selectAll()
    .where("token_hash", "=", hashSecret(token))
    .executeTakeFirst();
  if (!row)
    throw new DenvError(
      "unauthenticated",
      "this join token is not valid; mint one with `denv host join-token`",
    );
  if (row.used_at)
    throw new DenvError(
      "unauthenticated",
      "this join token was already used; mint a new one with `denv host join-token`",
    );
  if (Date.parse(row.expires_at) < Date.now())
    throw new DenvError(
      "unauthenticated",
      "this join token has expired; mint a new one with `denv host join-token`",
    );
  const hostId = newId("host");
  const claimed = await store
    .updateTable("join_tokens")
    .set({ used_at: now(), host_id: hostId })
    .where("id", "=", row.id)
    .where("used_at", "is", null)
    .executeTakeFirst();
  if (Number(claimed.numUpdatedRows) !== 1)
    throw new DenvError("unauthenticated", "this join token was already used");
  const secret = newSecret("dhs");
  await store
    .insertInto("hosts")
    .values({
      id: hostId,
      team_id: row.team_id,
      name: name ?? hostId,
      secret_hash: hashSecret(secret),
      arch: null,
      storage: null,
      capacity_json: null,
      version: null,
      last_seen: null,
      connected: 0,
      draining: 0,
      replica_id: null,
      created_at: now(),
    })
    .execute();
  return { hostId, secret };
}

export function hostBySecret(store: Store, secret: string): Promise<HostsTable | undefined> {
  return store
    .selectFrom("hosts")
    .selectAll()
    .where("secret_hash", "=", hashSecret(secret))
    .executeTakeFirst();
}

export function teamHosts(store: Store, teamId: string): Promise<HostsTable[]> {
  return store.selectFrom("hosts").selectAll().where("team_id", "=", teamId).execute();
}

/** What a host's hello or heartbeat reported. */
export async function updateHost(
  store: Store,
  hostId: string,
  fields: Partial<
    Pick<
      HostsTable,
      | "arch"
      | "storage"
      | "capacity_json"
      | "version"
      | "last_seen"
      | "connected"
      | "replica_id"
      | "gpus_json"
    >
  >,
): Promise<void> {
  await store.updateTable("hosts").set(fields).where("id", "=", hostId).execute();
}

/** A host's connection to this replica closed: not connected, unless another replica holds it now. */
export async function hostDisconnected(
  store: Store,
  hostId: string,
  replicaId: string | null,
): Promise<void> {
  await store
    .updateTable("hosts")
    .set({ connected: 0 })
    .where("id", "=", hostId)
    .where((eb) => (replicaId ? eb("replica_id", "=", replicaId) : eb("replica_id", "is", null)))
    .execute();
}

/** Free bytes a host last reported (0 when it never did). */
export function hostFreeBytes(h: Pick<HostsTable, "capacity_json">): number {
  return h.capacity_json ? (JSON.parse(h.capacity_json).free_bytes as number) : 0;
}

/** What a team's host holds: its versions (newest first), its warm pools with their ready members, its environments. */
export interface HostHoldings {
  versions: string[];
  pools: { version_id: string; size: number; ready: number }[];
  environments: number;
}

export async function hostHoldings(store: Store, teamId: string): Promise<Map<string, HostHoldings>> {
  const out = new Map<string, HostHoldings>();
  const of = (hostId: string) => {
    let h = out.get(hostId);
    if (!h) {
      h = { versions: [], pools: [], environments: 0 };
      out.set(hostId, h);
    }
    return h;
  };
  const versions = await store
    .selectFrom("versions")
    .select(["id", "host_id"])
    .where("team_id", "=", teamId)
    .where("host_id", "is not", null)
    .orderBy("created_at", "desc")
    .execute();
  for (const v of versions) of(v.host_id as string).versions.push(v.id);
  // Copies on other hosts (fleet/replication.ts) are held there too.
  const replicas = await store
    .selectFrom("version_replicas")
    .innerJoin("versions", "versions.id", "version_replicas.version_id")
    .select(["version_replicas.version_id", "version_replicas.host_id"])
    .where("version_replicas.team_id", "=", teamId)
    .orderBy("versions.created_at", "desc")
    .execute();
  for (const r of replicas) of(r.host_id).versions.push(r.version_id);
  const pools = await store
    .selectFrom("pools")
    .innerJoin("versions", "versions.id", "pools.version_id")
    .select(["pools.id", "pools.version_id", "pools.size", "versions.host_id"])
    .where("pools.team_id", "=", teamId)
    .where("versions.host_id", "is not", null)
    .execute();
  const members = await store
    .selectFrom("environments")
    .select(["pool_id", "host_id"])
    .where("team_id", "=", teamId)
    .where("pool_id", "is not", null)
    .where("status", "=", "running")
    .execute();
  // A pool spans the hosts holding its version: each host shows the members ready on it.
  for (const p of pools) {
    const mine = members.filter((m) => m.pool_id === p.id);
    const on = new Set([p.host_id as string, ...mine.map((m) => m.host_id).filter((h): h is string => !!h)]);
    for (const h of on)
      of(h).pools.push({
        version_id: p.version_id,
        size: p.size,
        ready: mine.filter((m) => m.host_id === h).length,
      });
  }
  const envs = await store
    .selectFrom("environments")
    .select(["host_id"])
    .where("team_id", "=", teamId)
    .where("host_id", "is not", null)
    .where("status", "not in", ["destroyed", "failed"])
    .where("pool_id", "is", null)
    .execute();
  for (const e of envs) of(e.host_id as string).environments++;
  return out;
}

/** What the connected hosts last reported (their hello and heartbeats), summed, for /metrics. */
export async function hostFigureTotals(store: Store, isConnected: (hostId: string) => boolean) {
  const rows = await store.selectFrom("hosts").select(["id", "capacity_json"]).execute();
  const out = {
    disk_total_bytes: 0,
    disk_free_bytes: 0,
    memory_total_bytes: 0,
    memory_free_bytes: 0,
    cpus: 0,
  };
  for (const h of rows) {
    if (!isConnected(h.id) || !h.capacity_json) continue;
    const c = JSON.parse(h.capacity_json) as Record<string, unknown>;
    const n = (k: string) => (typeof c[k] === "number" && Number.isFinite(c[k]) ? (c[k] as number) : 0);
    out.disk_total_bytes += n("total_bytes");
    out.disk_free_bytes += n("free_bytes");
    out.memory_total_bytes += n("memory_bytes");
    out.memory_free_bytes += n("memory_free_bytes");
    out.cpus += n("cpus");
  }
  return out;
}

/** A host draining (it takes no new environments, replicas or pool members) or not. */
export async function setHostDraining(store: Store, hostId: string, draining: boolean): Promise<void> {
  await store
    .updateTable("hosts")
    .set({ draining: draining ? 1 : 0 })
    .where("id", "=", hostId)
    .execute();
}

export function hostById(store: Store, hostId: string): Promise<HostsTable | undefined> {
  return store.selectFrom("hosts").selectAll().where("id", "=", hostId).executeTakeFirst();
}

/** Hosts connected to other live replicas (seen since `seenSinceMs`): which replica holds each. */
export function hostsOnOtherReplicas(store: Store, replicaId: string, seenSinceMs: number) {
  return store
    .selectFrom("hosts")
    .innerJoin("server_replicas", "server_replicas.id", "hosts.replica_id")
    .select(["hosts.id as host_id", "server_replicas.id as id", "server_replicas.url as url"])
    .where("hosts.connected", "=", 1)
    .where("server_replicas.id", "!=", replicaId)
    .where("server_replicas.seen_at", ">", seenSinceMs)
    .execute();
}

/** Hosts not seen since `cutoff` (an ISO time), or never. */
export function hostsUnseenSince(store: Store, cutoff: string) {
  return store
    .selectFrom("hosts")
    .select(["id", "name", "last_seen"])
    .where((eb) => eb.or([eb("last_seen", "is", null), eb("last_seen", "<", cutoff)]))
    .execute();
}

/**
 * A host's running and frozen environments marked lost, but those a deployment works on; the
 * host's staleness is checked in the same statement (a hello since it was read wins). How many.
 */
export async function markHostEnvironmentsLost(
  store: Store,
  hostId: string,
  cutoff: string,
  busyEnvironmentIds: string[],
): Promise<number> {
  let q = store
    .updateTable("environments")
    .set({ status: "lost" })
    .where("host_id", "in", (eb) =>
      eb
        .selectFrom("hosts")
        .select("id")
        .where("id", "=", hostId)
        .where((w) => w.or([w("last_seen", "is", null), w("last_seen", "<", cutoff)])),
    )
    .where("status", "in", ["running", "frozen"]);
  if (busyEnvironmentIds.length) q = q.where("id", "not in", busyEnvironmentIds);
  return Number((await q.executeTakeFirst()).numUpdatedRows);
}

/** What admission reads of a host: the capacity it last reported. */
export async function hostCapacityJson(store: Store, hostId: string): Promise<string | null> {
  return (
    (await store.selectFrom("hosts").select("capacity_json").where("id", "=", hostId).executeTakeFirst())
      ?.capacity_json ?? null
  );
}

/** A host of the team's, by id. */
export function teamHost(store: Store, teamId: string, hostId: string): Promise<HostsTable | undefined> {
  return store
    .selectFrom("hosts")
    .selectAll()
    .where("id", "=", hostId)
    .where("team_id", "=", teamId)
    .executeTakeFirst();
}

/** A host of the team's by the name it joined as. */
export function teamHostNamed(store: Store, teamId: string, name: string): Promise<HostsTable | undefined> {
  return store
    .selectFrom("hosts")
    .selectAll()
    .where("team_id", "=", teamId)
    .where("name", "=", name)
    .executeTakeFirst();
}
