/** Versions: immutable snapshots of an environment, with the resolved spec sealed at rest. */
import { DenvError, isDenvError } from "@denv/protocol";
import { findEnvironment } from "./environment-store.ts";
import type { Store } from "./open-store.ts";
import { findProject } from "./project-store.ts";
import type { VersionReplicasTable, VersionsTable } from "./schema.ts";

/** A team's version; not_found for anything else (another team's included). */
export async function findVersion(store: Store, teamId: string, id: string): Promise<VersionsTable> {
  const v = await store
    .selectFrom("versions")
    .selectAll()
    .where("id", "=", id)
    .where("team_id", "=", teamId)
    .executeTakeFirst();
  if (!v) throw new DenvError("not_found", `no version ${id}`);
  return v;
}

/**
 * The host holding a version's snapshots, for what only a denvd host can do with it; a version at a
 * hosted provider is refused, saying what was asked and where the version lives.
 */
export function versionHost(v: Pick<VersionsTable, "id" | "host_id" | "target_id">, what: string): string {
  if (!v.host_id)
    throw new DenvError(
      "not_supported",
      `version ${v.id} is a snapshot at target ${v.target_id}, a hosted provider: ${what} needs a version on a denvd host (a fork of it is made on ${v.target_id})`,
    );
  return v.host_id;
}

/** The sealed spec of a version, when there is one. */
export async function versionSpecJson(store: Store, id: string | null): Promise<string | undefined> {
  if (!id) return undefined;
  const v = await store.selectFrom("versions").select("spec_json").where("id", "=", id).executeTakeFirst();
  return v?.spec_json;
}

export async function insertVersion(
  store: Store,
  row: Omit<VersionsTable, "snapshot_ref" | "replicas"> & {
    snapshot_ref?: string | null;
    replicas?: number | null;
  },
): Promise<void> {
  await store.insertInto("versions").values(row).execute();
}

/**
 * A version by any of the seed's references: `ver_…`, `PROJECT@ver_…` (the version, checked to be
 * the project's), or an environment (`PROJECT/ENV`, its id or name): the version it runs.
 */
export async function resolveVersionRef(store: Store, teamId: string, ref: string): Promise<VersionsTable> {
  if (ref.length === 0 || ref.length > 300)
    throw new DenvError("invalid_argument", "a version reference is 1 to 300 characters");
  const at = ref.lastIndexOf("@");
  if (at >= 0) {
    const projectRef = ref.slice(0, at);
    const v = await findVersion(store, teamId, ref.slice(at + 1));
    const project = await findProject(store, teamId, projectRef).catch(() => null);
    // Another project's version is as unknown here as another team's.
    if (!project || project.id !== v.project_id) throw new DenvError("not_found", `no version ${ref}`);
    return v;
  }
  if (/^ver_[0-9a-f]{12}$/.test(ref)) return findVersion(store, teamId, ref);
  // Meant as a version's id, not an environment's name: said as such.
  if (ref.startsWith("ver_"))
    throw new DenvError("not_found", `no version ${ref}: a version's id is ver_ and 12 hex digits`);
  const env = await findEnvironment(store, teamId, ref).catch((err: unknown) => {
    throw isDenvError(err) && err.code === "not_found"
      ? new DenvError(
          "not_found",
          `no version or environment ${ref}: name a version (ver_…, PROJECT@ver_…) or an environment (PROJECT/ENV) for the version it runs`,
        )
      : err;
  });
  if (!env.current_version_id)
    throw new DenvError("conflict", `environment ${ref} has no version yet: deploy it or snapshot it first`);
  return findVersion(store, teamId, env.current_version_id);
}

/**
 * What keeps a version: environments that run it or were forked from it (their rollback target),
 * warm pools of it, replays of it still running. A version nothing uses may be deleted.
 */
export async function versionUsers(store: Store, versionId: string): Promise<string[]> {
  const envs = await store
    .selectFrom("environments")
    .select(["name", "current_version_id", "parent_version_id", "pool_id"])
    .where("status", "!=", "destroyed")
    .where((eb) => eb.or([eb("current_version_id", "=", versionId), eb("parent_version_id", "=", versionId)]))
    .execute();
  const pools = await store.selectFrom("pools").select("id").where("version_id", "=", versionId).execute();
  const replays = await store
    .selectFrom("replays")
    .select("id")
    .where("version_id", "=", versionId)
    .where("status", "=", "running")
    .execute();
  return [
    ...envs
      .filter((e) => !e.pool_id)
      .map((e) =>
        e.current_version_id === versionId
          ? `environment ${e.name} runs it`
          : `environment ${e.name} was forked from it`,
      ),
    ...(envs.some((e) => e.pool_id) || pools.length > 0 ? ["a warm pool keeps forks of it"] : []),
    ...replays.map((r) => `replay ${r.id} is running`),
  ];
}

export function teamVersions(store: Store, teamId: string, projectId?: string): Promise<VersionsTable[]> {
  let q = store.selectFrom("versions").selectAll().where("team_id", "=", teamId);
  if (projectId) q = q.where("project_id", "=", projectId);
  return q.orderBy("created_at", "desc").execute();
}

export async function deleteVersionRow(store: Store, id: string): Promise<void> {
  await store.deleteFrom("versions").where("id", "=", id).execute();
}

/** The names a version is shown under: its project's, and the environment it was made in. */
export async function versionPlace(
  store: Store,
  v: VersionsTable,
): Promise<{ project: string; environment: string }> {
  const project = await store
    .selectFrom("projects")
    .select("name")
    .where("id", "=", v.project_id)
    .executeTakeFirst();
  const env = await store
    .selectFrom("environments")
    .select("name")
    .where("id", "=", v.environment_id)
    .executeTakeFirst();
  return { project: project?.name ?? v.project_id, environment: env?.name ?? v.environment_id };
}

/** A version's copy on a host gone from the records (the host deleted it, or will). */
export async function deleteVersionCopy(store: Store, versionId: string, hostId: string): Promise<void> {
  await store
    .deleteFrom("version_replicas")
    .where("version_id", "=", versionId)
    .where("host_id", "=", hostId)
    .execute();
}

/** How many copies of a version the fleet keeps. */
export async function setVersionReplicas(store: Store, versionId: string, copies: number): Promise<void> {
  await store.updateTable("versions").set({ replicas: copies }).where("id", "=", versionId).execute();
}

/** A version by its id, or undefined (whoever's it is: the caller holds a reference it trusts). */
export function versionRow(store: Store, id: string): Promise<VersionsTable | undefined> {
  return store.selectFrom("versions").selectAll().where("id", "=", id).executeTakeFirst();
}

/** Every version's host and pinned images (which built images something still uses). */
export function versionImages(store: Store) {
  return store.selectFrom("versions").select(["host_id", "images_json"]).execute();
}

/** Whether a host holds a version: it took it, or keeps a copy. */
export async function hostHoldsVersion(store: Store, versionId: string, hostId: string): Promise<boolean> {
  const v = await store
    .selectFrom("versions")
    .select("host_id")
    .where("id", "=", versionId)
    .executeTakeFirst();
  if (v?.host_id === hostId) return true;
  const copy = await store
    .selectFrom("version_replicas")
    .select("host_id")
    .where("version_id", "=", versionId)
    .where("host_id", "=", hostId)
    .executeTakeFirst();
  return copy !== undefined;
}

/** Every version's resolved spec as stored (sealed, or plain from an older server). */
export function versionSpecTexts(store: Store) {
  return store.selectFrom("versions").select(["id", "spec_json"]).execute();
}

export async function setVersionSpecText(store: Store, versionId: string, specJson: string): Promise<void> {
  await store.updateTable("versions").set({ spec_json: specJson }).where("id", "=", versionId).execute();
}

/** Versions on hosts the fleet keeps more than one copy of. */
export function replicatedVersions(store: Store): Promise<VersionsTable[]> {
  return store
    .selectFrom("versions")
    .selectAll()
    .where("replicas", ">", 1)
    .where("host_id", "is not", null)
    .execute();
}

/** The team's versions a host holds: those it took, and those it keeps a copy of. */
export function versionsOnHost(store: Store, teamId: string, hostId: string): Promise<VersionsTable[]> {
  return store
    .selectFrom("versions")
    .selectAll()
    .where("team_id", "=", teamId)
    .where((eb) =>
      eb.or([
        eb("host_id", "=", hostId),
        eb("id", "in", eb.selectFrom("version_replicas").select("version_id").where("host_id", "=", hostId)),
      ]),
    )
    .execute();
}

// --- Copies of versions on other hosts (`version_replicas`). ---

/** The hosts holding copies of these versions, each copy's row oldest first. */
export function versionCopies(store: Store, versionIds: string[]) {
  if (versionIds.length === 0) return Promise.resolve([] as { version_id: string; host_id: string }[]);
  return store
    .selectFrom("version_replicas")
    .select(["version_id", "host_id"])
    .where("version_id", "in", versionIds)
    .orderBy("created_at", "asc")
    .execute();
}

/** A version's copies with what making each measured (its evidence, as replication.ts wrote it). */
export function versionCopyEvidence(store: Store, versionId: string) {
  return store
    .selectFrom("version_replicas")
    .select(["host_id", "evidence_json"])
    .where("version_id", "=", versionId)
    .orderBy("created_at", "asc")
    .execute();
}

/** Copies whose version is gone (deleted while a host holding it was away). */
export function leftoverVersionCopies(store: Store) {
  return store
    .selectFrom("version_replicas")
    .select(["version_id", "host_id"])
    .where("version_id", "not in", store.selectFrom("versions").select("id"))
    .execute();
}

export async function hasVersionCopy(store: Store, versionId: string, hostId: string): Promise<boolean> {
  return (
    (await store
      .selectFrom("version_replicas")
      .select("host_id")
      .where("version_id", "=", versionId)
      .where("host_id", "=", hostId)
      .executeTakeFirst()) !== undefined
  );
}

export async function insertVersionCopy(store: Store, row: VersionReplicasTable): Promise<void> {
  await store.insertInto("version_replicas").values(row).execute();
}

/** A version's earlier versions of the same environment on hosts (newest first, at most `limit`). */
export function earlierVersionsOnHosts(
  store: Store,
  v: Pick<VersionsTable, "environment_id" | "team_id" | "created_at">,
  limit: number,
) {
  return store
    .selectFrom("versions")
    .select(["id", "host_id"])
    .where("environment_id", "=", v.environment_id)
    .where("team_id", "=", v.team_id)
    .where("created_at", "<", v.created_at)
    .where("host_id", "is not", null)
    .orderBy("created_at", "desc")
    .limit(limit)
    .execute();
}
