/**
 * Warm pools: per version, a number of ready forks kept aside. A member is an environment with
 * pool_id set; taking one is a single conditional update (pool_id cleared, the user's name given),
 * so two creates never get the same member.
 */
import { DenvError } from "@denv/protocol";
import { sql } from "kysely";
import { newId, now } from "../ids.ts";
import type { Store } from "./open-store.ts";
import type { EnvironmentsTable, PoolsTable } from "./schema.ts";

/** Members that count towards a pool's size: ready, or on their way. */
const LIVE = ["pending", "running"];

export function teamPools(store: Store, teamId: string): Promise<PoolsTable[]> {
  return store.selectFrom("pools").selectAll().where("team_id", "=", teamId).orderBy("created_at").execute();
}

export function allPools(store: Store): Promise<PoolsTable[]> {
  return store.selectFrom("pools").selectAll().execute();
}

export function poolOfVersion(
  store: Store,
  teamId: string,
  versionId: string,
): Promise<PoolsTable | undefined> {
  return store
    .selectFrom("pools")
    .selectAll()
    .where("team_id", "=", teamId)
    .where("version_id", "=", versionId)
    .executeTakeFirst();
}

export function poolOfImage(store: Store, teamId: string, imageKey: string): Promise<PoolsTable | undefined> {
  return store
    .selectFrom("pools")
    .selectAll()
    .where("team_id", "=", teamId)
    .where("image_key", "=", imageKey)
    .executeTakeFirst();
}

export async function findPool(store: Store, teamId: string, versionId: string): Promise<PoolsTable> {
  const p = await poolOfVersion(store, teamId, versionId);
  if (!p) throw new DenvError("not_found", `version ${versionId} has no warm pool`);
  return p;
}

/** Creates the version's pool, or changes its size (and who declared it). */
export async function upsertPool(
  store: Store,
  v: { team_id: string; project_id: string; version_id: string },
  size: number,
  source: "api" | "x-denv",
  imageKey: string | null = null,
): Promise<PoolsTable> {
  const existing = await poolOfVersion(store, v.team_id, v.version_id);
  if (existing) {
    await store.updateTable("pools").set({ size, source }).where("id", "=", existing.id).execute();
    return { ...existing, size, source };
  }
  const row: PoolsTable = {
    id: newId("pool"),
    team_id: v.team_id,
    project_id: v.project_id,
    version_id: v.version_id,
    size,
    source,
    image_key: imageKey,
    hits: 0,
    misses: 0,
    created_at: now(),
  };
  await store.insertInto("pools").values(row).execute();
  return row;
}

export async function deletePool(store: Store, id: string): Promise<void> {
  await store.deleteFrom("pools").where("id", "=", id).execute();
}

/** A pool's members that are ready or being made. */
export function poolMembers(store: Store, poolId: string): Promise<EnvironmentsTable[]> {
  return store
    .selectFrom("environments")
    .selectAll()
    .where("pool_id", "=", poolId)
    .where("status", "in", LIVE)
    .orderBy("created_at")
    .execute();
}

/**
 * Takes members out of a pool to be destroyed (all, or at most `limit`, the ready ones first): they
 * stay hidden from the team (their pool_id becomes `drained:<pool>`), and no create can take one
 * while it is being destroyed.
 */
export async function withdrawMembers(
  store: Store,
  poolId: string,
  limit?: number,
  onHost?: string,
): Promise<EnvironmentsTable[]> {
  let q = store
    .selectFrom("environments")
    .select("id")
    .where("pool_id", "=", poolId)
    .where("status", "in", LIVE)
    .orderBy("status", "desc")
    .orderBy("created_at", "desc");
  // Only those on one host (a drained host's).
  if (onHost !== undefined) q = q.where("host_id", "=", onHost);
  if (limit !== undefined) q = q.limit(limit);
  const ids = (await q.execute()).map((r) => r.id);
  if (!ids.length) return [];
  return store
    .updateTable("environments")
    .set({ pool_id: `drained:${poolId}` })
    .where("id", "in", ids)
    .where("pool_id", "=", poolId)
    .returningAll()
    .execute();
}

/**
 * Takes a ready member for the caller: it becomes an ordinary environment with the caller's
 * name and its creation time now. One statement picks and takes the oldest ready member, so
 * creates that arrive together (a fan-out) each get their own at the first try; a member another
 * writer took between the pick and the update (PostgreSQL's concurrent transactions) is not
 * updated, and the next try picks again. Undefined when none is ready (the caller forks cold).
 */
export async function takeMember(
  store: Store,
  pool: PoolsTable,
  as: { name: string; sandbox: boolean },
): Promise<EnvironmentsTable | undefined> {
  for (let attempt = 0; attempt < 16; attempt++) {
    const ready = await store
      .selectFrom("environments")
      .select("id")
      .where("pool_id", "=", pool.id)
      .where("status", "=", "running")
      .limit(1)
      .executeTakeFirst();
    if (!ready) return undefined;
    const taken = await store
      .updateTable("environments")
      .set({ pool_id: null, name: as.name, sandbox: as.sandbox ? 1 : 0, created_at: now() })
      .where("pool_id", "=", pool.id)
      .where("status", "=", "running")
      .where("id", "=", (eb) =>
        eb
          .selectFrom("environments as m")
          .select("m.id")
          .where("m.pool_id", "=", pool.id)
          .where("m.status", "=", "running")
          .orderBy("m.created_at")
          .limit(1),
      )
      .returningAll()
      .executeTakeFirst();
    if (taken) return taken;
  }
  return undefined;
}

export async function countPoolUse(store: Store, poolId: string, hit: boolean): Promise<void> {
  await store
    .updateTable("pools")
    .set(hit ? { hits: sql`hits + 1` } : { misses: sql`misses + 1` })
    .where("id", "=", poolId)
    .execute();
}

/**
 * Every pool's figures together, for the server's metrics: members ready to be taken (running, in
 * a pool that is not draining), and creates served from a pool or finding it empty.
 */
export async function poolTotals(store: Store): Promise<{ ready: number; hits: number; misses: number }> {
  const ready = await store
    .selectFrom("environments")
    .select((eb) => eb.fn.countAll<number | string>().as("n"))
    .where("pool_id", "is not", null)
    .where("pool_id", "not like", "drained:%")
    .where("status", "=", "running")
    .executeTakeFirst();
  const uses = await store
    .selectFrom("pools")
    .select((eb) => [
      eb.fn.coalesce(eb.fn.sum<number | string>("hits"), sql<number>`0`).as("hits"),
      eb.fn.coalesce(eb.fn.sum<number | string>("misses"), sql<number>`0`).as("misses"),
    ])
    .executeTakeFirst();
  return { ready: Number(ready?.n ?? 0), hits: Number(uses?.hits ?? 0), misses: Number(uses?.misses ?? 0) };
}

/** The ids of the team's pools. */
export async function teamPoolIds(store: Store, teamId: string): Promise<string[]> {
  return (await store.selectFrom("pools").select("id").where("team_id", "=", teamId).execute()).map(
    (p) => p.id,
  );
}
