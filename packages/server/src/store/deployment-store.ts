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

/** Deployments a server was running when it stopped (found at the next start). */
export function runningDeployments(store: Store): Promise<DeploymentsTable[]> {
  return store.selectFrom("deployments").selectAll().where("status", "=", "running").execute();
}
