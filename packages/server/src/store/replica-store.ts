/**
 * The server replicas sharing one store (`server_replicas`): each its id, its address, when it
 * started and when it was last seen. A replica's row is its heartbeat.
 */
import type { Store } from "./open-store.ts";

export interface ReplicaRow {
  id: string;
  url: string;
  started_at: number;
  seen_at: number;
}

/** Rows cleared as a replica starts: every one (it runs alone), or the last run's at its address. */
export async function clearReplicas(store: Store, atUrl?: string): Promise<void> {
  let q = store.deleteFrom("server_replicas");
  if (atUrl !== undefined) q = q.where("url", "=", atUrl);
  await q.execute();
}

export async function insertReplica(store: Store, row: ReplicaRow): Promise<void> {
  await store.insertInto("server_replicas").values(row).execute();
}

/** A replica's heartbeat; false when its row is gone (another took it for dead). */
export async function replicaSeen(store: Store, id: string, seenAt: number): Promise<boolean> {
  const r = await store
    .updateTable("server_replicas")
    .set({ seen_at: seenAt })
    .where("id", "=", id)
    .executeTakeFirst();
  return Number(r.numUpdatedRows) > 0;
}

export async function deleteReplica(store: Store, id: string): Promise<void> {
  await store.deleteFrom("server_replicas").where("id", "=", id).execute();
}

/** Live replicas (seen since `seenSinceMs`) but `exceptId`. */
export function liveReplicas(store: Store, seenSinceMs: number, exceptId?: string) {
  let q = store.selectFrom("server_replicas").select(["id", "url"]).where("seen_at", ">", seenSinceMs);
  if (exceptId !== undefined) q = q.where("id", "!=", exceptId);
  return q.execute();
}

/** A live replica older than `me` (started earlier, or at once with a smaller id): the leader's rival. */
export function olderLiveReplica(store: Store, me: { id: string; startedAt: number }, seenSinceMs: number) {
  return store
    .selectFrom("server_replicas")
    .select("id")
    .where("id", "!=", me.id)
    .where("seen_at", ">", seenSinceMs)
    .where((eb) =>
      eb.or([
        eb("started_at", "<", me.startedAt),
        eb.and([eb("started_at", "=", me.startedAt), eb("id", "<", me.id)]),
      ]),
    )
    .executeTakeFirst();
}
