/** Clouds a team connected (their tokens sealed) and the machines denv made in them. */
import { now } from "../ids.ts";
import type { Store } from "./open-store.ts";
import type { CloudMachinesTable, CloudsTable } from "./schema.ts";

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

export function cloudById(store: Store, cloudId: string): Promise<CloudsTable | undefined> {
  return store.selectFrom("clouds").selectAll().where("id", "=", cloudId).executeTakeFirst();
}

export async function insertCloudMachine(store: Store, row: CloudMachinesTable): Promise<void> {
  await store.insertInto("cloud_machines").values(row).execute();
}

export function cloudMachineById(store: Store, machineId: string): Promise<CloudMachinesTable | undefined> {
  return store.selectFrom("cloud_machines").selectAll().where("id", "=", machineId).executeTakeFirst();
}

/** A machine's host joined (by the name it joined as). */
export async function markMachineJoined(store: Store, name: string): Promise<void> {
  await store.updateTable("cloud_machines").set({ status: "joined" }).where("name", "=", name).execute();
}

/** A machine deleted at its provider: its host record goes, the machine's row says when. */
export async function markMachineDeleted(
  store: Store,
  m: Pick<CloudMachinesTable, "id" | "team_id" | "name">,
): Promise<void> {
  await store.deleteFrom("hosts").where("team_id", "=", m.team_id).where("name", "=", m.name).execute();
  await store
    .updateTable("cloud_machines")
    .set({ status: "deleted", deleted_at: now() })
    .where("id", "=", m.id)
    .execute();
}
