/**
 * What a webhook's deployment shows on GitHub: a check run on the commit (queued, in progress with
 * the phases as they finish, then success or failure with the verdict's reason, the phase timings,
 * and `details_url` the console's page of the deployment), and for branch and preview
 * environments a GitHub Deployment whose status carries the environment's page, set inactive when
 * the environment is torn down. Reporting never holds up or fails a deployment: what GitHub
 * refuses is logged and the deployment goes on.
 */
import type { Launched } from "../deployments/deployment-runner.ts";
import type { Phase } from "../deployments/phase-recorder.ts";
import { serverLog } from "../server-log.ts";
import { deploymentById } from "../store/deployment-store.ts";
import { projectGithubDeploys, updateGithubDeploy } from "../store/github-store.ts";
import type { DeploymentsTable, GithubAppsTable, ProjectsTable } from "../store/schema.ts";
import { parseGitHubSource } from "./github-apps.ts";
import type { CheckRunBody } from "./github-client.ts";
import type { WebhookDeps } from "./github-deps.ts";

export interface Followed {
  app: GithubAppsTable;
  installationId: string;
  repository: string;
  project: ProjectsTable;
  envName: string;
  environmentId: string;
  deploymentId: string;
  headSha: string;
  /** A GitHub Deployment too (branch and preview environments). */
  ghDeployment: boolean;
  /** A preview: GitHub shows it destroyed once inactive. */
  transient: boolean;
}

/** Follows a deployment to its verdict, reporting each step on GitHub; returns at once. */
export function followOnGitHub(deps: WebhookDeps, f: Followed): void {
  const client = deps.github.client(f.app);
  const base = deps.serverUrl().replace(/\/+$/, "");
  const detailsUrl = `${base}/#/deployment/${f.deploymentId}`;
  const envUrl = `${base}/#/env/${f.environmentId}`;
  const name = `denv: ${f.project.name}/${f.envName}`;
  let checkRun: Promise<string | null> | null = null;
  let ghDeployment: Promise<string | null> | null = null;
  let lastShown = "";
  let chain: Promise<void> = Promise.resolve();
  const warn = (what: string) => (err: unknown) => {
    serverLog().warn({ deployment: f.deploymentId, error: String(err) }, `GitHub: ${what}`);
    return null;
  };

  const sync = async () => {
    const d = await deploymentById(deps.store, f.deploymentId);
    if (!d) return;
    checkRun ??= client
      .createCheckRun(f.installationId, f.repository, {
        name,
        head_sha: f.headSha,
        status: "queued",
        details_url: detailsUrl,
        external_id: f.deploymentId,
      })
      .then(async (id) => {
        await updateGithubDeploy(deps.store, f.deploymentId, { check_run_id: id });
        return id;
      })
      .catch(warn("the check run could not be made"));
    if (f.ghDeployment)
      ghDeployment ??= client
        .createDeployment(f.installationId, f.repository, {
          ref: f.headSha,
          environment: `${f.project.name}/${f.envName}`,
          transient_environment: f.transient,
          description: `denv ${f.deploymentId}`,
        })
        .then(async (id) => {
          await updateGithubDeploy(deps.store, f.deploymentId, { gh_deployment_id: id });
          await client.deploymentStatus(f.installationId, f.repository, id, {
            state: "in_progress",
            log_url: detailsUrl,
          });
          return id;
        })
        .catch(warn("the deployment could not be made"));
    const id = await checkRun;
    const done = d.status !== "running";
    const phases = JSON.parse(d.phases_json) as Phase[];
    const shown = `${d.status}:${phases.map((p) => p.status).join(",")}`;
    if (shown === lastShown) return;
    lastShown = shown;
    if (id) {
      const body: CheckRunBody = done
        ? {
            status: "completed",
            conclusion: d.status === "succeeded" ? "success" : "failure",
            completed_at: d.finished_at ?? new Date().toISOString(),
            output: { title: title(d, phases), summary: summary(d, phases, f) },
          }
        : {
            status: "in_progress",
            started_at: d.created_at,
            output: { title: title(d, phases), summary: summary(d, phases, f) },
          };
      await client
        .updateCheckRun(f.installationId, f.repository, id, body)
        .catch(warn("the check run was not updated"));
    }
    if (done) {
      const dep = await ghDeployment;
      if (dep)
        await client
          .deploymentStatus(f.installationId, f.repository, dep, {
            state: d.status === "succeeded" ? "success" : "failure",
            environment_url: envUrl,
            log_url: detailsUrl,
            description: (d.reason ?? `${f.envName} is up`).slice(0, 140),
          })
          .catch(warn("the deployment status was not set"));
      deps.deployer.events.off(f.deploymentId, wake);
    }
  };
  // One report at a time, in order; a change while one is on its way is read by the next.
  const wake = () => {
    chain = chain.then(sync).catch((err) => void warn("report failed")(err));
  };
  deps.deployer.events.on(f.deploymentId, wake);
  wake();
}

/** The GitHub Deployment of a torn-down branch or preview environment: inactive (GitHub: destroyed). */
export function markInactive(
  deps: WebhookDeps,
  app: GithubAppsTable,
  project: ProjectsTable,
  envName: string,
  destroy: Launched,
): void {
  void (async () => {
    await destroy.done.catch(() => {});
    const rows = await projectGithubDeploys(deps.store, project.id, envName);
    const installation = project.github_installation_id;
    const { repository } = parseGitHubSource(project.source);
    if (!installation) return;
    const client = deps.github.client(app);
    for (const r of rows.filter((x) => x.gh_deployment_id))
      await client
        .deploymentStatus(installation, repository, r.gh_deployment_id as string, {
          state: "inactive",
          description: `${envName} was destroyed`,
        })
        .catch((err) =>
          serverLog().warn({ error: String(err) }, "GitHub: the deployment was not set inactive"),
        );
  })();
}

function title(d: DeploymentsTable, phases: Phase[]): string {
  if (d.status === "running") {
    const at = phases.find((p) => p.status === "running");
    return at ? `${at.name}…` : "queued";
  }
  if (d.status === "succeeded") return "deployed";
  const failed = phases.find((p) => p.status === "failed");
  return `${d.status.replace(/_/g, " ")}${failed ? ` at ${failed.name}` : ""}`;
}

/** The check run's summary: the verdict's reason, each phase with its time, a verify reward where one was given. */
function summary(d: DeploymentsTable, phases: Phase[], f: Followed): string {
  const lines = [
    `**${d.status}**: ${f.project.name}/${f.envName} at \`${f.headSha.slice(0, 12)}\` (deployment \`${d.id}\`)`,
    "",
  ];
  const failed = phases.find((p) => p.status === "failed");
  if (d.reason)
    lines.push(`${failed ? `Phase **${failed.name}** failed: ` : ""}${escapeMarkdown(d.reason)}`, "");
  lines.push("| phase | status | ms |", "| --- | --- | --- |");
  for (const p of phases) lines.push(`| ${p.name} | ${p.status} | ${p.duration_ms ?? ""} |`);
  const reward = phases
    .map((p) => (p.evidence as { reward?: unknown } | null)?.reward)
    .find((r) => typeof r === "number");
  if (reward !== undefined) lines.push("", `Verify reward: ${reward}`);
  return lines.join("\n").slice(0, 60_000);
}

/** A reason may quote the team's file: shown as text, never as markup or a link. */
function escapeMarkdown(text: string): string {
  return text.replace(/[\\`*_{}[\]()#+!<>|]/g, "\\$&").slice(0, 4000);
}
