/** Replays of versions and their reports. */
import { DenvError } from "@denv/protocol";
import { now } from "../ids.ts";
import type { Store } from "./open-store.ts";
import type { ReplaysTable } from "./schema.ts";

export async function insertReplay(store: Store, row: ReplaysTable): Promise<void> {
  await store.insertInto("replays").values(row).execute();
}

/** Records a replay's end; one already ended (failed by a restart) keeps its record. */
export async function finishReplay(store: Store, id: string, status: string, report: unknown): Promise<void> {
  await store
    .updateTable("replays")
    .set({ status, report_json: JSON.stringify(report), finished_at: now() })
    .where("id", "=", id)
    .where("status", "=", "running")
    .execute();
}

/** One more of a replay's forks has run its episode (or failed to). */
export async function countReplayFork(store: Store, id: string): Promise<void> {
  await store
    .updateTable("replays")
    .set((eb) => ({ forks_done: eb(eb.fn.coalesce("forks_done", eb.lit(0)), "+", 1) }))
    .where("id", "=", id)
    .execute();
}

/** A team's replay; not_found for anything else (another team's included). */
export async function findReplay(store: Store, teamId: string, id: string): Promise<ReplaysTable> {
  const r = await store
    .selectFrom("replays")
    .selectAll()
    .where("id", "=", id)
    .where("team_id", "=", teamId)
    .executeTakeFirst();
  if (!r) throw new DenvError("not_found", `no replay ${id}`);
  return r;
}

export function versionReplays(store: Store, teamId: string, versionId: string): Promise<ReplaysTable[]> {
  return store
    .selectFrom("replays")
    .selectAll()
    .where("team_id", "=", teamId)
    .where("version_id", "=", versionId)
    .orderBy("created_at", "desc")
    .execute();
}

/** After a restart: replays the stopped server was running have no one to finish them; failed. */
export async function failRunningReplays(store: Store): Promise<ReplaysTable[]> {
  const running = await store.selectFrom("replays").selectAll().where("status", "=", "running").execute();
  for (const r of running)
    await finishReplay(store, r.id, "failed", { error: "the server stopped while the replay ran" });
  return running;
}
