/**
 * POST /v1/github/webhook: GitHub's deliveries for the Apps teams connected. The App is named by
 * X-GitHub-Hook-Installation-Target-ID; the signature (X-Hub-Signature-256) is checked with that
 * App's secret over the raw body before anything of it is parsed; each X-GitHub-Delivery acts once.
 * A delivery acts only on projects of the App's own team, and only those that read the repository
 * (by GitHub's id, not its name) through the installation the delivery names. What it starts is
 * launched and answered at once (GitHub gives a delivery 10 s); reporting back to GitHub follows
 * the deployment in the background (github-reports.ts).
 *
 *  - push to the project's branch (its @ref, else the repository's default): alpha deployed at that commit;
 *  - push to a branch the project opted in (`x-denv.branches` or `denv project set --branches`):
 *    the environment named after it deployed, or destroyed when the branch is deleted;
 *  - pull_request opened, reopened or synchronized: `pr-N` deployed from the PR's head onto a
 *    clone of alpha's current version's volumes (a PR from a fork starts empty: alpha's data stays
 *    with alpha); closed: `pr-N` destroyed.
 */
import { createHash } from "node:crypto";
import { DenvError } from "@denv/protocol";
import { verify } from "@octokit/webhooks-methods";
import { now } from "../ids.ts";
import { environmentNamed } from "../store/environment-store.ts";
import {
  githubAppByAppId,
  githubAppRow,
  insertGithubDeploy,
  livePreviews,
  previewApprovals,
  projectGithubDeploys,
  projectsOfRepository,
  putPreviewApproval,
  recordDelivery,
  setDeliveryOutcome,
  takePreviewApproval,
} from "../store/github-store.ts";
import type { Store } from "../store/open-store.ts";
import type { GithubAppsTable, ProjectsTable } from "../store/schema.ts";
import { versionSpecJson } from "../store/version-store.ts";
import { parseGitHubSource } from "./github-apps.ts";
import type { WebhookDeps } from "./github-deps.ts";
import { followOnGitHub, markInactive } from "./github-reports.ts";

export interface WebhookAnswer {
  status: 200 | 202 | 400 | 401 | 403 | 404 | 409;
  outcome: string;
  deployments: string[];
}

/**
 * GitHub caps a delivery at 25 MB (its documentation: "Payloads are capped at 25 MB"), decimal; a
 * larger one it does not send. Read only once the headers name a connected App and an event denv
 * acts on, within the server's budget for unauthenticated bodies (api/request-bodies.ts).
 */
export const WEBHOOK_LIMIT_BYTES = 25_000_000;

const PREVIEW_ACTIONS = new Set(["opened", "reopened", "synchronize"]);
/** The events denv reads the body of; any other is answered from its headers alone. */
const READ_EVENTS = new Set(["push", "pull_request", "ping", "installation", "installation_repositories"]);

const answer = (status: WebhookAnswer["status"], outcome: string, deployments: string[] = []) => ({
  status,
  outcome,
  deployments,
});

/** A delivery as its headers announce it: the connected App it is for, and which delivery of what. */
export interface WebhookDelivery {
  app: GithubAppsTable;
  event: string;
  delivery: string;
  signature: string;
}

/**
 * What a delivery's headers say, checked before a byte of its body is read: a delivery that names no
 * event, no delivery id, no connected App, or an event denv ignores is answered from them alone.
 */
export async function webhookDelivery(
  store: Store,
  headers: Headers,
): Promise<{ delivery: WebhookDelivery } | { answer: WebhookAnswer }> {
  const event = headers.get("x-github-event") ?? "";
  const delivery = headers.get("x-github-delivery") ?? "";
  const signature = headers.get("x-hub-signature-256") ?? "";
  const target = headers.get("x-github-hook-installation-target-id") ?? "";
  if (!/^[a-z_]{1,64}$/.test(event)) return { answer: answer(400, "refused: no X-GitHub-Event") };
  if (!/^[0-9A-Za-z-]{1,64}$/.test(delivery)) return { answer: answer(400, "refused: no X-GitHub-Delivery") };
  if (!/^\d{1,20}$/.test(target))
    return { answer: answer(400, "refused: no X-GitHub-Hook-Installation-Target-ID (the App's id)") };
  if (!/^sha256=[0-9a-f]{64}$/.test(signature))
    return { answer: answer(401, "refused: no X-Hub-Signature-256 (sha256=…)") };
  const app = await githubAppByAppId(store, target);
  if (!app) return { answer: answer(404, `refused: no GitHub App ${target} is connected to this server`) };
  if (!READ_EVENTS.has(event))
    return { answer: answer(202, `ignored: denv acts on push and pull_request, not ${event}`) };
  return { delivery: { app, event, delivery, signature } };
}

/** A delivery whose headers passed (webhookDelivery), with its body. */
export async function receiveWebhook(
  deps: WebhookDeps,
  announced: WebhookDelivery,
  raw: string,
): Promise<WebhookAnswer> {
  const { app, event, delivery, signature } = announced;
  const signed = /^sha256=[0-9a-f]{64}$/.test(signature)
    ? await verify(deps.github.webhookSecret(app), raw, signature).catch(() => false)
    : false;
  if (!signed) return answer(401, "refused: X-Hub-Signature-256 does not match the App's webhook secret");
  // Written down before anything is done: a redelivery or a replay of this id acts no more.
  const fresh = await recordDelivery(deps.store, {
    delivery_id: delivery,
    app_row_id: app.id,
    event,
    body_sha256: createHash("sha256").update(raw).digest("hex"),
    outcome: "received",
    received_at: now(),
  });
  if (!fresh)
    return answer(
      409,
      `refused: delivery ${delivery} (or this very body) was received already; nothing is done twice`,
    );
  let result: WebhookAnswer;
  try {
    const payload = JSON.parse(raw) as unknown;
    if (typeof payload !== "object" || payload === null) throw new SyntaxError("not an object");
    result = await dispatch(deps, app, event, payload as Payload);
  } catch (err) {
    result =
      err instanceof SyntaxError
        ? answer(400, "refused: the body is not a JSON object")
        : answer(400, `refused: ${err instanceof DenvError ? err.message : String(err)}`);
  }
  await setDeliveryOutcome(deps.store, delivery, result.outcome.slice(0, 2000));
  return result;
}

/** The fields of GitHub's payloads denv reads; each checked where it is used. */
interface Payload {
  action?: unknown;
  ref?: unknown;
  after?: unknown;
  deleted?: unknown;
  number?: unknown;
  installation?: { id?: unknown };
  repository?: { id?: unknown; full_name?: unknown; default_branch?: unknown };
  sender?: { login?: unknown };
  pusher?: { name?: unknown };
  pull_request?: {
    head?: { sha?: unknown; ref?: unknown; repo?: { full_name?: unknown } | null };
    base?: { ref?: unknown };
  };
}

async function dispatch(
  deps: WebhookDeps,
  app: GithubAppsTable,
  event: string,
  p: Payload,
): Promise<WebhookAnswer> {
  if (event === "ping") return { status: 200, outcome: "pong", deployments: [] };
  if (event === "installation" || event === "installation_repositories")
    return {
      status: 200,
      outcome: `noted: installation ${String(p.installation?.id)} ${String(p.action ?? "")}`.trim(),
      deployments: [],
    };
  if (event !== "push" && event !== "pull_request")
    return {
      status: 202,
      outcome: `ignored: denv acts on push and pull_request, not ${event}`,
      deployments: [],
    };
  const repoId = String(p.repository?.id ?? "");
  const fullName = String(p.repository?.full_name ?? "");
  const installation = String(p.installation?.id ?? "");
  if (!/^\d{1,20}$/.test(repoId) || !/^\d{1,20}$/.test(installation))
    return {
      status: 400,
      outcome: "refused: the payload names no repository or installation",
      deployments: [],
    };
  const projects = await projectsOfRepository(deps.store, app.id, repoId);
  if (projects.length === 0)
    return {
      status: 202,
      outcome: `ignored: no project of this App's team deploys ${fullName}`,
      deployments: [],
    };
  // The installation the delivery names must be the one each project reads through.
  const mine = projects.filter((x) => x.github_installation_id === installation);
  if (mine.length === 0)
    return {
      status: 403,
      outcome: `refused: installation ${installation} is not the one ${projects.map((x) => x.name).join(", ")} read ${fullName} through`,
      deployments: [],
    };
  const said: string[] = [];
  const launched: string[] = [];
  for (const project of mine) {
    const r =
      event === "push" ? await onPush(deps, app, project, p) : await onPullRequest(deps, app, project, p);
    said.push(`${project.name}: ${r.outcome}`);
    launched.push(...r.deployments);
  }
  return { status: launched.length ? 202 : 200, outcome: said.join("; "), deployments: launched };
}

type Acted = { outcome: string; deployments: string[] };

async function onPush(
  deps: WebhookDeps,
  app: GithubAppsTable,
  project: ProjectsTable,
  p: Payload,
): Promise<Acted> {
  const ref = String(p.ref ?? "");
  if (!ref.startsWith("refs/heads/")) return { outcome: `ignored: ${ref} is not a branch`, deployments: [] };
  const branch = ref.slice("refs/heads/".length);
  const after = String(p.after ?? "");
  const deleted = p.deleted === true;
  const pushedBy = String(p.pusher?.name ?? p.sender?.login ?? "") || null;
  const main = parseGitHubSource(project.source).ref ?? String(p.repository?.default_branch ?? "");
  if (!deleted && !/^[0-9a-f]{40}$/.test(after))
    return { outcome: "refused: the push names no commit", deployments: [] };
  if (branch === main) {
    if (deleted) return { outcome: `ignored: ${branch} was deleted`, deployments: [] };
    const id = await deployFor(deps, app, project, p, {
      envName: "alpha",
      trigger: "push",
      commit: after,
      ref: branch,
      pushedBy,
    });
    return { outcome: `deploying ${after.slice(0, 12)} of ${branch} to alpha (${id})`, deployments: [id] };
  }
  const patterns = await branchPatterns(deps, project);
  if (!patterns.some((pattern) => branchMatches(pattern, branch)))
    return { outcome: `ignored: ${branch} is not a branch the project deploys`, deployments: [] };
  const envName = branchEnvironmentName(branch);
  if (!(await ownsEnvironment(deps.store, project, envName, "branch")))
    return {
      outcome: `refused: environment ${envName} exists and was not made for a branch; ${branch} is not deployed over it`,
      deployments: [],
    };
  if (deleted) return teardown(deps, app, project, envName, `${branch} was deleted`);
  const id = await deployFor(deps, app, project, p, {
    envName,
    trigger: "branch",
    commit: after,
    ref: branch,
    pushedBy,
  });
  return { outcome: `deploying ${after.slice(0, 12)} of ${branch} to ${envName} (${id})`, deployments: [id] };
}

async function onPullRequest(
  deps: WebhookDeps,
  app: GithubAppsTable,
  project: ProjectsTable,
  p: Payload,
): Promise<Acted> {
  const action = String(p.action ?? "");
  const number = Number(p.number);
  if (!Number.isInteger(number) || number < 1 || number > 1e9)
    return { outcome: "refused: the pull request has no number", deployments: [] };
  const envName = `pr-${number}`;
  const main = parseGitHubSource(project.source).ref ?? String(p.repository?.default_branch ?? "");
  const base = String(p.pull_request?.base?.ref ?? "");
  if (base !== main) return { outcome: `ignored: #${number} is into ${base}, not ${main}`, deployments: [] };
  if (!(await ownsEnvironment(deps.store, project, envName, "preview")))
    return {
      outcome: `refused: environment ${envName} exists and is not #${number}'s preview`,
      deployments: [],
    };
  if (action === "closed") {
    await takePreviewApproval(deps.store, project.id, number);
    return teardown(deps, app, project, envName, `#${number} was closed`);
  }
  if (!PREVIEW_ACTIONS.has(action)) return { outcome: `ignored: pull_request ${action}`, deployments: [] };
  const head = String(p.pull_request?.head?.sha ?? "");
  if (!/^[0-9a-f]{40}$/.test(head))
    return { outcome: "refused: the pull request names no head commit", deployments: [] };
  // A PR from a fork is someone else's code: it never starts from alpha's data, and deploys only as
  // the project says (by default once a member approves its head, as GitHub asks for outsiders').
  const headRepo = String(p.pull_request?.head?.repo?.full_name ?? "");
  const fork = headRepo !== String(p.repository?.full_name ?? "");
  const held = await previewHeld(deps.store, project, envName, fork);
  if (held) return { outcome: held, deployments: [] };
  if (fork && forkPreviewsOf(project) === "approve") {
    await putPreviewApproval(deps.store, {
      project_id: project.id,
      pr_number: number,
      team_id: project.team_id,
      head_sha: head,
      ref: String(p.pull_request?.head?.ref ?? "").slice(0, 255),
      head_repository: headRepo.slice(0, 255),
      pushed_by: String(p.sender?.login ?? "").slice(0, 100) || null,
      installation_id: String(p.installation?.id ?? ""),
      created_at: now(),
    });
    return {
      outcome: `waiting: #${number} is from a fork (${headRepo.slice(0, 100)}); its preview deploys once a member approves ${head.slice(0, 12)} (denv project previews ${project.name} --approve ${number})`,
      deployments: [],
    };
  }
  const alpha = fork ? undefined : await environmentNamed(deps.store, project.id, "alpha");
  const from = alpha && alpha.status !== "destroyed" ? (alpha.current_version_id ?? undefined) : undefined;
  const id = await deployFor(deps, app, project, p, {
    envName,
    trigger: "preview",
    commit: head,
    ref: String(p.pull_request?.head?.ref ?? ""),
    pushedBy: String(p.sender?.login ?? "") || null,
    prNumber: number,
    fork,
    ...(from ? { dataFromVersionId: from } : {}),
  });
  const onto = from ? ` onto alpha's ${from}` : fork ? " (from a fork: alpha's data is not given to it)" : "";
  return {
    outcome: `deploying #${number} at ${head.slice(0, 12)} to ${envName}${onto} (${id})`,
    deployments: [id],
  };
}

async function deployFor(
  deps: WebhookDeps,
  app: GithubAppsTable,
  project: ProjectsTable,
  p: Payload,
  a: {
    envName: string;
    trigger: "push" | "branch" | "preview";
    commit: string;
    ref: string;
    pushedBy: string | null;
    prNumber?: number;
    fork?: boolean;
    dataFromVersionId?: string;
  },
): Promise<string> {
  const launched = await deps.deployer.deploy(project, a.envName, {
    commit: a.commit,
    ref: a.ref,
    ...(a.dataFromVersionId ? { dataFromVersionId: a.dataFromVersionId } : {}),
    trigger: {
      trigger: a.trigger,
      ref: a.ref,
      pushed_by: a.pushedBy,
      ...(a.prNumber ? { pull_request: a.prNumber, from_fork: a.fork === true } : {}),
    },
  });
  await insertGithubDeploy(deps.store, {
    deployment_id: launched.deploymentId,
    team_id: project.team_id,
    project_id: project.id,
    environment_name: a.envName,
    trigger: a.trigger,
    commit_sha: a.commit,
    ref: a.ref,
    pushed_by: a.pushedBy,
    pr_number: a.prNumber ?? null,
    check_run_id: null,
    gh_deployment_id: null,
    created_at: now(),
  });
  followOnGitHub(deps, {
    app,
    installationId: String(p.installation?.id),
    // The project's own name of it (checked when it was made), not the payload's.
    repository: parseGitHubSource(project.source).repository,
    project,
    envName: a.envName,
    environmentId: launched.environmentId,
    deploymentId: launched.deploymentId,
    headSha: a.commit,
    ghDeployment: a.trigger !== "push",
    transient: a.trigger === "preview",
  });
  return launched.deploymentId;
}

async function teardown(
  deps: WebhookDeps,
  app: GithubAppsTable,
  project: ProjectsTable,
  envName: string,
  why: string,
): Promise<Acted> {
  const env = await environmentNamed(deps.store, project.id, envName);
  if (!env || env.status === "destroyed")
    return { outcome: `${why}; ${envName} was not running`, deployments: [] };
  const launched = await deps.deployer.destroy(env);
  markInactive(deps, app, project, envName, launched);
  return {
    outcome: `${why}: destroying ${envName} (${launched.deploymentId})`,
    deployments: [launched.deploymentId],
  };
}

/**
 * An environment a webhook may deploy over or destroy: one that does not exist yet, or one its
 * webhooks made for this trigger (a branch named `alpha` or like a hand-made environment is not).
 */
async function ownsEnvironment(
  store: Store,
  project: ProjectsTable,
  envName: string,
  trigger: string,
): Promise<boolean> {
  if (envName === "alpha") return false;
  const env = await environmentNamed(store, project.id, envName);
  if (!env) return true;
  const rows = await projectGithubDeploys(store, project.id, envName);
  return rows.some((r) => r.trigger === trigger);
}

/** The project's own setting, else x-denv.branches of alpha's current version. */
async function branchPatterns(deps: WebhookDeps, project: ProjectsTable): Promise<string[]> {
  if (project.branches_json) return JSON.parse(project.branches_json) as string[];
  const alpha = await environmentNamed(deps.store, project.id, "alpha");
  const sealed = await versionSpecJson(deps.store, alpha?.current_version_id ?? null);
  if (!sealed) return [];
  try {
    const spec = JSON.parse(deps.secrets.openText(sealed)) as { branches?: unknown };
    return Array.isArray(spec.branches)
      ? spec.branches.filter((b): b is string => typeof b === "string")
      : [];
  } catch {
    return [];
  }
}

/** `*` matches within one path segment, `**` across them; anything else matches itself. */
export function branchMatches(pattern: string, branch: string): boolean {
  const re = pattern
    .split("**")
    .map((part) =>
      part
        .split("*")
        .map((s) => s.replace(/[.+?^${}()|[\]\\/]/g, "\\$&"))
        .join("[^/]*"),
    )
    .join(".*");
  return new RegExp(`^${re}$`).test(branch);
}

/** A branch's environment: its name with what names may not hold made `-`, at most 63 characters. */
export function branchEnvironmentName(branch: string): string {
  const name = branch
    .toLowerCase()
    .replace(/[^a-z0-9_-]+/g, "-")
    .replace(/-{2,}/g, "-")
    .replace(/^[-_]+|[-_]+$/g, "")
    .slice(0, 63)
    .replace(/[-_]+$/, "");
  return name || "branch";
}

/** Pull-request previews a project keeps at once when it says nothing else. */
export const DEFAULT_PREVIEW_BUDGET = 4;

/** What a project does with a fork's pull request: wait for approval (the default), deploy, or none. */
export function forkPreviewsOf(project: ProjectsTable): "approve" | "deploy" | "off" {
  const v = project.fork_previews;
  return v === "deploy" || v === "off" ? v : "approve";
}

/**
 * Why a pull request's preview may not be deployed now, or null: forks' previews turned off, or
 * the project's preview budget spent by other pull requests (its own preview, redeployed, counts
 * once).
 */
async function previewHeld(
  store: Store,
  project: ProjectsTable,
  envName: string,
  fork: boolean,
): Promise<string | null> {
  if (fork && forkPreviewsOf(project) === "off")
    return `refused: project ${project.name} deploys no previews of pull requests from forks (denv project previews ${project.name} --forks approve|deploy)`;
  const budget = project.preview_budget ?? DEFAULT_PREVIEW_BUDGET;
  const live = (await livePreviews(store, project.id)).filter((n) => n !== envName);
  if (live.length >= budget)
    return `refused: project ${project.name} keeps at most ${budget} previews at once, and ${live.length} run (${live.slice(0, 8).join(", ")}); close a pull request, or raise it (denv project previews ${project.name} --budget N)`;
  return null;
}

/**
 * A member approves a fork's waiting head: its preview is deployed as the delivery would have
 * deployed it, starting empty. Answers the deployment's id.
 */
export async function approvePreview(
  deps: WebhookDeps,
  project: ProjectsTable,
  prNumber: number,
): Promise<{ deploymentId: string; head: string }> {
  const envName = `pr-${prNumber}`;
  const waiting = (await previewApprovals(deps.store, project.id)).find((w) => w.pr_number === prNumber);
  if (!waiting)
    throw new DenvError("not_found", `no preview of #${prNumber} waits for approval in ${project.name}`);
  if (!project.github_app_row_id)
    throw new DenvError("conflict", `project ${project.name} is not read through a GitHub App`);
  const app = await githubAppRow(deps.store, project.github_app_row_id);
  if (!app)
    throw new DenvError("conflict", `the GitHub App project ${project.name} was read through is gone`);
  const held = await previewHeld(deps.store, project, envName, true);
  if (held) throw new DenvError("conflict", held.replace(/^refused: /, ""));
  if (!(await ownsEnvironment(deps.store, project, envName, "preview")))
    throw new DenvError("conflict", `environment ${envName} exists and is not #${prNumber}'s preview`);
  await takePreviewApproval(deps.store, project.id, prNumber);
  const deploymentId = await deployFor(
    deps,
    app,
    project,
    { installation: { id: waiting.installation_id } },
    {
      envName,
      trigger: "preview",
      commit: waiting.head_sha,
      ref: waiting.ref,
      pushedBy: waiting.pushed_by,
      prNumber,
      fork: true,
    },
  );
  return { deploymentId, head: waiting.head_sha };
}
