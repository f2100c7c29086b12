/** Clouds a team connected (their tokens sealed) and the machines denv made in them. */
import type { Store } from "./open-store.ts";
import type { CloudsTable } from "./schema.ts";

export async function cloudNameTaken(store: Store, teamId: string, name: string): Promise<boolean> {
  const row = await store
    .selectFrom("clouds")
    .select("id")
    .where("team_id", "=", teamId)
    .where("name", "=", name)
    .executeTakeFirst();
  return row !== undefined;
}

export async function insertCloud(store: Store, row: CloudsTable): Promise<void> {
  await store.insertInto("clouds").values(row).execute();
}

export function teamClouds(store: Store, teamId: string): Promise<CloudsTable[]> {
  return store.selectFrom("clouds").selectAll().where("team_id", "=", teamId).orderBy("created_at").execute();
}

/** Deletes a team's cloud by name; false when it has none of that name. */
export async function deleteCloud(store: Store, teamId: string, name: string): Promise<boolean> {
  const r = await store
    .deleteFrom("clouds")
    .where("team_id", "=", teamId)
    .where("name", "=", name)
    .executeTakeFirst();
  return Number(r.numDeletedRows) === 1;
}

/** The machines of a cloud that are not deleted. */
export function cloudMachines(store: Store, cloudId: string) {
  return store
    .selectFrom("cloud_machines")
    .select(["name", "provider_server_id", "status"])
    .where("cloud_id", "=", cloudId)
    .where("deleted_at", "is", null)
    .execute();
}
