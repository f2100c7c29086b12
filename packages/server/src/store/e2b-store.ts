/**
 * What the E2B surface keeps beside denv's own records: its sandboxes (each an environment of
 * denv's, with the key that made it, its timeout and whether it is paused) and its named
 * snapshots (each a denv version). Reads by a caller take the caller's team.
 */
import type { Store } from "./open-store.ts";
import type { E2bSandboxesTable, E2bSnapshotsTable } from "./schema.ts";

export async function insertE2bSandbox(store: Store, row: E2bSandboxesTable): Promise<void> {
  await store.insertInto("e2b_sandboxes").values(row).execute();
}

/** A sandbox by its environment, whoever's it is (the envd gateway checks the token after). */
export function e2bSandbox(store: Store, environmentId: string): Promise<E2bSandboxesTable | undefined> {
  return store
    .selectFrom("e2b_sandboxes")
    .selectAll()
    .where("environment_id", "=", environmentId)
    .executeTakeFirst();
}

/** A sandbox of the team's, by its environment. */
export function teamE2bSandbox(
  store: Store,
  teamId: string,
  environmentId: string,
): Promise<E2bSandboxesTable | undefined> {
  return store
    .selectFrom("e2b_sandboxes")
    .selectAll()
    .where("environment_id", "=", environmentId)
    .where("team_id", "=", teamId)
    .executeTakeFirst();
}

export function teamE2bSandboxes(store: Store, teamId: string): Promise<E2bSandboxesTable[]> {
  return store.selectFrom("e2b_sandboxes").selectAll().where("team_id", "=", teamId).execute();
}

/** A sandbox's end, its pause (the version it was paused at) or both. */
export async function updateE2bSandbox(
  store: Store,
  environmentId: string,
  set: Partial<Pick<E2bSandboxesTable, "end_at_ms" | "paused_version_id">>,
): Promise<void> {
  await store.updateTable("e2b_sandboxes").set(set).where("environment_id", "=", environmentId).execute();
}

export async function deleteE2bSandbox(store: Store, environmentId: string): Promise<void> {
  await store.deleteFrom("e2b_sandboxes").where("environment_id", "=", environmentId).execute();
}

/** Running sandboxes whose timeout has passed (a paused one waits for its resume). */
export function dueE2bSandboxes(store: Store, nowMs: number): Promise<E2bSandboxesTable[]> {
  return store
    .selectFrom("e2b_sandboxes")
    .selectAll()
    .where("end_at_ms", "<=", nowMs)
    .where("paused_version_id", "is", null)
    .execute();
}

export async function insertE2bSnapshot(store: Store, row: E2bSnapshotsTable): Promise<void> {
  await store.insertInto("e2b_snapshots").values(row).execute();
}

/** The version the team's newest snapshot of that name is. */
export async function namedE2bSnapshot(
  store: Store,
  teamId: string,
  name: string,
): Promise<string | undefined> {
  return (
    await store
      .selectFrom("e2b_snapshots")
      .select("version_id")
      .where("team_id", "=", teamId)
      .where("name", "=", name)
      .orderBy("created_at_ms", "desc")
      .executeTakeFirst()
  )?.version_id;
}

/** The team's snapshots, newest first: of one sandbox, of one name, at most `limit`. */
export function teamE2bSnapshots(
  store: Store,
  teamId: string,
  filter: { sandboxId?: string; name?: string; limit: number },
): Promise<E2bSnapshotsTable[]> {
  let q = store.selectFrom("e2b_snapshots").selectAll().where("team_id", "=", teamId);
  if (filter.sandboxId) q = q.where("sandbox_id", "=", filter.sandboxId);
  if (filter.name) q = q.where("name", "=", filter.name);
  return q.orderBy("created_at_ms", "desc").limit(filter.limit).execute();
}
