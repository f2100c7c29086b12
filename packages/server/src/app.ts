/**
 * The /v1 HTTP API (Hono). Every route but the OpenAPI document and host join needs an API key
 * (`Authorization: Bearer`); every object belongs to a team, and another team's object answers 404.
 * Errors are `{"error": {"code", "message"}}` with the status from the error table.
 */
import { Readable } from "node:stream";
import { DenvError, isDenvError } from "@denv/protocol";
import type { MiddlewareHandler } from "hono";
import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { stream, streamSSE } from "hono/streaming";
import type { z } from "zod";
import {
  cloudConnectBody,
  createProjectBody,
  createTeamBody,
  deployBody,
  type deploymentSchema,
  execBody,
  forkBody,
  hostJoinBody,
  openApiDocument,
  portUrlBody,
  rollbackBody,
  sandboxBody,
  uploadSourceBody,
  verifyBody,
} from "./api-schemas.ts";
import { checkCloudApiUrl, HetznerDriver } from "./clouds/hetzner-driver.ts";
import { NOT_YET, PROVIDERS } from "./clouds/provisioner.ts";
import type { SecretBox } from "./clouds/secret-box.ts";
import type { Deployer } from "./deployer.ts";
import { defaultDownloadsDir, download, installScript } from "./downloads.ts";
import type { FetchPolicy } from "./fetch-policy.ts";
import { checkGitUrl } from "./git-source.ts";
import type { HostHub } from "./host-hub.ts";
import { hashSecret, newId, newSecret, now } from "./ids.ts";
import {
  createPortUrl,
  listPortUrls,
  proxyHttp,
  revokePortUrls,
  splitTunnelPath,
  TUNNEL_PREFIX,
} from "./port-tunnels.ts";
import { DEFAULT_RATE_LIMIT, RateLimiter, type RateLimitOptions } from "./rate-limit.ts";
import type { Store } from "./store/open-store.ts";
import type { CloudsTable, DeploymentsTable, EnvironmentsTable, ProjectsTable } from "./store/schema.ts";

type Env = { Variables: { teamId: string; admin: boolean } };

export interface AppDeps {
  store: Store;
  hub: HostHub;
  deployer: Deployer;
  joinTokenTtlMs?: number;
  /** Where the denvd executables are served from (GET /v1/downloads/{file}). */
  downloadsDir?: string;
  /** Encrypts cloud tokens, sources and resolved specs at rest. */
  secrets: SecretBox;
  /** Hosts the server fetches from for teams (git sources, cloud APIs). */
  fetchPolicy: FetchPolicy;
  /** Requests per key (default DEFAULT_RATE_LIMIT). */
  rateLimit?: RateLimitOptions;
  /** Where the server's own faults are logged (their words never go to clients). */
  log?: (message: string, context?: Record<string, unknown>) => void;
}

const JSON_LIMIT = 1024 * 1024;
const EXEC_LIMIT = 80 * 1024 * 1024; // 50 MiB of stdin, base64
/** Files travel to the host inside one message (MAX_MESSAGE_BYTES, base64): 64 MiB of tar fits. */
const FILES_LIMIT = 64 * 1024 * 1024;

const SOURCE_LIMIT = 3 * JSON_LIMIT;

function tooLarge(limit: number) {
  return bodyLimit({
    maxSize: limit,
    onError: () => {
      throw new DenvError(
        "payload_too_large",
        `the request body is over ${limit} bytes (${Math.round(limit / 1024 ** 2)} MiB); send less at a time`,
      );
    },
  });
}

/**
 * Every route has a body limit: 1 MiB of JSON, more only where a route carries data (exec stdin,
 * files, a project's source). Port URLs stream their bodies to the service and buffer nothing.
 */
const BODY_LIMITS: { method: string; path: RegExp; limit: number }[] = [
  { method: "PUT", path: /^\/v1\/envs\/[^/]+\/files$/, limit: FILES_LIMIT },
  { method: "POST", path: /^\/v1\/envs\/[^/]+\/exec$/, limit: EXEC_LIMIT },
  { method: "PUT", path: /^\/v1\/projects\/[^/]+\/source$/, limit: SOURCE_LIMIT },
];
const limiters = new Map<number, ReturnType<typeof tooLarge>>();
function bodyLimits(): MiddlewareHandler {
  return async function bodyLimitsFor(c, next) {
    if (c.req.path.startsWith(TUNNEL_PREFIX)) return next();
    const limit =
      BODY_LIMITS.find((l) => l.method === c.req.method && l.path.test(c.req.path))?.limit ?? JSON_LIMIT;
    let mw = limiters.get(limit);
    if (!mw) {
      mw = tooLarge(limit);
      limiters.set(limit, mw);
    }
    return mw(c, next);
  };
}

async function parse<T extends z.ZodType>(req: Request, schema: T): Promise<z.infer<T>> {
  let raw: unknown;
  try {
    const text = await req.text();
    raw = text ? JSON.parse(text) : {};
  } catch {
    throw new DenvError("invalid_argument", "the body is not valid JSON");
  }
  const r = schema.safeParse(raw);
  if (!r.success) {
    const msg = r.error.issues.map((i) => `${i.path.join(".") || "(body)"}: ${i.message}`).join("; ");
    throw new DenvError("invalid_argument", msg);
  }
  return r.data;
}

export function serializeDeployment(d: DeploymentsTable): z.infer<typeof deploymentSchema> {
  const phases = JSON.parse(d.phases_json) as { name: string; status: string; evidence: unknown }[];
  const evidence = (name: string) => {
    const p = phases.find((x) => x.name === name && x.status === "succeeded");
    return (p?.evidence ?? null) as Record<string, unknown> | null;
  };
  const verdict = evidence("verdict");
  const str = (v: unknown) => (typeof v === "string" ? v : null);
  const num = (v: unknown) => (typeof v === "number" ? v : null);
  const reward = d.kind === "verify" ? num(verdict?.reward) : null;
  return {
    id: d.id,
    environment_id: d.environment_id,
    kind: d.kind,
    status: d.status as "queued" | "running" | "succeeded" | "rolled_back" | "failed",
    reason: d.reason,
    version_id: str(verdict?.version_id) ?? str(verdict?.from_version),
    frozen_ms: num(evidence("snapshot")?.frozen_ms),
    verify:
      reward === null
        ? null
        : {
            reward,
            reason: str(verdict?.reason),
            exit_code: num(verdict?.exit_code),
            agent: str(verdict?.agent) ?? "frozen for inspection",
          },
    phases: phases as z.infer<typeof deploymentSchema>["phases"],
    created_at: d.created_at,
    finished_at: d.finished_at,
  };
}

function serializeProject(p: ProjectsTable) {
  return {
    id: p.id,
    name: p.name,
    kind: p.kind,
    source_type: p.source_type as "local" | "git" | "github",
    source: p.source,
    pinned_target: p.pinned_target,
    uploaded: p.compose_text !== null,
    created_at: p.created_at,
  };
}

export function createApp(deps: AppDeps): Hono<Env> {
  const { store, hub, deployer, secrets } = deps;
  const app = new Hono<Env>();

  const log = deps.log ?? ((message, context) => console.error(message, JSON.stringify(context ?? {})));
  const limiter = new RateLimiter(deps.rateLimit ?? DEFAULT_RATE_LIMIT);
  app.onError((err, c) => {
    // The rest of a refused body is never read: the connection cannot be reused.
    if (isDenvError(err) && err.code === "payload_too_large") c.header("connection", "close");
    if (isDenvError(err)) return c.json(err.toJSON(), err.httpStatus as 400);
    // A fault of the server's own: its words (SQL, paths, stacks) go to the log under a reference.
    const ref = newId("err");
    log("Request failed", { ref, method: c.req.method, path: c.req.path, error: err.stack ?? err.message });
    const e = new DenvError("internal", `the server failed (reference ${ref}); its log has the details`);
    return c.json(e.toJSON(), 500);
  });
  app.use("*", bodyLimits());
  app.notFound((c) =>
    c.json(new DenvError("not_found", `no route ${c.req.method} ${c.req.path}`).toJSON(), 404),
  );

  app.get("/v1/openapi.json", (c) => c.json(openApiDocument()));

  app.post("/v1/hosts/join", async (c) => {
    const body = await parse(c.req.raw, hostJoinBody);
    const token = await store
      .selectFrom("join_tokens")
      .selectAll()
      .where("token_hash", "=", hashSecret(body.token))
      .executeTakeFirst();
    if (!token)
      throw new DenvError(
        "unauthenticated",
        "this join token is not valid; mint one with `denv host join-token`",
      );
    if (token.used_at)
      throw new DenvError(
        "unauthenticated",
        "this join token was already used; mint a new one with `denv host join-token`",
      );
    if (Date.parse(token.expires_at) < Date.now()) {
      throw new DenvError(
        "unauthenticated",
        "this join token has expired; mint a new one with `denv host join-token`",
      );
    }
    // Single use: the update only succeeds for the first caller.
    const hostId = newId("host");
    const claimed = await store
      .updateTable("join_tokens")
      .set({ used_at: now(), host_id: hostId })
      .where("id", "=", token.id)
      .where("used_at", "is", null)
      .executeTakeFirst();
    if (Number(claimed.numUpdatedRows) !== 1)
      throw new DenvError("unauthenticated", "this join token was already used");
    const secret = newSecret("dhs");
    await store
      .insertInto("hosts")
      .values({
        id: hostId,
        team_id: token.team_id,
        name: body.name ?? hostId,
        secret_hash: hashSecret(secret),
        arch: null,
        storage: null,
        capacity_json: null,
        version: null,
        last_seen: null,
        connected: 0,
        created_at: now(),
      })
      .execute();
    return c.json({ host_id: hostId, secret }, 201);
  });

  // A new host's installer and denvd executables (no key: joining needs a single-use token).
  app.get("/install.sh", (c) =>
    c.body(installScript(new URL(c.req.url).origin), 200, { "content-type": "text/x-shellscript" }),
  );
  app.get("/v1/downloads/:file", (c) =>
    download(deps.downloadsDir ?? defaultDownloadsDir(), c.req.param("file")),
  );

  // Port URLs: the token in the path is the credential (a bearer capability), not an API key.
  const tunnel = async (c: import("hono").Context<Env>) => {
    const u = new URL(c.req.url);
    const parts = splitTunnelPath(u.pathname + u.search);
    if (!parts) throw new DenvError("not_found", "no such port URL");
    return proxyHttp(store, hub, parts.token, parts.rest, c.req.raw);
  };
  app.all("/v1/tunnels/:token", tunnel);
  app.all("/v1/tunnels/:token/*", tunnel);

  // Everything below needs an API key.
  app.use("/v1/*", async (c, next) => {
    const key = /^Bearer (.+)$/.exec(c.req.header("authorization") ?? "")?.[1];
    if (!key)
      throw new DenvError("unauthenticated", "send an API key as `Authorization: Bearer <key>` (denv login)");
    const row = await store
      .selectFrom("api_keys")
      .selectAll()
      .where("key_hash", "=", hashSecret(key))
      .executeTakeFirst();
    if (!row) throw new DenvError("unauthenticated", "this API key is not valid");
    const allowed = limiter.take(row.id);
    if (!allowed.ok) {
      c.header("retry-after", String(Math.max(1, Math.ceil(allowed.retryAfterMs / 1000))));
      throw new DenvError(
        "rate_limited",
        `this key is over its rate limit; retry in ${allowed.retryAfterMs} ms (Retry-After)`,
        { details: { retry_after_ms: allowed.retryAfterMs } },
      );
    }
    c.set("teamId", row.team_id);
    c.set("admin", row.admin === 1);
    await next();
  });

  app.post("/v1/teams", async (c) => {
    if (!c.get("admin")) throw new DenvError("forbidden", "only an admin key can create teams");
    const body = await parse(c.req.raw, createTeamBody);
    const teamId = newId("team");
    await store.insertInto("teams").values({ id: teamId, name: body.name, created_at: now() }).execute();
    const key = await createApiKey(store, teamId, "first key", false);
    return c.json({ team_id: teamId, name: body.name, api_key: key }, 201);
  });

  app.post("/v1/hosts/join-token", async (c) => {
    const token = newSecret("djt");
    const expires = new Date(Date.now() + (deps.joinTokenTtlMs ?? 3600_000)).toISOString();
    await store
      .insertInto("join_tokens")
      .values({
        id: newId("jt"),
        team_id: c.get("teamId"),
        token_hash: hashSecret(token),
        expires_at: expires,
        used_at: null,
        host_id: null,
      })
      .execute();
    return c.json({ token, expires_at: expires }, 201);
  });

  app.get("/v1/hosts", async (c) => {
    const hosts = await store
      .selectFrom("hosts")
      .selectAll()
      .where("team_id", "=", c.get("teamId"))
      .execute();
    return c.json({
      hosts: hosts.map((h) => ({
        id: h.id,
        name: h.name,
        arch: h.arch,
        storage: h.storage,
        capacity: h.capacity_json ? JSON.parse(h.capacity_json) : null,
        version: h.version,
        last_seen: h.last_seen,
        connected: hub.isConnected(h.id),
      })),
    });
  });

  // --- projects ---
  const project = async (teamId: string, ref: string): Promise<ProjectsTable> => {
    const p = await store
      .selectFrom("projects")
      .selectAll()
      .where("team_id", "=", teamId)
      .where((eb) => eb.or([eb("id", "=", ref), eb("name", "=", ref)]))
      .executeTakeFirst();
    if (!p) throw new DenvError("not_found", `no project ${ref}; create it with \`denv project create\``);
    return p;
  };

  app.post("/v1/projects", async (c) => {
    const body = await parse(c.req.raw, createProjectBody);
    const teamId = c.get("teamId");
    const exists = await store
      .selectFrom("projects")
      .select("id")
      .where("team_id", "=", teamId)
      .where("name", "=", body.name)
      .executeTakeFirst();
    if (exists) throw new DenvError("conflict", `a project named ${body.name} already exists`);
    const sourceType = body.source.startsWith("github:")
      ? "github"
      : /^[a-z][a-z0-9+.-]*:\/\/|^[a-z][a-z0-9+.-]*::|^[\w.-]+@[\w.-]+:/i.test(body.source)
        ? "git"
        : "local";
    if (sourceType === "github" && !/^github:[\w.-]+\/[\w.-]+$/.test(body.source)) {
      throw new DenvError("invalid_argument", "a GitHub source is github:OWNER/REPO");
    }
    // A git URL is a team's choice of what the server fetches: only https to an allowed host.
    if (sourceType === "git") checkGitUrl(body.source, deps.fetchPolicy);
    const row: ProjectsTable = {
      id: newId("prj"),
      team_id: teamId,
      name: body.name,
      kind: body.kind,
      source_type: sourceType,
      source: body.source,
      compose_text: null,
      dotenv_text: null,
      pinned_target: body.pinned_target ?? null,
      created_at: now(),
    };
    await store.insertInto("projects").values(row).execute();
    return c.json(serializeProject(row), 201);
  });

  app.get("/v1/projects", async (c) => {
    const rows = await store
      .selectFrom("projects")
      .selectAll()
      .where("team_id", "=", c.get("teamId"))
      .where("name", "!=", "_sandboxes")
      .execute();
    return c.json({ projects: rows.map(serializeProject) });
  });

  app.get("/v1/projects/:id", async (c) =>
    c.json(serializeProject(await project(c.get("teamId"), c.req.param("id")))),
  );

  app.put("/v1/projects/:id/source", async (c) => {
    const p = await project(c.get("teamId"), c.req.param("id"));
    if (p.source_type !== "local")
      throw new DenvError(
        "conflict",
        `project ${p.name} deploys from ${p.source}; only local projects take uploads`,
      );
    const body = await parse(c.req.raw, uploadSourceBody);
    // Sealed at rest: a .env (and often a compose file) holds the team's secrets.
    const sealed = {
      compose_text: secrets.sealText(body.compose),
      dotenv_text: secrets.sealText(body.dotenv ?? null),
    };
    await store.updateTable("projects").set(sealed).where("id", "=", p.id).execute();
    return c.json(serializeProject({ ...p, ...sealed }));
  });

  app.post("/v1/projects/:id/deploy", async (c) => {
    const p = await project(c.get("teamId"), c.req.param("id"));
    const body = await parse(c.req.raw, deployBody);
    const { deploymentId, done } = await deployer.deploy(p, body.env);
    if (c.req.query("wait") === "true") await done.catch(() => {});
    const d = await deployer.getDeployment(deploymentId);
    return c.json(serializeDeployment(d as DeploymentsTable), c.req.query("wait") === "true" ? 200 : 202);
  });

  // --- deployments ---
  const deployment = async (teamId: string, id: string) => {
    const d = await store
      .selectFrom("deployments")
      .selectAll()
      .where("id", "=", id)
      .where("team_id", "=", teamId)
      .executeTakeFirst();
    if (!d) throw new DenvError("not_found", `no deployment ${id}`);
    return d;
  };
  app.get("/v1/deployments/:id", async (c) =>
    c.json(serializeDeployment(await deployment(c.get("teamId"), c.req.param("id")))),
  );
  app.get("/v1/deployments/:id/events", async (c) => {
    const d = await deployment(c.get("teamId"), c.req.param("id"));
    return streamSSE(c, async (stream) => {
      let last = "";
      const send = async (row: DeploymentsTable) => {
        const data = JSON.stringify(serializeDeployment(row));
        if (data !== last) {
          last = data;
          await stream.writeSSE({ event: "deployment", data });
        }
      };
      await send(d);
      let current = d;
      while ((current.status === "running" || current.status === "queued") && !stream.aborted) {
        // Woken by the deployment's next change, or after a second; the listener goes either way.
        await new Promise<void>((resolve) => {
          const wake = () => {
            clearTimeout(t);
            deployer.events.off(d.id, wake);
            resolve();
          };
          const t = setTimeout(wake, 1000);
          deployer.events.on(d.id, wake);
        });
        current = (await deployer.getDeployment(d.id)) as DeploymentsTable;
        await send(current);
      }
    });
  });

  // --- environments ---
  const environment = async (teamId: string, ref: string): Promise<EnvironmentsTable> => {
    const [projectName, envName] = ref.includes("/") ? (ref.split("/", 2) as [string, string]) : [null, ref];
    let q = store
      .selectFrom("environments")
      .innerJoin("projects", "projects.id", "environments.project_id")
      .selectAll("environments")
      .where("environments.team_id", "=", teamId)
      .where("environments.status", "!=", "destroyed");
    if (projectName) q = q.where("projects.name", "=", projectName).where("environments.name", "=", envName);
    else q = q.where((eb) => eb.or([eb("environments.id", "=", ref), eb("environments.name", "=", ref)]));
    const rows = await q.execute();
    if (rows.length === 0) throw new DenvError("not_found", `no environment ${ref}`);
    if (rows.length > 1)
      throw new DenvError(
        "conflict",
        `${ref} names environments in several projects; use PROJECT/${ref} or the id`,
      );
    return rows[0] as EnvironmentsTable;
  };
  const serializeEnv = async (e: EnvironmentsTable) => {
    const p = await store
      .selectFrom("projects")
      .select("name")
      .where("id", "=", e.project_id)
      .executeTakeFirst();
    const v = e.current_version_id
      ? await store
          .selectFrom("versions")
          .select("spec_json")
          .where("id", "=", e.current_version_id)
          .executeTakeFirst()
      : undefined;
    return {
      id: e.id,
      name: e.name,
      project: p?.name ?? "",
      status: e.status,
      host_id: e.host_id,
      current_version_id: e.current_version_id,
      parent_version_id: e.parent_version_id,
      sandbox: e.sandbox === 1,
      services: v ? Object.keys(JSON.parse(secrets.openText(v.spec_json)).services) : [],
      created_at: e.created_at,
    };
  };
  /** The service a request names, checked against the environment's own services first. */
  const serviceOf = async (
    e: EnvironmentsTable,
    service: string | undefined,
  ): Promise<string | undefined> => {
    if (service === undefined) return undefined;
    const { services } = await serializeEnv(e);
    if (!services.includes(service))
      throw new DenvError(
        "not_found",
        `environment ${e.name} has no service ${JSON.stringify(service.slice(0, 64))}; it has ${services.join(", ")}`,
      );
    return service;
  };
  /** An absolute path in a service: normalised, with no `..` and no NUL byte. */
  const containerPath = (path: string | undefined): string => {
    if (!path?.startsWith("/"))
      throw new DenvError("invalid_argument", "?path= must be an absolute path in the service");
    if (path.includes("\0") || path.split("/").includes(".."))
      throw new DenvError("invalid_argument", '?path= must not contain ".." or NUL bytes');
    return path;
  };
  const runningOn = (e: EnvironmentsTable) => {
    if (e.status === "frozen") {
      throw new DenvError(
        "conflict",
        `environment ${e.name} is frozen by verify for inspection; fork it, or verify with resume`,
      );
    }
    if (e.status !== "running" || !e.host_id || !e.stack_id) {
      throw new DenvError("conflict", `environment ${e.name} is ${e.status}, not running`);
    }
    return { hostId: e.host_id, stackId: e.stack_id };
  };

  app.get("/v1/envs", async (c) => {
    const rows = await store
      .selectFrom("environments")
      .selectAll()
      .where("team_id", "=", c.get("teamId"))
      .where("status", "!=", "destroyed")
      .execute();
    return c.json({ environments: await Promise.all(rows.map(serializeEnv)) });
  });
  app.get("/v1/envs/:id", async (c) =>
    c.json(await serializeEnv(await environment(c.get("teamId"), c.req.param("id")))),
  );
  app.get("/v1/envs/:id/deployments", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    const rows = await store
      .selectFrom("deployments")
      .selectAll()
      .where("environment_id", "=", e.id)
      .orderBy("created_at")
      .execute();
    return c.json({ deployments: rows.map(serializeDeployment) });
  });
  app.delete("/v1/envs/:id", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    const { deploymentId, done } = await deployer.destroy(e);
    await done;
    return c.json(serializeDeployment((await deployer.getDeployment(deploymentId)) as DeploymentsTable));
  });
  app.post("/v1/envs/:id/snapshot", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    runningOn(e);
    const { deploymentId, done } = await deployer.snapshot(e);
    await done;
    return c.json(serializeDeployment((await deployer.getDeployment(deploymentId)) as DeploymentsTable));
  });
  app.post("/v1/envs/:id/rollback", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    const body = await parse(c.req.raw, rollbackBody);
    const { deploymentId, done } = await deployer.rollback(e, body.version);
    await done;
    return c.json(serializeDeployment((await deployer.getDeployment(deploymentId)) as DeploymentsTable));
  });

  app.post("/v1/envs/:id/verify", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    const body = await parse(c.req.raw, verifyBody);
    const { deploymentId, done } = await deployer.verify(e, { resume: body.resume ?? false });
    await done;
    return c.json(serializeDeployment((await deployer.getDeployment(deploymentId)) as DeploymentsTable));
  });

  /** The answer to a fork or sandbox creation: the new environment once its deployment succeeded. */
  const createdEnv = async (
    what: string,
    deploymentId: string,
    environmentId: string,
    done: Promise<void>,
  ) => {
    await done;
    const d = (await deployer.getDeployment(deploymentId)) as DeploymentsTable;
    if (d.status !== "succeeded") {
      throw new DenvError(
        "unavailable",
        `the ${what} failed: ${d.reason ?? "see deployment"} (deployment ${d.id})`,
        {
          details: { deployment_id: d.id },
        },
      );
    }
    const env = await store
      .selectFrom("environments")
      .selectAll()
      .where("id", "=", environmentId)
      .executeTakeFirstOrThrow();
    return { ...(await serializeEnv(env)), deployment_id: d.id };
  };

  /** Fork of an environment = its current version (snapshot first when it has none). */
  const forkEnv = async (
    teamId: string,
    e: EnvironmentsTable,
    name: string | undefined,
    sandbox: boolean,
  ) => {
    let versionId = e.current_version_id;
    if (!versionId) {
      const s = await deployer.snapshot(e);
      await s.done;
      versionId = (await environment(teamId, e.id)).current_version_id;
      if (!versionId) throw new DenvError("conflict", `environment ${e.name} could not be snapshotted`);
    }
    return forkVersion(teamId, versionId, name, sandbox);
  };
  const forkVersion = async (
    teamId: string,
    versionId: string,
    name: string | undefined,
    sandbox: boolean,
  ) => {
    const { deploymentId, environmentId, done } = await deployer.fork(versionId, {
      teamId,
      name: name ?? `sbx-${newId("x").slice(2, 10)}`,
      sandbox,
    });
    return createdEnv("fork", deploymentId, environmentId, done);
  };

  app.post("/v1/envs/:id/fork", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    const body = await parse(c.req.raw, forkBody);
    return c.json(await forkEnv(c.get("teamId"), e, body.name, false), 201);
  });

  app.post("/v1/envs/:id/exec", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    const body = await parse(c.req.raw, execBody);
    const { hostId, stackId } = runningOn(e);
    const enc = body.encoding ?? "utf8";
    const params = {
      stack_id: stackId,
      service: await serviceOf(e, body.service),
      command: body.command,
      user: body.user,
      cwd: body.cwd,
      env: body.env,
      stdin_b64: body.stdin,
      timeout_ms: body.timeout_ms,
      max_output_bytes: body.max_output_bytes,
    };
    type HostExec = {
      exit_code: number;
      stdout_b64: string;
      stderr_b64: string;
      stdout_truncated: boolean;
      stderr_truncated: boolean;
      timed_out: boolean;
      duration_ms: number;
    };
    const answer = (r: HostExec, withOutput: boolean) => {
      const out = (b64: string) => (enc === "base64" ? b64 : Buffer.from(b64, "base64").toString("utf8"));
      return {
        exit_code: r.exit_code,
        stdout: withOutput ? out(r.stdout_b64) : "",
        stderr: withOutput ? out(r.stderr_b64) : "",
        encoding: enc,
        stdout_truncated: r.stdout_truncated,
        stderr_truncated: r.stderr_truncated,
        timed_out: r.timed_out,
        duration_ms: r.duration_ms,
      };
    };
    if (c.req.query("stream") !== "true") {
      return c.json(answer(await hub.call(hostId, "exec", params), true));
    }
    // ?stream=true: newline-delimited JSON, output chunks ({"stream", "data"} in base64) as the
    // command writes them, then one {"result"} line with the exit code (its stdout/stderr empty).
    c.header("content-type", "application/x-ndjson");
    return stream(c, async (s) => {
      let writes = Promise.resolve();
      const line = (v: unknown) => {
        writes = writes.then(() => s.write(`${JSON.stringify(v)}\n`)).then(() => {});
      };
      try {
        const r = await hub.call(
          hostId,
          "exec",
          { ...params, stream: true },
          {
            onEvent: (which, data) => line({ stream: which, data: data.toString("base64") }),
          },
        );
        line({ result: answer(r, false) });
      } catch (err) {
        line(
          isDenvError(err) ? err.toJSON() : { error: { code: "internal", message: (err as Error).message } },
        );
      }
      await writes;
    });
  });

  app.put("/v1/envs/:id/files", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    const path = containerPath(c.req.query("path"));
    const { hostId, stackId } = runningOn(e);
    const service = await serviceOf(e, c.req.query("service"));
    const body = Buffer.from(await c.req.arrayBuffer());
    const r = await hub.call(hostId, "put_files", {
      stack_id: stackId,
      service,
      path,
      tar_b64: body.toString("base64"),
    });
    return c.json(r);
  });

  app.get("/v1/envs/:id/files", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    const path = containerPath(c.req.query("path"));
    const { hostId, stackId } = runningOn(e);
    const service = await serviceOf(e, c.req.query("service"));
    const r = await hub.call(hostId, "get_files", {
      stack_id: stackId,
      service,
      path,
    });
    const tar = Buffer.from(r.tar_b64, "base64");
    return c.body(Readable.toWeb(Readable.from(tar)) as ReadableStream, 200, {
      "content-type": "application/x-tar",
    });
  });

  app.post("/v1/envs/:id/ports/:port", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    runningOn(e);
    const port = Number(c.req.param("port"));
    if (!Number.isInteger(port) || port < 1 || port > 65535)
      throw new DenvError("invalid_argument", `port ${c.req.param("port")} is not a TCP port (1-65535)`);
    const body = await parse(c.req.raw, portUrlBody);
    await serviceOf(e, body.service);
    const origin = new URL(c.req.url).origin;
    const { url } = await createPortUrl(store, {
      teamId: c.get("teamId"),
      environmentId: e.id,
      service: body.service ?? null,
      port,
      origin,
    });
    return c.json({ url, port, service: body.service ?? null }, 201);
  });

  // Port URLs are bound to their environment: listed (never with their tokens, shown once) and
  // revoked per environment, and revoked with it when it is destroyed.
  app.get("/v1/envs/:id/ports", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    return c.json({ ports: await listPortUrls(store, e.id) });
  });
  app.delete("/v1/envs/:id/ports", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    return c.json({ revoked: await revokePortUrls(store, e.id) });
  });
  app.delete("/v1/envs/:id/ports/:port", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    const port = Number(c.req.param("port"));
    if (!Number.isInteger(port) || port < 1 || port > 65535)
      throw new DenvError("invalid_argument", `port ${c.req.param("port")} is not a TCP port (1-65535)`);
    return c.json({ revoked: await revokePortUrls(store, e.id, port) });
  });

  app.post("/v1/envs/:id/services/:service/stop", async (c) => {
    const e = await environment(c.get("teamId"), c.req.param("id"));
    const { hostId, stackId } = runningOn(e);
    const service = (await serviceOf(e, c.req.param("service"))) as string;
    return c.json(await hub.call(hostId, "stop_service", { stack_id: stackId, service }));
  });

  app.get("/v1/versions/:id", async (c) => {
    const v = await store
      .selectFrom("versions")
      .selectAll()
      .where("id", "=", c.req.param("id"))
      .where("team_id", "=", c.get("teamId"))
      .executeTakeFirst();
    if (!v) throw new DenvError("not_found", `no version ${c.req.param("id")}`);
    return c.json({
      id: v.id,
      environment_id: v.environment_id,
      host_id: v.host_id,
      spec_hash: v.spec_hash,
      images: JSON.parse(v.images_json),
      evidence: JSON.parse(v.evidence_json),
      created_at: v.created_at,
    });
  });

  // --- clouds ---
  const serializeCloud = async (c: CloudsTable) => ({
    name: c.name,
    provider: c.provider,
    server_type: c.server_type,
    location: c.location,
    api_url: c.api_url,
    created_at: c.created_at,
    machines: (
      await store
        .selectFrom("cloud_machines")
        .select(["name", "provider_server_id", "status"])
        .where("cloud_id", "=", c.id)
        .where("deleted_at", "is", null)
        .execute()
    ).map((m) => ({ name: m.name, server_id: m.provider_server_id, status: m.status })),
  });
  app.post("/v1/clouds", async (c) => {
    const body = await parse(c.req.raw, cloudConnectBody);
    if (!(PROVIDERS as readonly string[]).includes(body.provider)) {
      throw new DenvError(
        "invalid_argument",
        NOT_YET[body.provider] ??
          `unknown cloud provider ${body.provider}; available: ${PROVIDERS.join(", ")}`,
      );
    }
    const teamId = c.get("teamId");
    const taken = await store
      .selectFrom("clouds")
      .select("id")
      .where("team_id", "=", teamId)
      .where("name", "=", body.name)
      .executeTakeFirst();
    if (taken) throw new DenvError("conflict", `a cloud named ${body.name} is already connected`);
    // The endpoint is a team's choice of what the server calls with a bearer token: an https URL
    // (http only to an allowed host) with no credentials, query or fragment, on an allowed host.
    const apiUrl = checkCloudApiUrl(body.api_url ?? null, deps.fetchPolicy);
    // The token is tried before it is kept: a wrong one is refused now, not at the first deploy.
    try {
      await new HetznerDriver({ token: body.token, apiUrl }).listServers("denv");
    } catch (err) {
      throw new DenvError("invalid_argument", `Hetzner did not accept the token: ${(err as Error).message}`);
    }
    const row: CloudsTable = {
      id: newId("cld"),
      team_id: teamId,
      name: body.name,
      provider: body.provider,
      token_sealed: secrets.seal(body.token),
      server_type: body.server_type,
      location: body.location,
      api_url: apiUrl,
      created_at: now(),
    };
    await store.insertInto("clouds").values(row).execute();
    return c.json(await serializeCloud(row), 201);
  });
  app.get("/v1/clouds", async (c) => {
    const rows = await store
      .selectFrom("clouds")
      .selectAll()
      .where("team_id", "=", c.get("teamId"))
      .orderBy("created_at")
      .execute();
    return c.json({ clouds: await Promise.all(rows.map(serializeCloud)) });
  });
  app.delete("/v1/clouds/:name", async (c) => {
    const r = await store
      .deleteFrom("clouds")
      .where("team_id", "=", c.get("teamId"))
      .where("name", "=", c.req.param("name"))
      .executeTakeFirst();
    if (Number(r.numDeletedRows) !== 1) throw new DenvError("not_found", `no cloud ${c.req.param("name")}`);
    return c.json({ deleted: c.req.param("name") });
  });

  // --- sandboxes and targets ---
  const createSandbox = async (teamId: string, body: z.infer<typeof sandboxBody>) => {
    if ("from_version" in body) return forkVersion(teamId, body.from_version, body.name, true);
    const p = await sandboxProject(store, teamId);
    const volumes = body.volumes ?? ["/work"];
    const compose = {
      "x-denv": { kind: "agent", egress: body.egress ?? "deny" },
      services: {
        main: {
          image: body.image,
          ...(body.cmd ? { command: body.cmd } : {}),
          ...(body.env ? { environment: body.env } : {}),
          ...(body.user ? { user: body.user } : {}),
          ...(body.ports?.length ? { expose: body.ports.map(String) } : {}),
          volumes: volumes.map((path, i) => `v${i}:${path}`),
        },
      },
      volumes: Object.fromEntries(volumes.map((_p, i) => [`v${i}`, {}])),
    };
    const envName = body.name ?? `sbx-${newId("x").slice(2, 10)}`;
    const sealed = secrets.sealText(JSON.stringify(compose));
    await store.updateTable("projects").set({ compose_text: sealed }).where("id", "=", p.id).execute();
    const { deploymentId, environmentId, done } = await deployer.deploy(
      { ...p, compose_text: sealed },
      envName,
    );
    await store.updateTable("environments").set({ sandbox: 1 }).where("id", "=", environmentId).execute();
    return createdEnv("sandbox", deploymentId, environmentId, done);
  };

  app.post("/v1/sandboxes", async (c) => {
    return c.json(await createSandbox(c.get("teamId"), await parse(c.req.raw, sandboxBody)), 201);
  });

  const targets = async (teamId: string) => {
    const hosts = await store
      .selectFrom("hosts")
      .select(["id", "storage"])
      .where("team_id", "=", teamId)
      .execute();
    const storages = new Set(hosts.map((h) => h.storage).filter(Boolean));
    return [
      {
        name: "denvd",
        type: "denvd" as const,
        hosts: hosts.filter((h) => hub.isConnected(h.id)).length,
        capabilities: {
          multi_service_stack: "yes",
          consistent_snapshot: storages.has("zfs")
            ? "ZFS"
            : storages.has("btrfs")
              ? "btrfs"
              : "pause + copy (dir)",
          fork_time: storages.has("zfs") || storages.has("btrfs") ? "~1 s" : "grows with data (copies)",
          egress_deny_verified: "yes",
          caps_enforced: "yes",
          gpu: "planned",
        },
      },
    ];
  };
  app.get("/v1/targets", async (c) => c.json({ targets: await targets(c.get("teamId")) }));
  app.post("/v1/targets/:name/sandboxes", async (c) => {
    const name = c.req.param("name");
    if (!(await targets(c.get("teamId"))).some((t) => t.name === name)) {
      throw new DenvError(
        "not_found",
        `no target ${name}; GET /v1/targets lists them (hosted providers are not connected yet)`,
      );
    }
    return c.json(await createSandbox(c.get("teamId"), await parse(c.req.raw, sandboxBody)), 201);
  });

  return app;
}

/** The hidden project image sandboxes belong to (one per team). */
async function sandboxProject(store: Store, teamId: string): Promise<ProjectsTable> {
  const existing = await store
    .selectFrom("projects")
    .selectAll()
    .where("team_id", "=", teamId)
    .where("name", "=", "_sandboxes")
    .executeTakeFirst();
  if (existing) return existing;
  const row: ProjectsTable = {
    id: newId("prj"),
    team_id: teamId,
    name: "_sandboxes",
    kind: "agent",
    source_type: "local",
    source: "(api)",
    compose_text: null,
    dotenv_text: null,
    pinned_target: null,
    created_at: now(),
  };
  await store.insertInto("projects").values(row).execute();
  return row;
}

export async function createApiKey(
  store: Store,
  teamId: string,
  name: string,
  admin: boolean,
  key?: string,
): Promise<string> {
  const secret = key ?? newSecret("dk");
  await store
    .insertInto("api_keys")
    .values({
      id: newId("key"),
      team_id: teamId,
      name,
      key_hash: hashSecret(secret),
      prefix: secret.slice(0, 8),
      admin: admin ? 1 : 0,
      created_at: now(),
    })
    .execute();
  return secret;
}
