/** Deployments: every change to an environment, with its phases (JSON) and restart state. */
import { DenvError } from "@denv/protocol";
import type { Store } from "./open-store.ts";
import type { DeploymentsTable } from "./schema.ts";

export async function insertDeployment(store: Store, row: DeploymentsTable): Promise<void> {
  await store.insertInto("deployments").values(row).execute();
}

/** Writes a deployment's fields; with leaseOwner, only while that replica holds its lease (false: not written). */
export async function updateDeployment(
  store: Store,
  id: string,
  fields: Partial<Pick<DeploymentsTable, "phases_json" | "state_json" | "status" | "reason" | "finished_at">>,
  leaseOwner?: string,
): Promise<boolean> {
  let q = store.updateTable("deployments").set(fields).where("id", "=", id);
  if (leaseOwner) q = q.where("lease_owner", "=", leaseOwner);
  const r = await q.executeTakeFirst();
  return !leaseOwner || Number(r.numUpdatedRows) > 0;
}

/**
 * Writes a running deployment's phases and state as updateDeployment does, and reads back in the
 * same statement whether someone asked it to stop: `written` false when this replica lost its lease.
 */
export async function writeDeploymentProgress(
  store: Store,
  id: string,
  fields: Partial<Pick<DeploymentsTable, "phases_json" | "state_json" | "status" | "reason" | "finished_at">>,
  leaseOwner?: string,
): Promise<{ written: boolean; cancelRequestedBy: string | null }> {
  let q = store.updateTable("deployments").set(fields).where("id", "=", id);
  if (leaseOwner) q = q.where("lease_owner", "=", leaseOwner);
  const rows = await q.returning("cancel_requested_by").execute();
  return { written: !leaseOwner || rows.length > 0, cancelRequestedBy: rows[0]?.cancel_requested_by ?? null };
}

/**
 * Asks a team's deployment to stop, once: true when this call asked; false when it had ended, or
 * someone had asked already.
 */
export async function requestDeploymentCancel(
  store: Store,
  teamId: string,
  id: string,
  by: string,
): Promise<boolean> {
  const r = await store
    .updateTable("deployments")
    .set({ cancel_requested_by: by })
    .where("id", "=", id)
    .where("team_id", "=", teamId)
    .where("status", "in", ["queued", "running"])
    .where("cancel_requested_by", "is", null)
    .executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}

export function deploymentById(store: Store, id: string): Promise<DeploymentsTable | undefined> {
  return store.selectFrom("deployments").selectAll().where("id", "=", id).executeTakeFirst();
}

/** A team's deployment; not_found for anything else (another team's included). */
export async function findDeployment(store: Store, teamId: string, id: string): Promise<DeploymentsTable> {
  const d = await store
    .selectFrom("deployments")
    .selectAll()
    .where("id", "=", id)
    .where("team_id", "=", teamId)
    .executeTakeFirst();
  if (!d) throw new DenvError("not_found", `no deployment ${id}`);
  return d;
}

export function environmentDeployments(store: Store, environmentId: string): Promise<DeploymentsTable[]> {
  return store
    .selectFrom("deployments")
    .selectAll()
    .where("environment_id", "=", environmentId)
    .orderBy("created_at")
    .execute();
}

/**
 * A team's deployments, newest first, each with its environment's project and name: of one
 * environment, or only those still at work (queued or running), at most `limit`.
 */
export function teamDeployments(
  store: Store,
  teamId: string,
  options: { environmentId?: string; atWork?: boolean; limit: number },
) {
  let q = store
    .selectFrom("deployments")
    .innerJoin("environments", "environments.id", "deployments.environment_id")
    .innerJoin("projects", "projects.id", "environments.project_id")
    .selectAll("deployments")
    .select(["environments.name as env_name", "projects.name as project_name"])
    .where("deployments.team_id", "=", teamId);
  if (options.environmentId !== undefined)
    q = q.where("deployments.environment_id", "=", options.environmentId);
  if (options.atWork) q = q.where("deployments.status", "in", ["queued", "running"]);
  return q
    .orderBy("deployments.created_at", "desc")
    .orderBy("deployments.id", "desc")
    .limit(options.limit)
    .execute();
}

/** Deployments a server was running when it stopped (found at the next start). */
export function runningDeployments(store: Store): Promise<DeploymentsTable[]> {
  return store.selectFrom("deployments").selectAll().where("status", "=", "running").execute();
}

/** An environment's deployments of the kinds given. */
export function environmentDeploymentsOfKinds(
  store: Store,
  environmentId: string,
  kinds: string[],
): Promise<DeploymentsTable[]> {
  return store
    .selectFrom("deployments")
    .selectAll()
    .where("environment_id", "=", environmentId)
    .where("kind", "in", kinds)
    .execute();
}

/**
 * The team's deployments of a kind, oldest first, each with its environment's name; with
 * `forksOf`, only those of forks of that version, newest first, at most `limit`.
 */
export function teamDeploymentsOfKind(
  store: Store,
  teamId: string,
  kind: string,
  options: { forksOf?: string; limit?: number } = {},
) {
  let q = store
    .selectFrom("deployments")
    .innerJoin("environments", "environments.id", "deployments.environment_id")
    .selectAll("deployments")
    .select("environments.name as env_name")
    .where("deployments.team_id", "=", teamId)
    .where("deployments.kind", "=", kind);
  if (options.forksOf !== undefined)
    q = q
      .where("environments.parent_version_id", "=", options.forksOf)
      .orderBy("deployments.created_at", "desc");
  else q = q.orderBy("deployments.created_at");
  if (options.limit !== undefined) q = q.limit(options.limit);
  return q.execute();
}

/**
 * A running deployment of the environment that began before `me` (by creation, then id) and is
 * not held by `owner`: another replica's (or a dead one's) turn that comes first.
 */
export function olderRunningElsewhere(
  store: Store,
  environmentId: string,
  me: Pick<DeploymentsTable, "id" | "created_at">,
  owner: string,
) {
  return store
    .selectFrom("deployments")
    .select("id")
    .where("environment_id", "=", environmentId)
    .where("status", "=", "running")
    .where("id", "!=", me.id)
    .where((eb) => eb.or([eb("lease_owner", "!=", owner), eb("lease_owner", "is", null)]))
    .where((eb) =>
      eb.or([
        eb("created_at", "<", me.created_at),
        eb.and([eb("created_at", "=", me.created_at), eb("id", "<", me.id)]),
      ]),
    )
    .executeTakeFirst();
}

/** A project's latest deploys (newest first, at most `limit`): their phases. */
export function projectDeployPhases(store: Store, projectId: string, limit: number) {
  return store
    .selectFrom("deployments")
    .innerJoin("environments", "environments.id", "deployments.environment_id")
    .select(["deployments.id", "deployments.phases_json"])
    .where("environments.project_id", "=", projectId)
    .where("deployments.kind", "=", "deploy")
    .orderBy("deployments.created_at", "desc")
    .limit(limit)
    .execute();
}

/** The environments a deployment is queued or running for. */
export async function busyEnvironmentIds(store: Store): Promise<string[]> {
  const rows = await store
    .selectFrom("deployments")
    .select("environment_id")
    .where("status", "in", ["running", "queued"])
    .execute();
  return rows.map((d) => d.environment_id);
}

/** A replica's hold on the deployments it runs, renewed until `untilMs`. */
export async function renewDeploymentLeases(store: Store, owner: string, untilMs: number): Promise<void> {
  await store
    .updateTable("deployments")
    .set({ lease_until: untilMs })
    .where("lease_owner", "=", owner)
    .where("status", "=", "running")
    .execute();
}

/**
 * Running deployments a replica may take over: every one with `all`, else those whose lease
 * lapsed (or was never taken), or whose owner is gone from the registry and that began before
 * `unregisteredBefore` (a replica writes its row just after it starts listening).
 */
export function takeableDeployments(
  store: Store,
  nowMs: number,
  options: { all: boolean; unregisteredBefore: string },
): Promise<DeploymentsTable[]> {
  let q = store.selectFrom("deployments").selectAll().where("status", "=", "running");
  if (!options.all)
    q = q.where((eb) =>
      eb.or([
        eb("lease_until", "is", null),
        eb("lease_until", "<", nowMs),
        eb.and([
          eb("lease_owner", "not in", eb.selectFrom("server_replicas").select("id")),
          eb("created_at", "<", options.unregisteredBefore),
        ]),
      ]),
    ) as typeof q;
  return q.execute();
}

/** A running deployment's lease taken, only if it is still as it was read; whether it was. */
export async function claimDeploymentLease(
  store: Store,
  d: Pick<DeploymentsTable, "id" | "lease_owner" | "lease_until">,
  owner: string,
  untilMs: number,
): Promise<boolean> {
  const r = await store
    .updateTable("deployments")
    .set({ lease_owner: owner, lease_until: untilMs })
    .where("id", "=", d.id)
    .where("status", "=", "running")
    .where((eb) =>
      eb.and([
        d.lease_owner === null ? eb("lease_owner", "is", null) : eb("lease_owner", "=", d.lease_owner),
        d.lease_until === null ? eb("lease_until", "is", null) : eb("lease_until", "=", d.lease_until),
      ]),
    )
    .executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}
