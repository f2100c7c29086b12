/**
 * One team's GitHub App, as denv calls it: the App's JWT and installation tokens from
 * `@octokit/auth-app` (tokens cached until a minute before their hour is up), REST calls through
 * `@octokit/request`. Every call goes to the App's API base only, through the server's fetch policy,
 * never following a redirect (a token is never sent to a host it was not made for); what GitHub
 * answers is bounded and read as untrusted (ids and names checked before use).
 */
import { createPrivateKey } from "node:crypto";
import { DenvError } from "@denv/protocol";
import { createAppAuth } from "@octokit/auth-app";
import { request as octokitRequest } from "@octokit/request";
import type { FetchPolicy } from "../fetch-policy.ts";
import { isRefName } from "../git-source.ts";
import { onTeamsBehalf } from "../outbound-guard.ts";

export const GITHUB_API_URL = "https://api.github.com";

/** What a repository is to denv: GitHub's answer to GET /repos/{owner}/{repo}, checked. */
export interface GitHubRepository {
  id: string;
  fullName: string;
  defaultBranch: string;
  cloneUrl: string;
  private: boolean;
}

export interface CheckRunBody {
  name?: string;
  head_sha?: string;
  status?: "queued" | "in_progress" | "completed";
  conclusion?: "success" | "failure" | "cancelled";
  details_url?: string;
  external_id?: string;
  started_at?: string;
  completed_at?: string;
  output?: { title: string; summary: string; text?: string };
}

/** A full repository name as GitHub spells them: OWNER/REPO of letters, digits, `.`, `-`, `_`. */
export const REPO_NAME = /^(?!\.{1,2}\/)[A-Za-z0-9_.-]{1,100}\/(?!\.{1,2}$)[A-Za-z0-9_.-]{1,100}$/;

/** Checks a PEM private key before it is stored: an RSA key GitHub's RS256 JWTs can be signed with. */
export function checkPrivateKey(pem: string): void {
  let key: ReturnType<typeof createPrivateKey>;
  try {
    key = createPrivateKey(pem);
  } catch {
    throw new DenvError(
      "invalid_argument",
      "private_key is not a PEM private key: give the .pem GitHub generated for the App",
    );
  }
  if (key.asymmetricKeyType !== "rsa")
    throw new DenvError(
      "invalid_argument",
      `private_key is an ${key.asymmetricKeyType} key; a GitHub App's is RSA`,
    );
}

export class GitHubClient {
  readonly appId: string;
  readonly apiUrl: string;
  private readonly request: typeof octokitRequest;
  private readonly auth: ReturnType<typeof createAppAuth>;

  constructor(app: { appId: string; apiUrl: string; privateKey: string }, policy: FetchPolicy) {
    this.appId = app.appId;
    this.apiUrl = app.apiUrl.replace(/\/+$/, "");
    const base = new URL(this.apiUrl);
    policy.check(base, "the GitHub API");
    // Every request: to the API's host only, redirects refused, the answer bounded.
    const guarded: typeof fetch = async (input, init) => {
      const url = new URL(input instanceof Request ? input.url : String(input));
      if (url.origin !== base.origin)
        throw new DenvError("forbidden", `the GitHub API named ${url.origin}, not ${base.origin}`);
      // Its connection held to the policy too: GitHub's name must resolve to a public address.
      const res = await onTeamsBehalf(policy, "the GitHub API", () =>
        fetch(url, { ...init, redirect: "manual", signal: AbortSignal.timeout(30_000) }),
      );
      if (res.status >= 300 && res.status < 400)
        throw new DenvError(
          "unavailable",
          `the GitHub API answered ${res.status} (a redirect, not followed)`,
        );
      const length = Number(res.headers.get("content-length") ?? 0);
      if (length > MAX_ANSWER_BYTES)
        throw new DenvError(
          "unavailable",
          `the GitHub API answered ${length} bytes (over ${MAX_ANSWER_BYTES})`,
        );
      return res;
    };
    this.request = octokitRequest.defaults({
      baseUrl: this.apiUrl,
      headers: { "user-agent": "denv" },
      request: { fetch: guarded },
    });
    this.auth = createAppAuth({ appId: app.appId, privateKey: app.privateKey, request: this.request });
  }

  /** GET /app with the App's JWT: who the App is (checks the id and key belong together). */
  async app(): Promise<{ id: string; slug: string; name: string }> {
    const { token } = await this.auth({ type: "app" });
    const r = await this.call(() =>
      this.request("GET /app", { headers: { authorization: `bearer ${token}` } }),
    );
    const d = r as { id?: unknown; slug?: unknown; name?: unknown };
    if (String(d.id) !== this.appId)
      throw new DenvError(
        "invalid_argument",
        `GitHub says this key belongs to App ${String(d.id)}, not ${this.appId}`,
      );
    return { id: String(d.id), slug: String(d.slug ?? ""), name: String(d.name ?? d.slug ?? "") };
  }

  /** The App's installation on a repository, or null where the App is not installed there. */
  async repositoryInstallation(fullName: string): Promise<string | null> {
    const [owner, repo] = fullName.split("/");
    const { token } = await this.auth({ type: "app" });
    try {
      const d = (await this.call(() =>
        this.request("GET /repos/{owner}/{repo}/installation", {
          owner: owner as string,
          repo: repo as string,
          headers: { authorization: `bearer ${token}` },
        }),
      )) as { id?: unknown };
      return idOf(d.id, "installation");
    } catch (err) {
      if (err instanceof DenvError && err.code === "not_found") return null;
      throw err;
    }
  }

  /** The App's installations: the accounts it was installed on. */
  async installations(): Promise<Array<{ id: string; account: string }>> {
    const { token } = await this.auth({ type: "app" });
    const d = (await this.call(() =>
      this.request("GET /app/installations", {
        per_page: 100,
        headers: { authorization: `bearer ${token}` },
      }),
    )) as Array<{ id?: unknown; account?: { login?: unknown } }>;
    return (Array.isArray(d) ? d : []).map((i) => ({
      id: idOf(i.id, "installation"),
      account: String(i.account?.login ?? ""),
    }));
  }

  /** The repositories an installation gives the App. */
  async installationRepositories(installationId: string): Promise<GitHubRepository[]> {
    const d = (await this.asInstallation(installationId, (h) =>
      this.request("GET /installation/repositories", { per_page: 100, headers: h }),
    )) as { repositories?: unknown[] };
    return (d.repositories ?? []).map(repositoryOf);
  }

  /** An installation's token for git over HTTPS (an hour's, cached by auth-app). */
  async installationToken(installationId: string): Promise<string> {
    const a = await this.auth({ type: "installation", installationId: Number(installationId) });
    return a.token;
  }

  async repository(installationId: string, fullName: string): Promise<GitHubRepository> {
    const [owner, repo] = fullName.split("/");
    return repositoryOf(
      await this.asInstallation(installationId, (h) =>
        this.request("GET /repos/{owner}/{repo}", {
          owner: owner as string,
          repo: repo as string,
          headers: h,
        }),
      ),
    );
  }

  /** POST /repos/{owner}/{repo}/check-runs; the run's id. */
  async createCheckRun(installationId: string, fullName: string, body: CheckRunBody): Promise<string> {
    const d = (await this.asInstallation(installationId, (h) =>
      this.request(`POST /repos/${fullName}/check-runs`, { ...body, headers: h }),
    )) as { id?: unknown };
    return idOf(d.id, "check run");
  }

  async updateCheckRun(
    installationId: string,
    fullName: string,
    id: string,
    body: CheckRunBody,
  ): Promise<void> {
    await this.asInstallation(installationId, (h) =>
      this.request(`PATCH /repos/${fullName}/check-runs/${encodeURIComponent(id)}`, { ...body, headers: h }),
    );
  }

  /** A GitHub Deployment for a branch or preview environment; its id. */
  async createDeployment(
    installationId: string,
    fullName: string,
    body: { ref: string; environment: string; transient_environment: boolean; description: string },
  ): Promise<string> {
    const d = (await this.asInstallation(installationId, (h) =>
      this.request(`POST /repos/${fullName}/deployments`, {
        ...body,
        auto_merge: false,
        required_contexts: [],
        production_environment: false,
        headers: h,
      }),
    )) as { id?: unknown };
    return idOf(d.id, "deployment");
  }

  async deploymentStatus(
    installationId: string,
    fullName: string,
    id: string,
    body: {
      state: "in_progress" | "success" | "failure" | "inactive";
      environment_url?: string;
      log_url?: string;
      description?: string;
    },
  ): Promise<void> {
    await this.asInstallation(installationId, (h) =>
      this.request(`POST /repos/${fullName}/deployments/${encodeURIComponent(id)}/statuses`, {
        ...body,
        description: body.description?.slice(0, 140),
        headers: h,
      }),
    );
  }

  private async asInstallation(
    installationId: string,
    call: (headers: Record<string, string>) => Promise<{ data: unknown }>,
  ): Promise<unknown> {
    const token = await this.installationToken(installationId);
    return this.call(() => call({ authorization: `token ${token}` }));
  }

  /** A REST call's data; GitHub's refusals become denv's errors with GitHub's own words. */
  private async call(fn: () => Promise<{ data: unknown }>): Promise<unknown> {
    try {
      return (await fn()).data;
    } catch (err) {
      if (err instanceof DenvError) throw err;
      const e = err as { status?: number; message?: string };
      const said = String(e.message ?? err)
        .replace(/[^\x20-\x7e]/g, "")
        .slice(0, 300);
      if (e.status === 404) throw new DenvError("not_found", `GitHub: ${said}`);
      if (e.status === 401 || e.status === 403) throw new DenvError("forbidden", `GitHub refused: ${said}`);
      throw new DenvError("unavailable", `the GitHub API failed: ${said}`);
    }
  }
}

const MAX_ANSWER_BYTES = 8 * 1024 * 1024;

function idOf(v: unknown, what: string): string {
  const s = String(v);
  if (!/^\d{1,20}$/.test(s))
    throw new DenvError("unavailable", `GitHub answered a ${what} id that is not a number`);
  return s;
}

export function repositoryOf(d: unknown): GitHubRepository {
  const r = d as {
    id?: unknown;
    full_name?: unknown;
    default_branch?: unknown;
    clone_url?: unknown;
    private?: unknown;
  };
  const fullName = String(r.full_name ?? "");
  if (!REPO_NAME.test(fullName))
    throw new DenvError("unavailable", "GitHub answered a repository without a valid name");
  const defaultBranch = String(r.default_branch ?? "");
  if (!isRefName(defaultBranch))
    throw new DenvError(
      "unavailable",
      `GitHub answered ${fullName} with a default branch denv does not take`,
    );
  return {
    id: idOf(r.id, "repository"),
    fullName,
    defaultBranch,
    cloneUrl: String(r.clone_url ?? ""),
    private: r.private === true,
  };
}
