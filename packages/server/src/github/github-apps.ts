/**
 * The GitHub Apps teams connect: each team its own App (its id, private key and webhook secret,
 * the two secrets sealed at rest). An App's installations belong to the team that holds its key, so
 * a webhook signed with an App's secret acts on that team's projects only, and a project reads a
 * repository only through its own team's installation. `github:OWNER/REPO[@ref][#path]` sources are
 * fetched as one commit over git with the installation's token (git-source.ts: the same limits and
 * link refusals as any git source).
 */
import { DenvError } from "@denv/protocol";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { GitHubSourceReader } from "../deployments/project-source.ts";
import type { FetchPolicy } from "../fetch-policy.ts";
import { isRefName, openGitSource } from "../git-source.ts";
import { newId, now } from "../ids.ts";
import {
  deleteGithubApp,
  githubAppByAppId,
  githubAppRow,
  insertGithubApp,
  projectsThroughApp,
  teamGithubApps,
} from "../store/github-store.ts";
import type { Store } from "../store/open-store.ts";
import type { GithubAppsTable, ProjectsTable } from "../store/schema.ts";
import {
  checkPrivateKey,
  GITHUB_API_URL,
  GitHubClient,
  type GitHubRepository,
  REPO_NAME,
} from "./github-client.ts";

/** A github: source, parsed: the repository, and optionally a branch and the project's directory. */
export interface GitHubSourceRef {
  repository: string;
  ref: string | null;
  path: string | null;
}

/** `github:OWNER/REPO[@ref][#path]`, checked; throws saying which part is wrong. */
export function parseGitHubSource(source: string): GitHubSourceRef {
  const m = /^github:([^@#]+)(?:@([^#]+))?(?:#(.+))?$/.exec(source);
  if (!m || !REPO_NAME.test(m[1] as string))
    throw new DenvError(
      "invalid_argument",
      `${source}: a GitHub source is github:OWNER/REPO[@BRANCH][#PATH]`,
    );
  const ref = m[2] ?? null;
  if (ref !== null && !isRefName(ref))
    throw new DenvError("invalid_argument", `${source}: ${ref} is not a branch or tag name git takes`);
  const path = m[3]?.replace(/\/+$/, "") ?? null;
  if (
    path !== null &&
    (path.startsWith("/") ||
      path.split("/").some((p) => p === "" || p === "." || p === "..") ||
      // biome-ignore lint/suspicious/noControlCharactersInRegex: refused in a path
      /[\u0000-\u001f\u007f\\]/.test(path))
  )
    throw new DenvError("invalid_argument", `${source}: #${path} is not a directory inside the repository`);
  return { repository: m[1] as string, ref, path };
}

/** What a project remembers of its repository: the App, the installation, GitHub's id of the repo. */
export interface GitHubBinding {
  github_app_row_id: string;
  github_installation_id: string;
  github_repository_id: string;
}

export class GitHubApps implements GitHubSourceReader {
  private readonly clients = new Map<string, GitHubClient>();

  private readonly deps: { store: Store; secrets: SecretBox; fetchPolicy: FetchPolicy };

  constructor(deps: { store: Store; secrets: SecretBox; fetchPolicy: FetchPolicy }) {
    this.deps = deps;
  }

  /** The App's client, made once per App (auth-app keeps its installation tokens). */
  client(row: GithubAppsTable): GitHubClient {
    let c = this.clients.get(row.id);
    if (!c) {
      c = new GitHubClient(
        {
          appId: row.app_id,
          apiUrl: row.api_url,
          privateKey: this.deps.secrets.open(row.private_key_sealed),
        },
        this.deps.fetchPolicy,
      );
      this.clients.set(row.id, c);
    }
    return c;
  }

  webhookSecret(row: GithubAppsTable): string {
    return this.deps.secrets.open(row.webhook_secret_sealed);
  }

  /** Connects a team's App: the key tried against GitHub (GET /app) before anything is kept. */
  async connect(
    teamId: string,
    body: { app_id: string; private_key: string; webhook_secret: string; api_url?: string | undefined },
  ): Promise<GithubAppsTable> {
    const { store, secrets, fetchPolicy } = this.deps;
    if (!/^\d{1,20}$/.test(body.app_id))
      throw new DenvError("invalid_argument", "app_id: GitHub's App ID is a number");
    checkPrivateKey(body.private_key);
    if (body.webhook_secret.length < 16)
      throw new DenvError(
        "invalid_argument",
        "webhook_secret: at least 16 characters (GitHub signs every delivery with it)",
      );
    const apiUrl = checkApiUrl(body.api_url ?? GITHUB_API_URL, fetchPolicy);
    const taken = await githubAppByAppId(store, body.app_id);
    if (taken)
      throw new DenvError(
        "conflict",
        taken.team_id === teamId
          ? `App ${body.app_id} is already connected`
          : `App ${body.app_id} is connected by another team; an App's deliveries go to one team`,
      );
    const client = new GitHubClient(
      { appId: body.app_id, apiUrl, privateKey: body.private_key },
      fetchPolicy,
    );
    const app = await client.app().catch((err: DenvError) => {
      throw new DenvError(
        "invalid_argument",
        `GitHub did not accept App ${body.app_id} with this key: ${err.message}`,
      );
    });
    const row: GithubAppsTable = {
      id: newId("gha"),
      team_id: teamId,
      app_id: body.app_id,
      slug: app.slug,
      api_url: apiUrl,
      private_key_sealed: secrets.seal(body.private_key),
      webhook_secret_sealed: secrets.seal(body.webhook_secret),
      created_at: now(),
    };
    await insertGithubApp(store, row);
    return row;
  }

  async disconnect(teamId: string, appId: string): Promise<void> {
    const used = await projectsThroughApp(this.deps.store, teamId, appId);
    if (used.length)
      throw new DenvError(
        "conflict",
        `App ${appId} is how ${used.join(", ")} read their repositories: delete those projects first`,
      );
    const row = (await this.teamApps(teamId)).find((a) => a.app_id === appId);
    if (!row || !(await deleteGithubApp(this.deps.store, teamId, appId)))
      throw new DenvError("not_found", `no GitHub App ${appId} connected`);
    this.clients.delete(row.id);
  }

  teamApps(teamId: string): Promise<GithubAppsTable[]> {
    return teamGithubApps(this.deps.store, teamId);
  }

  /**
   * The team's installation that reads a repository, found at project create: the first of the
   * team's Apps installed on it. Refused, saying what to do, when none is.
   */
  async bind(teamId: string, source: string): Promise<GitHubBinding & { repository: GitHubRepository }> {
    const { repository } = parseGitHubSource(source);
    const apps = await this.teamApps(teamId);
    if (apps.length === 0)
      throw new DenvError(
        "invalid_argument",
        "connect a GitHub App first (denv github connect); denv reads GitHub repositories through it",
      );
    for (const app of apps) {
      const client = this.client(app);
      const installation = await client.repositoryInstallation(repository);
      if (!installation) continue;
      const repo = await client.repository(installation, repository);
      return {
        github_app_row_id: app.id,
        github_installation_id: installation,
        github_repository_id: repo.id,
        repository: repo,
      };
    }
    throw new DenvError(
      "invalid_argument",
      `${repository}: none of the team's GitHub Apps is installed on it; install ${apps
        .map((a) => `https://github.com/apps/${a.slug}/installations/new`)
        .join(" or ")} with access to the repository`,
    );
  }

  /** The repositories each of the team's installations gives (the console's picker). */
  async repositories(
    teamId: string,
  ): Promise<
    Array<{ app_id: string; installation_id: string; account: string; repositories: GitHubRepository[] }>
  > {
    const out = [];
    for (const app of await this.teamApps(teamId)) {
      const client = this.client(app);
      for (const inst of await client.installations())
        out.push({
          app_id: app.app_id,
          installation_id: inst.id,
          account: inst.account,
          repositories: await client.installationRepositories(inst.id),
        });
    }
    return out;
  }

  /** GitHubSourceReader: one commit of a github: project, fetched with its installation's token. */
  async open(project: ProjectsTable, at: { commit?: string; ref?: string }) {
    const parsed = parseGitHubSource(project.source);
    const app = project.github_app_row_id ? await this.appRow(project.github_app_row_id) : undefined;
    if (!app || !project.github_installation_id)
      throw new DenvError(
        "invalid_argument",
        `${project.source}: the GitHub App this project read through is no longer connected`,
      );
    const client = this.client(app);
    const repo = await client.repository(project.github_installation_id, parsed.repository);
    // A repository deleted and made again under the same name is another one: never deployed as this.
    if (repo.id !== project.github_repository_id)
      throw new DenvError(
        "forbidden",
        `${parsed.repository} is now another repository (GitHub id ${repo.id}; the project was made for ${project.github_repository_id})`,
      );
    const cloneUrl = checkCloneUrl(repo.cloneUrl, app.api_url);
    const token = await client.installationToken(project.github_installation_id);
    const ref = at.commit ? undefined : (at.ref ?? parsed.ref ?? repo.defaultBranch);
    const checkout = await openGitSource(cloneUrl, this.deps.fetchPolicy, {
      ...(at.commit ? { commit: at.commit } : {}),
      ...(ref ? { ref } : {}),
      ...(parsed.path ? { path: parsed.path } : {}),
      authorization: `Basic ${Buffer.from(`x-access-token:${token}`).toString("base64")}`,
      label: project.source,
    });
    return {
      checkout,
      source: {
        type: "github",
        repository: repo.fullName,
        commit: checkout.commit,
        ref: at.ref ?? ref ?? null,
        path: parsed.path,
        file: checkout.file,
      },
    };
  }

  private appRow(id: string): Promise<GithubAppsTable | undefined> {
    return githubAppRow(this.deps.store, id);
  }
}

/** The API base a team names (GitHub Enterprise Server's, or a double's): https, or http to an allowed host. */
function checkApiUrl(text: string, policy: FetchPolicy): string {
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    throw new DenvError("invalid_argument", `api_url: ${text} is not a URL`);
  }
  if (u.protocol !== "https:" && u.protocol !== "http:")
    throw new DenvError("invalid_argument", "api_url: an https:// URL");
  if (u.username || u.password || u.search || u.hash)
    throw new DenvError("invalid_argument", "api_url: no credentials, query or fragment");
  policy.check(u, "api_url");
  return u.href.replace(/\/+$/, "");
}

/**
 * Where git fetches with the installation's token: the repository's clone URL as GitHub answered
 * it, only on github.com (for api.github.com) or the API's own host, so the token is never sent
 * to a host another answer named.
 */
export function checkCloneUrl(cloneUrl: string, apiUrl: string): string {
  let u: URL;
  try {
    u = new URL(cloneUrl);
  } catch {
    throw new DenvError("unavailable", "GitHub answered a clone URL that is not a URL");
  }
  const api = new URL(apiUrl);
  const expected = api.host === "api.github.com" ? "github.com" : api.host;
  if (u.host !== expected || u.protocol !== api.protocol || u.username || u.password)
    throw new DenvError(
      "forbidden",
      `GitHub answered a clone URL on ${u.host}; denv sends its token to ${expected} only`,
    );
  return u.href;
}
