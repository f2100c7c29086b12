/** Environments: a project's named, running stacks (alpha, forks, sandboxes). */
import { DenvError } from "@denv/protocol";
import { newId, now } from "../ids.ts";
import type { Store } from "./open-store.ts";
import type { EnvironmentsTable, ProjectsTable } from "./schema.ts";

/**
 * A team's live environment by id, name, or PROJECT/NAME; not_found for anything else (another
 * team's included), conflict when a bare name is used in several projects.
 */
export async function findEnvironment(store: Store, teamId: string, ref: string): Promise<EnvironmentsTable> {
  const [projectName, envName] = ref.includes("/") ? (ref.split("/", 2) as [string, string]) : [null, ref];
  let q = store
    .selectFrom("environments")
    .innerJoin("projects", "projects.id", "environments.project_id")
    .selectAll("environments")
    .where("environments.team_id", "=", teamId)
    .where("environments.status", "!=", "destroyed")
    .where("environments.pool_id", "is", null);
  if (projectName) q = q.where("projects.name", "=", projectName).where("environments.name", "=", envName);
  else q = q.where((eb) => eb.or([eb("environments.id", "=", ref), eb("environments.name", "=", ref)]));
  const rows = await q.execute();
  if (rows.length === 0) throw new DenvError("not_found", `no environment ${ref}`);
  if (rows.length > 1)
    throw new DenvError(
      "conflict",
      `${ref} names environments in several projects; use PROJECT/${ref} or the id`,
    );
  return rows[0] as EnvironmentsTable;
}

export async function environmentById(store: Store, id: string): Promise<EnvironmentsTable> {
  const env = await store.selectFrom("environments").selectAll().where("id", "=", id).executeTakeFirst();
  if (!env) throw new DenvError("not_found", `no environment ${id}`);
  return env;
}

/** A team's environments that are not destroyed (warm pools' members are not theirs yet). */
/** An environment by its id, or undefined (the caller decides what its absence means). */
export function environmentRow(store: Store, id: string): Promise<EnvironmentsTable | undefined> {
  return store.selectFrom("environments").selectAll().where("id", "=", id).executeTakeFirst();
}

export function teamEnvironments(store: Store, teamId: string): Promise<EnvironmentsTable[]> {
  return store
    .selectFrom("environments")
    .selectAll()
    .where("team_id", "=", teamId)
    .where("status", "!=", "destroyed")
    .where("pool_id", "is", null)
    .execute();
}

export function environmentNamed(
  store: Store,
  projectId: string,
  name: string,
): Promise<EnvironmentsTable | undefined> {
  return store
    .selectFrom("environments")
    .selectAll()
    .where("project_id", "=", projectId)
    .where("name", "=", name)
    .executeTakeFirst();
}

/** The project's environment of that name, made (pending) when there is none. */
export async function findOrCreateEnvironment(
  store: Store,
  project: ProjectsTable,
  name: string,
  sandbox = false,
  poolId: string | null = null,
): Promise<EnvironmentsTable> {
  const existing = await environmentNamed(store, project.id, name);
  if (existing) return existing;
  const env: EnvironmentsTable = {
    id: newId("env"),
    team_id: project.team_id,
    project_id: project.id,
    name,
    status: "pending",
    host_id: null,
    stack_id: null,
    current_version_id: null,
    parent_version_id: null,
    sandbox: sandbox ? 1 : 0,
    target_id: "denvd",
    pool_id: poolId,
    created_at: now(),
  };
  try {
    await store.insertInto("environments").values(env).execute();
  } catch (err) {
    // Made by another request (or another server replica) between the read and the insert: the
    // (project, name) pair is unique, so that one is the environment.
    const made = await environmentNamed(store, project.id, name);
    if (made) return made;
    throw err;
  }
  return env;
}

export async function updateEnvironment(
  store: Store,
  id: string,
  fields: Partial<Omit<EnvironmentsTable, "id" | "team_id" | "project_id" | "created_at">>,
): Promise<void> {
  await store.updateTable("environments").set(fields).where("id", "=", id).execute();
}

/** The ids of the team's environments not destroyed. */
export async function liveEnvironmentIds(store: Store, teamId: string): Promise<Set<string>> {
  const rows = await store
    .selectFrom("environments")
    .select("id")
    .where("team_id", "=", teamId)
    .where("status", "!=", "destroyed")
    .execute();
  return new Set(rows.map((e) => e.id));
}

/** The names of the team's environments running (or starting) at a target. */
export async function environmentsAtTarget(
  store: Store,
  teamId: string,
  targetId: string,
): Promise<string[]> {
  const rows = await store
    .selectFrom("environments")
    .select("name")
    .where("team_id", "=", teamId)
    .where("target_id", "=", targetId)
    .where("status", "not in", ["destroyed", "failed"])
    .execute();
  return rows.map((e) => e.name);
}

export async function insertEnvironment(store: Store, row: EnvironmentsTable): Promise<void> {
  await store.insertInto("environments").values(row).execute();
}

/** The team's live sandboxes whose names start with `prefix` (a replay's forks). */
export function liveSandboxesNamed(
  store: Store,
  teamId: string,
  prefix: string,
): Promise<EnvironmentsTable[]> {
  return store
    .selectFrom("environments")
    .selectAll()
    .where("team_id", "=", teamId)
    .where("sandbox", "=", 1)
    .where("status", "!=", "destroyed")
    .where("name", "like", `${prefix}%`)
    .execute();
}

/** Every environment that holds GPUs and may still use them (not destroyed, failed or lost). */
export function gpuHoldingEnvironments(store: Store) {
  return store
    .selectFrom("environments")
    .select(["id", "host_id", "gpus_json"])
    .where("gpus_json", "is not", null)
    .where("status", "not in", ["destroyed", "failed", "lost"])
    .execute();
}

/** A host's environments whose status its report may change (placed stacks, not destroyed). */
export function hostSyncableEnvironments(store: Store, hostId: string) {
  return store
    .selectFrom("environments")
    .select(["id", "name", "status", "stack_id"])
    .where("host_id", "=", hostId)
    .where("status", "in", ["running", "frozen", "lost", "failed"])
    .where("stack_id", "is not", null)
    .execute();
}

/** An environment's status changed only from the one it was read with; whether it changed. */
export async function changeEnvironmentStatus(
  store: Store,
  environmentId: string,
  from: string,
  to: string,
): Promise<boolean> {
  const r = await store
    .updateTable("environments")
    .set({ status: to })
    .where("id", "=", environmentId)
    .where("status", "=", from)
    .executeTakeFirst();
  return Number(r.numUpdatedRows) > 0;
}

/** The versions a host's live environments run (current, or the one forked from). */
export function hostLiveEnvironmentVersions(store: Store, hostId: string, live: readonly string[]) {
  return store
    .selectFrom("environments")
    .select(["current_version_id", "parent_version_id"])
    .where("host_id", "=", hostId)
    .where("status", "in", [...live])
    .execute();
}

/** Notes that a request reached the environment at `at` (x-denv.idle_pause_s counts from it). */
export async function noteEnvironmentActive(store: Store, id: string, at: string): Promise<void> {
  await store.updateTable("environments").set({ active_at: at }).where("id", "=", id).execute();
}

/** The running environments with an idle timer, with when a request last reached each. */
export async function idleTimedEnvironments(
  store: Store,
): Promise<Pick<EnvironmentsTable, "id" | "idle_pause_s" | "active_at" | "created_at">[]> {
  return store
    .selectFrom("environments")
    .select(["id", "idle_pause_s", "active_at", "created_at"])
    .where("status", "=", "running")
    .where("idle_pause_s", "is not", null)
    .execute();
}
