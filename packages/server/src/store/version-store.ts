/** Versions: immutable snapshots of an environment, with the resolved spec sealed at rest. */
import { DenvError } from "@denv/protocol";
import type { Store } from "./open-store.ts";
import type { VersionsTable } from "./schema.ts";

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

/** The sealed spec of a version, when there is one. */
export async function versionSpecJson(store: Store, id: string | null): Promise<string | undefined> {
  if (!id) return undefined;
  const v = await store.selectFrom("versions").select("spec_json").where("id", "=", id).executeTakeFirst();
  return v?.spec_json;
}

export async function insertVersion(store: Store, row: VersionsTable): Promise<void> {
  await store.insertInto("versions").values(row).execute();
}
