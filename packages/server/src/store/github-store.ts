/** GitHub Apps teams connected, the deliveries they were sent, and what webhooks deployed. */
import type { Store } from "./open-store.ts";
import type {
  GithubAppsTable,
  GithubDeliveriesTable,
  GithubDeploysTable,
  PreviewApprovalsTable,
  ProjectsTable,
} from "./schema.ts";

export function teamGithubApps(store: Store, teamId: string): Promise<GithubAppsTable[]> {
  return store
    .selectFrom("github_apps")
    .selectAll()
    .where("team_id", "=", teamId)
    .orderBy("created_at")
    .execute();
}

export function githubAppByAppId(store: Store, appId: string): Promise<GithubAppsTable | undefined> {
  return store.selectFrom("github_apps").selectAll().where("app_id", "=", appId).executeTakeFirst();
}

export async function insertGithubApp(store: Store, row: GithubAppsTable): Promise<void> {
  await store.insertInto("github_apps").values(row).execute();
}

/** Deletes a team's App by GitHub's id of it; false when the team has none such. */
export async function deleteGithubApp(store: Store, teamId: string, appId: string): Promise<boolean> {
  const r = await store
    .deleteFrom("github_apps")
    .where("team_id", "=", teamId)
    .where("app_id", "=", appId)
    .executeTakeFirst();
  return Number(r.numDeletedRows) === 1;
}

/**
 * Records a delivery before anything is done for it: false when its id or its body was seen
 * already (a redelivery, or a replay under a new id), so each delivery acts at most once.
 */
export async function recordDelivery(store: Store, row: GithubDeliveriesTable): Promise<boolean> {
  const r = await store
    .insertInto("github_deliveries")
    .values(row)
    .onConflict((oc) => oc.doNothing())
    .executeTakeFirst();
  return Number(r.numInsertedOrUpdatedRows ?? 0n) === 1;
}

export async function setDeliveryOutcome(store: Store, deliveryId: string, outcome: string): Promise<void> {
  await store
    .updateTable("github_deliveries")
    .set({ outcome })
    .where("delivery_id", "=", deliveryId)
    .execute();
}

/** A team's latest deliveries, newest first. */
export function teamDeliveries(store: Store, teamId: string, limit = 50) {
  return store
    .selectFrom("github_deliveries")
    .innerJoin("github_apps", "github_apps.id", "github_deliveries.app_row_id")
    .select([
      "github_deliveries.delivery_id",
      "github_deliveries.event",
      "github_deliveries.outcome",
      "github_deliveries.received_at",
      "github_apps.app_id",
    ])
    .where("github_apps.team_id", "=", teamId)
    .orderBy("github_deliveries.received_at", "desc")
    .limit(limit)
    .execute();
}

/** The projects of an App's team that deploy a repository (by GitHub's id of it, not its name). */
export function projectsOfRepository(
  store: Store,
  appRowId: string,
  repositoryId: string,
): Promise<ProjectsTable[]> {
  return store
    .selectFrom("projects")
    .selectAll()
    .where("github_app_row_id", "=", appRowId)
    .where("github_repository_id", "=", repositoryId)
    .execute();
}

export async function insertGithubDeploy(store: Store, row: GithubDeploysTable): Promise<void> {
  await store.insertInto("github_deploys").values(row).execute();
}

export async function updateGithubDeploy(
  store: Store,
  deploymentId: string,
  patch: Partial<Pick<GithubDeploysTable, "check_run_id" | "gh_deployment_id">>,
): Promise<void> {
  await store.updateTable("github_deploys").set(patch).where("deployment_id", "=", deploymentId).execute();
}

/** What webhooks deployed to a project's environments, newest first. */
export function projectGithubDeploys(store: Store, projectId: string, environmentName?: string) {
  let q = store.selectFrom("github_deploys").selectAll().where("project_id", "=", projectId);
  if (environmentName !== undefined) q = q.where("environment_name", "=", environmentName);
  return q.orderBy("created_at", "desc").execute();
}

/** A fork's pull request head waiting for approval (a newer head replaces the one waiting). */
export async function putPreviewApproval(store: Store, row: PreviewApprovalsTable): Promise<void> {
  await store
    .deleteFrom("preview_approvals")
    .where("project_id", "=", row.project_id)
    .where("pr_number", "=", row.pr_number)
    .execute();
  await store.insertInto("preview_approvals").values(row).execute();
}

export function previewApprovals(store: Store, projectId: string): Promise<PreviewApprovalsTable[]> {
  return store
    .selectFrom("preview_approvals")
    .selectAll()
    .where("project_id", "=", projectId)
    .orderBy("pr_number")
    .execute();
}

/** Takes the waiting head of a pull request (it is deployed now, or its pull request closed). */
export async function takePreviewApproval(
  store: Store,
  projectId: string,
  prNumber: number,
): Promise<PreviewApprovalsTable | undefined> {
  const row = await store
    .selectFrom("preview_approvals")
    .selectAll()
    .where("project_id", "=", projectId)
    .where("pr_number", "=", prNumber)
    .executeTakeFirst();
  if (row)
    await store
      .deleteFrom("preview_approvals")
      .where("project_id", "=", projectId)
      .where("pr_number", "=", prNumber)
      .execute();
  return row;
}

/** The project's live previews: environments its pull requests' webhooks made that are not destroyed. */
export async function livePreviews(store: Store, projectId: string): Promise<string[]> {
  const rows = await store
    .selectFrom("github_deploys")
    .innerJoin("environments", (j) =>
      j
        .onRef("environments.project_id", "=", "github_deploys.project_id")
        .onRef("environments.name", "=", "github_deploys.environment_name"),
    )
    .select("environments.name")
    .distinct()
    .where("github_deploys.project_id", "=", projectId)
    .where("github_deploys.trigger", "=", "preview")
    .where("environments.status", "!=", "destroyed")
    .execute();
  return rows.map((r) => r.name);
}

/** A GitHub App by its row's id (what a project records). */
export function githubAppRow(store: Store, rowId: string): Promise<GithubAppsTable | undefined> {
  return store.selectFrom("github_apps").selectAll().where("id", "=", rowId).executeTakeFirst();
}

/** The team's projects that read their repositories through an App. */
export async function projectsThroughApp(store: Store, teamId: string, appId: string): Promise<string[]> {
  const rows = await store
    .selectFrom("projects")
    .innerJoin("github_apps", "github_apps.id", "projects.github_app_row_id")
    .select("projects.name")
    .where("github_apps.team_id", "=", teamId)
    .where("github_apps.app_id", "=", appId)
    .execute();
  return rows.map((r) => r.name);
}
