/** Projects: what a team deploys, from a local upload or a git URL. */
import { DenvError } from "@denv/protocol";
import { newId, now } from "../ids.ts";
import type { Store } from "./open-store.ts";
import type { ProjectsTable } from "./schema.ts";

/** The hidden project sandboxes made from an image belong to (one per team). */
export const SANDBOX_PROJECT = "_sandboxes";

/** A team's project by id or name; not_found otherwise (another team's project included). */
export async function findProject(store: Store, teamId: string, ref: string): Promise<ProjectsTable> {
  const p = await store
    .selectFrom("projects")
    .selectAll()
    .where("team_id", "=", teamId)
    .where((eb) => eb.or([eb("id", "=", ref), eb("name", "=", ref)]))
    .executeTakeFirst();
  if (!p) throw new DenvError("not_found", `no project ${ref}; create it with \`denv project create\``);
  return p;
}

export function projectById(store: Store, id: string): Promise<ProjectsTable> {
  return store.selectFrom("projects").selectAll().where("id", "=", id).executeTakeFirstOrThrow();
}

export async function projectNameTaken(store: Store, teamId: string, name: string): Promise<boolean> {
  const row = await store
    .selectFrom("projects")
    .select("id")
    .where("team_id", "=", teamId)
    .where("name", "=", name)
    .executeTakeFirst();
  return row !== undefined;
}

export async function insertProject(store: Store, row: ProjectsTable): Promise<void> {
  await store.insertInto("projects").values(row).execute();
}

/** A team's projects, without the hidden sandbox project. */
export function teamProjects(store: Store, teamId: string): Promise<ProjectsTable[]> {
  return store
    .selectFrom("projects")
    .selectAll()
    .where("team_id", "=", teamId)
    .where("name", "!=", SANDBOX_PROJECT)
    .execute();
}

export async function projectName(store: Store, id: string): Promise<string | undefined> {
  return (await store.selectFrom("projects").select("name").where("id", "=", id).executeTakeFirst())?.name;
}

/** A local project's uploaded source (already sealed by the caller). */
export async function setProjectSource(
  store: Store,
  projectId: string,
  sealed: Pick<ProjectsTable, "compose_text"> &
    Partial<Pick<ProjectsTable, "dotenv_text" | "build_contexts_json" | "files_text" | "bind_sources_json">>,
): Promise<void> {
  await store.updateTable("projects").set(sealed).where("id", "=", projectId).execute();
}

/** The team's hidden sandbox project, made on first use. */
export async function sandboxProject(store: Store, teamId: string): Promise<ProjectsTable> {
  const find = () =>
    store
      .selectFrom("projects")
      .selectAll()
      .where("team_id", "=", teamId)
      .where("name", "=", SANDBOX_PROJECT)
      .executeTakeFirst();
  const existing = await find();
  if (existing) return existing;
  const row: ProjectsTable = {
    id: newId("prj"),
    team_id: teamId,
    name: SANDBOX_PROJECT,
    kind: "agent",
    source_type: "local",
    source: "(api)",
    compose_text: null,
    dotenv_text: null,
    pinned_target: null,
    created_at: now(),
  };
  try {
    await insertProject(store, row);
    return row;
  } catch (err) {
    // A team's first sandboxes, asked for at once: one insert wins (team and name are unique).
    const made = await find();
    if (made) return made;
    throw err;
  }
}

/** Every environment a project ever had, destroyed ones too (of the team's project given). */
export function projectEnvironments(store: Store, project: Pick<ProjectsTable, "id">) {
  return store.selectFrom("environments").selectAll().where("project_id", "=", project.id).execute();
}

/**
 * A project's records gone, with its environments' (each destroyed before: the caller checked),
 * their port URLs, ingress names, deployments and GitHub deploys, and its pools.
 */
export async function deleteProjectRecords(
  store: Store,
  project: Pick<ProjectsTable, "id">,
  environmentIds: string[],
): Promise<void> {
  if (environmentIds.length) {
    await store.deleteFrom("port_urls").where("environment_id", "in", environmentIds).execute();
    await store.deleteFrom("ingress_names").where("environment_id", "in", environmentIds).execute();
    await store.deleteFrom("deployments").where("environment_id", "in", environmentIds).execute();
    await store.deleteFrom("github_deploys").where("project_id", "=", project.id).execute();
    await store.deleteFrom("environments").where("id", "in", environmentIds).execute();
  }
  await store.deleteFrom("pools").where("project_id", "=", project.id).execute();
  await store.deleteFrom("projects").where("id", "=", project.id).execute();
}

/** A project's settings the team changes: the branches it deploys, its previews' budget and forks. */
export async function updateProjectSettings(
  store: Store,
  project: Pick<ProjectsTable, "id">,
  set: Partial<Pick<ProjectsTable, "branches_json" | "preview_budget" | "fork_previews">>,
): Promise<void> {
  if (Object.keys(set).length)
    await store.updateTable("projects").set(set).where("id", "=", project.id).execute();
}

/** Every project's compose and .env text (to seal what an older server stored in plain). */
export function projectTexts(store: Store) {
  return store.selectFrom("projects").select(["id", "compose_text", "dotenv_text"]).execute();
}

export async function setProjectTexts(
  store: Store,
  projectId: string,
  texts: { compose_text: string | null; dotenv_text: string | null },
): Promise<void> {
  await store.updateTable("projects").set(texts).where("id", "=", projectId).execute();
}
