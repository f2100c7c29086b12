/**
 * A local double of GitHub for the GitHub App integration's tests, on loopback: the REST calls denv
 * makes (GET /app, installations and their access tokens, repositories, check runs, deployments and
 * their statuses) and git over smart HTTP for the repositories it holds (git http-backend over a
 * directory the test commits to). It checks what GitHub checks: the App's JWT is RS256 under the
 * App's public key, issued by the App, unexpired and at most ten minutes long; an installation
 * token reaches only its installation's repositories, over the API and over git. It records what
 * was written (check runs with every update, deployments with every status) for the test to read,
 * and signs webhook deliveries the way GitHub does (X-Hub-Signature-256 over the raw body).
 */
import { createHmac, createPublicKey, randomBytes, verify } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { gitHttpBackend } from "./git-http-server.ts";

export interface DoubleApp {
  id: string;
  slug: string;
  publicKeyPem: string;
}

export interface DoubleRepo {
  id: number;
  fullName: string;
  defaultBranch: string;
}

export interface CheckRun {
  id: number;
  repo: string;
  name: string;
  head_sha: string;
  status: string;
  conclusion?: string;
  details_url?: string;
  external_id?: string;
  output?: { title: string; summary: string };
  /** Each state it was set to, in order. */
  history: string[];
}

export interface GhDeployment {
  id: number;
  repo: string;
  ref: string;
  environment: string;
  transient_environment: boolean;
  statuses: Array<{ state: string; environment_url?: string; log_url?: string; description?: string }>;
}

export class GitHubDouble {
  url = "";
  host = "";
  readonly apps = new Map<string, DoubleApp>();
  /** Installation id → the App it is of and the repositories it gives. */
  readonly installations = new Map<number, { appId: string; account: string; repos: string[] }>();
  readonly repos = new Map<string, DoubleRepo>();
  readonly checkRuns: CheckRun[] = [];
  readonly deployments: GhDeployment[] = [];
  /** Every JWT or token refusal, for tests to see why a call failed. */
  readonly refusals: string[] = [];
  private readonly tokens = new Map<string, number>();
  private server: Server | null = null;
  private readonly git: ReturnType<typeof gitHttpBackend>;

  readonly gitRoot: string;

  constructor(gitRoot: string) {
    this.gitRoot = gitRoot;
    this.git = gitHttpBackend(gitRoot);
  }

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err) => send(res, 500, { message: String(err) }));
    });
    await new Promise<void>((r) => this.server?.listen(0, "127.0.0.1", r));
    const port = (this.server.address() as { port: number }).port;
    this.url = `http://127.0.0.1:${port}`;
    this.host = `127.0.0.1:${port}`;
  }

  close(): Promise<void> {
    return new Promise((r) => (this.server ? this.server.close(() => r()) : r()));
  }

  /** The headers and body GitHub would send for a delivery of `event` by App `appId`. */
  delivery(
    appId: string,
    secret: string,
    event: string,
    payload: unknown,
    deliveryId: string = crypto.randomUUID(),
  ) {
    const body = JSON.stringify(payload);
    const signature = `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;
    return {
      body,
      headers: {
        "content-type": "application/json",
        "x-github-event": event,
        "x-github-delivery": deliveryId,
        "x-github-hook-id": "1",
        "x-github-hook-installation-target-type": "integration",
        "x-github-hook-installation-target-id": appId,
        "x-hub-signature-256": signature,
        "user-agent": "GitHub-Hookshot/double",
      },
    };
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://x");
    const path = url.pathname;
    const git = /^\/([\w.-]+)\/([\w.-]+?)(?:\.git)?\/(info\/refs|git-upload-pack)$/.exec(path);
    if (git) return this.serveGit(req, res, `${git[1]}/${git[2]}`);
    const body = req.method === "GET" ? {} : await readJson(req);
    const auth = req.headers.authorization ?? "";

    // Authenticated as the App (its JWT).
    if (path === "/app" || path.startsWith("/app/") || /^\/repos\/[^/]+\/[^/]+\/installation$/.test(path)) {
      const app = this.appOf(auth);
      if (!app) return send(res, 401, { message: "A JSON web token could not be decoded" });
      if (path === "/app" && req.method === "GET")
        return send(res, 200, { id: Number(app.id), slug: app.slug, name: app.slug });
      if (path === "/app/installations" && req.method === "GET")
        return send(
          res,
          200,
          [...this.installations]
            .filter(([, i]) => i.appId === app.id)
            .map(([id, i]) => ({ id, account: { login: i.account }, app_id: Number(app.id) })),
        );
      const token = /^\/app\/installations\/(\d+)\/access_tokens$/.exec(path);
      if (token && req.method === "POST") {
        const inst = this.installations.get(Number(token[1]));
        if (!inst || inst.appId !== app.id) return send(res, 404, { message: "Not Found" });
        const t = `ghs_${randomBytes(18).toString("hex")}`;
        this.tokens.set(t, Number(token[1]));
        return send(res, 201, {
          token: t,
          expires_at: new Date(Date.now() + 3600_000).toISOString(),
          permissions: { contents: "read", checks: "write", deployments: "write", metadata: "read" },
          repository_selection: "selected",
        });
      }
      const inst = /^\/repos\/([^/]+)\/([^/]+)\/installation$/.exec(path);
      if (inst) {
        const full = `${inst[1]}/${inst[2]}`;
        const found = [...this.installations].find(([, i]) => i.appId === app.id && i.repos.includes(full));
        if (!found) return send(res, 404, { message: "Not Found" });
        return send(res, 200, { id: found[0], account: { login: found[1].account }, app_id: Number(app.id) });
      }
      return send(res, 404, { message: "Not Found" });
    }

    // Authenticated as an installation (its token).
    const installationId = this.installationOf(auth);
    if (installationId === null) return send(res, 401, { message: "Bad credentials" });
    const inst = this.installations.get(installationId) as { repos: string[] };
    if (path === "/installation/repositories" && req.method === "GET")
      return send(res, 200, {
        total_count: inst.repos.length,
        repositories: inst.repos.map((r) => this.repoJson(r)),
      });
    const m = /^\/repos\/([^/]+)\/([^/]+)(\/.*)?$/.exec(path);
    if (!m) return send(res, 404, { message: "Not Found" });
    const full = `${m[1]}/${m[2]}`;
    if (!inst.repos.includes(full) || !this.repos.has(full)) return send(res, 404, { message: "Not Found" });
    const rest = m[3] ?? "";
    const b = body as Record<string, any>;
    if (rest === "" && req.method === "GET") return send(res, 200, this.repoJson(full));
    if (rest === "/check-runs" && req.method === "POST") {
      if (!b.name || !/^[0-9a-f]{40}$/.test(String(b.head_sha)))
        return send(res, 422, { message: "name and head_sha are required" });
      const run: CheckRun = {
        id: 1000 + this.checkRuns.length,
        repo: full,
        name: b.name,
        head_sha: b.head_sha,
        status: b.status ?? "queued",
        details_url: b.details_url,
        external_id: b.external_id,
        history: [b.status ?? "queued"],
      };
      this.checkRuns.push(run);
      return send(res, 201, { id: run.id, status: run.status });
    }
    const cr = /^\/check-runs\/(\d+)$/.exec(rest);
    if (cr && req.method === "PATCH") {
      const run = this.checkRuns.find((r) => r.id === Number(cr[1]) && r.repo === full);
      if (!run) return send(res, 404, { message: "Not Found" });
      Object.assign(run, {
        ...(b.status ? { status: b.status } : {}),
        ...(b.conclusion ? { conclusion: b.conclusion, status: "completed" } : {}),
        ...(b.output ? { output: b.output } : {}),
        ...(b.details_url ? { details_url: b.details_url } : {}),
      });
      run.history.push(run.conclusion ? `completed:${run.conclusion}` : run.status);
      return send(res, 200, { id: run.id, status: run.status });
    }
    if (rest === "/deployments" && req.method === "POST") {
      const d: GhDeployment = {
        id: 5000 + this.deployments.length,
        repo: full,
        ref: String(b.ref),
        environment: String(b.environment),
        transient_environment: b.transient_environment === true,
        statuses: [],
      };
      this.deployments.push(d);
      return send(res, 201, { id: d.id });
    }
    const ds = /^\/deployments\/(\d+)\/statuses$/.exec(rest);
    if (ds && req.method === "POST") {
      const d = this.deployments.find((x) => x.id === Number(ds[1]) && x.repo === full);
      if (!d) return send(res, 404, { message: "Not Found" });
      d.statuses.push({
        state: b.state,
        environment_url: b.environment_url,
        log_url: b.log_url,
        description: b.description,
      });
      return send(res, 201, { id: d.statuses.length });
    }
    return send(res, 404, { message: "Not Found" });
  }

  private repoJson(full: string) {
    const r = this.repos.get(full) as DoubleRepo;
    return {
      id: r.id,
      full_name: r.fullName,
      name: r.fullName.split("/")[1],
      private: true,
      default_branch: r.defaultBranch,
      clone_url: `${this.url}/${r.fullName}.git`,
    };
  }

  /** git over HTTP: Basic x-access-token:TOKEN of an installation that gives this repository. */
  private serveGit(req: IncomingMessage, res: ServerResponse, full: string) {
    const basic = /^Basic (.+)$/.exec(req.headers.authorization ?? "");
    const [user, token] = basic
      ? Buffer.from(basic[1] as string, "base64")
          .toString()
          .split(":")
      : [];
    const inst = user === "x-access-token" && token ? this.tokens.get(token) : undefined;
    if (inst === undefined || !this.installations.get(inst)?.repos.includes(full)) {
      this.refusals.push(`git ${full}: ${basic ? "a token that does not reach it" : "no credentials"}`);
      res.writeHead(401, { "www-authenticate": 'Basic realm="GitHub"' });
      return void res.end();
    }
    this.git(req, res);
  }

  /** The App a JWT is from: RS256 under its public key, iss its id, unexpired, ≤ 10 minutes long. */
  private appOf(auth: string): DoubleApp | null {
    const m = /^Bearer ([\w-]+)\.([\w-]+)\.([\w-]+)$/i.exec(auth);
    if (!m) return this.refuse("no JWT");
    try {
      const header = JSON.parse(Buffer.from(m[1] as string, "base64url").toString());
      const claims = JSON.parse(Buffer.from(m[2] as string, "base64url").toString());
      if (header.alg !== "RS256") return this.refuse(`alg ${header.alg}`);
      const app = this.apps.get(String(claims.iss));
      if (!app) return this.refuse(`iss ${claims.iss} is no App`);
      const ok = verify(
        "RSA-SHA256",
        Buffer.from(`${m[1]}.${m[2]}`),
        createPublicKey(app.publicKeyPem),
        Buffer.from(m[3] as string, "base64url"),
      );
      if (!ok) return this.refuse("signature");
      const nowS = Math.floor(Date.now() / 1000);
      if (!(claims.exp > nowS) || claims.exp - claims.iat > 660 || claims.iat > nowS + 60)
        return this.refuse("expiry");
      return app;
    } catch (err) {
      return this.refuse(String(err));
    }
  }

  private installationOf(auth: string): number | null {
    const m = /^(?:token|bearer) (ghs_\w+)$/i.exec(auth);
    const id = m ? this.tokens.get(m[1] as string) : undefined;
    if (id === undefined) {
      this.refuse("installation token");
      return null;
    }
    return id;
  }

  private refuse(why: string): null {
    this.refusals.push(why);
    return null;
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json; charset=utf-8" });
  res.end(JSON.stringify(body));
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString("utf8");
  return text ? JSON.parse(text) : {};
}
