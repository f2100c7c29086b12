/**
 * E2B's control plane on denv: create (from a denv version or an image), list, get, kill, set the
 * timeout, connect, and fork (denv's extension: the sandbox snapshotted as it is, then forked). The
 * key comes in X-API-Key; every action is a /v1 call in process as that key.
 */
import { randomBytes } from "node:crypto";
import type { Context, Hono } from "hono";
import { findApiKey } from "../store/team-store.ts";
import { CONNECT_CODES } from "./connect-protocol.ts";
import {
  boundedJson,
  DEFAULT_TIMEOUT_S,
  type E2bContext,
  ENVD_VERSION,
  type Headed,
  MAX_TIMEOUT_S,
  type Sandbox,
  sandboxIdOf,
  stringRecord,
  timeoutOf,
} from "./e2b-context.ts";
import { responseError } from "./envd-processes.ts";

/** E2B's error body: {code, message}. */
export function e2bError(status: number, message: string): Response {
  return Response.json({ code: status, message }, { status });
}

/** An error of the control plane's, with its HTTP status. */
export class E2bHttpError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

/** Mounts the control plane's routes; returns the sweep that kills sandboxes past their timeout. */
export function mountControlRoutes(app: Hono, ctx: E2bContext): { sweep: () => Promise<number> } {
  const { store, secrets, v1, nowMs, processes, tokenOf, sandboxOf, limiter, ingress } = ctx;

  /** The key in X-API-Key (or Authorization: Bearer), or a 401. */
  async function callersKey(c: Headed) {
    const key = c.req.header("x-api-key") ?? /^Bearer (.+)$/.exec(c.req.header("authorization") ?? "")?.[1];
    const row = key ? await findApiKey(store, key) : undefined;
    if (!row) throw new E2bHttpError(401, "send a denv API key of your team in X-API-Key");
    const turn = limiter.take(row.id);
    if (!turn.ok)
      throw new E2bHttpError(429, `this key is over its rate limit; retry in ${turn.retryAfterMs} ms`);
    return row;
  }

  /** The caller's key and the team's sandbox its path names (another team's: 404, as a missing one). */
  async function callersSandbox(c: Context) {
    const key = await callersKey(c);
    const id = c.req.param("id") ?? "";
    const s = await sandboxOf(key.team_id, id);
    if (!s) throw new E2bHttpError(404, `sandbox ${id} not found`);
    return { key, s };
  }

  const sandboxBody = (s: Sandbox) => ({
    templateID: s.template_id,
    sandboxID: sandboxIdOf(s.environment_id),
    clientID: "denv",
    envdVersion: ENVD_VERSION,
    envdAccessToken: tokenOf(s),
    // getHost(port) is `${port}-${sandboxID}.${domain}`: an ingress name, private behind this token.
    domain: ingress?.domain ?? null,
    ...(ingress ? { trafficAccessToken: ingress.tokenFor(s.environment_id) } : {}),
  });

  const detail = (s: Sandbox) => ({
    ...sandboxBody(s),
    alias: s.template_id,
    startedAt: new Date(Number(s.started_at_ms)).toISOString(),
    endAt: new Date(Number(s.end_at_ms)).toISOString(),
    cpuCount: 0,
    memoryMB: 0,
    diskSizeMB: 0,
    state: s.paused_version_id ? "paused" : "running",
    metadata: JSON.parse(s.metadata_json) as Record<string, string>,
  });

  async function json(res: Response): Promise<Record<string, unknown>> {
    if (!res.ok) {
      const e = await responseError(res);
      throw new E2bHttpError(CONNECT_CODES[e.code] === 499 ? 500 : CONNECT_CODES[e.code], e.message);
    }
    return (await res.json()) as Record<string, unknown>;
  }

  // --- control plane -------------------------------------------------------------------------

  /** Records a denv environment as an E2B sandbox of the key's team. */
  async function register(
    key: { id: string; team_id: string },
    envId: string,
    templateId: string,
    timeoutS: number,
    metadata: Record<string, string>,
    envVars: Record<string, string>,
  ): Promise<Sandbox> {
    const started = nowMs();
    const row: Sandbox = {
      environment_id: envId,
      team_id: key.team_id,
      key_id: key.id,
      template_id: templateId,
      token_salt: randomBytes(16).toString("hex"),
      metadata_json: JSON.stringify(metadata),
      env_vars_sealed: secrets.seal(JSON.stringify(envVars)),
      started_at_ms: started,
      end_at_ms: started + timeoutS * 1000,
      paused_version_id: null,
    };
    await store.insertInto("e2b_sandboxes").values(row).execute();
    return row;
  }

  const create = async (c: Context) => {
    const key = await callersKey(c);
    const body = await boundedJson(c.req);
    const templateId = typeof body.templateID === "string" ? body.templateID : "";
    const timeoutS = timeoutOf(body.timeout, DEFAULT_TIMEOUT_S);
    const metadata = stringRecord(body.metadata, "metadata");
    const envVars = stringRecord(body.envVars, "envVars");
    if (Array.isArray(body.volumeMounts) && body.volumeMounts.length)
      return e2bError(
        400,
        "volumeMounts are not served by denv: use a denv version whose volumes hold the data",
      );
    // denv's default holds (no egress) unless the create asks for the internet.
    const egress = body.allow_internet_access === true ? "allow" : "deny";
    const version = await templateVersion(key, templateId);
    const made = version
      ? { from_version: version }
      : /^[a-z0-9][a-z0-9._/:@-]*$/i.test(templateId) && /[/:]/.test(templateId)
        ? {
            image: templateId,
            cmd: ["sleep", "infinity"],
            env: envVars,
            egress,
            // The agent is never root: an image's commands run as uid 1000 unless a call names a user.
            user: "1000:1000",
          }
        : null;
    if (!made)
      return e2bError(
        404,
        `template ${JSON.stringify(templateId)} is not a denv version id (ver_…), a snapshot's name, PROJECT/ENV or an image reference (registry/name:tag)`,
      );
    const env = await json(
      await v1(key.id, "/v1/sandboxes", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(made),
      }),
    );
    const row = await register(key, env.id as string, templateId, timeoutS, metadata, envVars);
    return c.json(sandboxBody(row), 201);
  };
  app.post("/v2/sandboxes", create);
  app.post("/sandboxes", create);

  /**
   * What a template names, when it is denv's: a version id (ver_…), the team's newest snapshot of
   * that name, or PROJECT/ENV (that environment's current version). Null: an image, or nothing.
   */
  async function templateVersion(key: { id: string; team_id: string }, templateId: string) {
    if (/^ver_[a-z0-9]+$/.test(templateId)) return templateId;
    const named = await store
      .selectFrom("e2b_snapshots")
      .select("version_id")
      .where("team_id", "=", key.team_id)
      .where("name", "=", templateId)
      .orderBy("created_at_ms", "desc")
      .executeTakeFirst();
    if (named) return named.version_id;
    // PROJECT/ENV before an image of the same spelling (an image has a tag or a registry's dot).
    if (/^[A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*$/.test(templateId)) {
      const res = await v1(key.id, `/v1/envs/${encodeURIComponent(templateId)}`);
      if (res.ok) {
        const env = (await res.json()) as { current_version_id?: string | null };
        if (env.current_version_id) return env.current_version_id;
        throw new E2bHttpError(409, `environment ${templateId} has no version yet: deploy it first`);
      }
    }
    return null;
  }

  /** E2B's snapshot: the sandbox as it is now, a denv version, creatable from by its id or name. */
  app.post("/sandboxes/:id/snapshots", async (c) => {
    const { key, s } = await callersSandbox(c);
    const body = await boundedJson(c.req);
    const name = body.name === undefined || body.name === null ? null : body.name;
    if (name !== null && (typeof name !== "string" || !/^[A-Za-z0-9][\w.-]{0,127}$/.test(name)))
      return e2bError(400, "name: 1-128 letters, digits, '.', '_' or '-', from a letter or digit");
    await json(await v1(key.id, `/v1/envs/${s.environment_id}/snapshot`, { method: "POST" }));
    const now = await json(await v1(key.id, `/v1/envs/${s.environment_id}`));
    const versionId = now.current_version_id as string;
    await store
      .insertInto("e2b_snapshots")
      .values({
        version_id: versionId,
        team_id: key.team_id,
        sandbox_id: sandboxIdOf(s.environment_id),
        name,
        created_at_ms: nowMs(),
      })
      .execute();
    return c.json({ snapshotID: versionId, names: name ? [name] : [] }, 201);
  });

  app.get("/snapshots", async (c) => {
    const key = await callersKey(c);
    let q = store.selectFrom("e2b_snapshots").selectAll().where("team_id", "=", key.team_id);
    const sandboxId = c.req.query("sandboxID");
    const name = c.req.query("name");
    if (sandboxId) q = q.where("sandbox_id", "=", sandboxId);
    if (name) q = q.where("name", "=", name);
    const limit = Math.min(Math.max(Number(c.req.query("limit") ?? 100) || 100, 1), 100);
    const rows = await q.orderBy("created_at_ms", "desc").limit(limit).execute();
    return c.json(rows.map((r) => ({ snapshotID: r.version_id, names: r.name ? [r.name] : [] })));
  });

  /** denv's extension of E2B's fork: the sandbox as it is now (snapshotted), forked `count` times. */
  app.post("/sandboxes/:id/fork", async (c) => {
    const { key, s } = await callersSandbox(c);
    const body = await boundedJson(c.req);
    const count = body.count ?? 1;
    if (typeof count !== "number" || !Number.isInteger(count) || count < 1 || count > 64)
      return e2bError(400, "count: a whole number from 1 to 64");
    const timeoutS = timeoutOf(body.timeout, DEFAULT_TIMEOUT_S);
    await json(await v1(key.id, `/v1/envs/${s.environment_id}/snapshot`, { method: "POST" }));
    const now = await json(await v1(key.id, `/v1/envs/${s.environment_id}`));
    const forks = await json(
      await v1(key.id, `/v1/versions/${now.current_version_id as string}/forks`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ count }),
      }),
    );
    const out: unknown[] = [];
    for (const f of forks.forks as {
      environment?: { id: string };
      error?: { code: string; message: string };
    }[]) {
      if (!f.environment) {
        out.push({ error: { code: 500, message: f.error?.message ?? "the fork failed" } });
        continue;
      }
      const row = await register(
        key,
        f.environment.id,
        s.template_id,
        timeoutS,
        JSON.parse(s.metadata_json) as Record<string, string>,
        JSON.parse(secrets.open(s.env_vars_sealed)) as Record<string, string>,
      );
      out.push({ sandbox: sandboxBody(row) });
    }
    return c.json(out, 201);
  });

  app.get("/sandboxes/:id", async (c) => {
    const { s } = await callersSandbox(c);
    return c.json(detail(s));
  });

  const list = async (c: Context) => {
    const key = await callersKey(c);
    const states = (c.req.queries("state") ?? ["running,paused"]).flatMap((x) => x.split(","));
    const wanted = new URLSearchParams(c.req.query("metadata") ?? "");
    const rows = await store
      .selectFrom("e2b_sandboxes")
      .selectAll()
      .where("team_id", "=", key.team_id)
      .execute();
    const limit = Math.min(Math.max(Number(c.req.query("limit") ?? 100) || 100, 1), 100);
    const out = rows
      .filter((r) => {
        if (!states.includes(r.paused_version_id ? "paused" : "running")) return false;
        const m = JSON.parse(r.metadata_json) as Record<string, string>;
        return [...wanted].every(([k, v]) => m[k] === v);
      })
      .slice(0, limit)
      .map(detail);
    c.header("x-total-running", String(out.length));
    return c.json(out);
  };
  app.get("/v2/sandboxes", list);
  app.get("/sandboxes", list);

  app.delete("/sandboxes/:id", async (c) => {
    const { key, s } = await callersSandbox(c);
    await kill(s, key.id);
    return c.body(null, 204);
  });

  app.post("/sandboxes/:id/timeout", async (c) => {
    const { s } = await callersSandbox(c);
    const body = await boundedJson(c.req);
    const timeoutS = body.timeout;
    if (
      typeof timeoutS !== "number" ||
      !Number.isInteger(timeoutS) ||
      timeoutS < 0 ||
      timeoutS > MAX_TIMEOUT_S
    )
      return e2bError(400, `timeout: a whole number of seconds from 0 to ${MAX_TIMEOUT_S}`);
    await store
      .updateTable("e2b_sandboxes")
      .set({ end_at_ms: nowMs() + timeoutS * 1000 })
      .where("environment_id", "=", s.environment_id)
      .execute();
    return c.body(null, 204);
  });

  /**
   * Pause: the sandbox snapshotted (a denv version) and every service stopped, so it holds no CPU
   * or memory; its timeout no longer runs. Memory is not kept (E2B's `memory: false`): resuming
   * restores the version in place and starts the services again, under the same sandbox id.
   */
  app.post("/sandboxes/:id/pause", async (c) => {
    const { key, s } = await callersSandbox(c);
    if (s.paused_version_id)
      return e2bError(409, `sandbox ${sandboxIdOf(s.environment_id)} is already paused`);
    await json(await v1(key.id, `/v1/envs/${s.environment_id}/snapshot`, { method: "POST" }));
    const env = await json(await v1(key.id, `/v1/envs/${s.environment_id}`));
    processes.dropSandbox(s.environment_id);
    for (const service of env.services as string[])
      await json(
        await v1(key.id, `/v1/envs/${s.environment_id}/services/${encodeURIComponent(service)}/stop`, {
          method: "POST",
        }),
      );
    await store
      .updateTable("e2b_sandboxes")
      .set({ paused_version_id: env.current_version_id as string })
      .where("environment_id", "=", s.environment_id)
      .execute();
    return c.body(null, 204);
  });

  /** Connect: a running sandbox as it is (200), a paused one resumed first (201). */
  const connect = async (c: Context) => {
    const { key, s } = await callersSandbox(c);
    const body = await boundedJson(c.req);
    const timeoutS =
      typeof body.timeout === "number" && Number.isInteger(body.timeout) && body.timeout > 0
        ? Math.min(body.timeout, MAX_TIMEOUT_S)
        : null;
    let resumed = false;
    if (s.paused_version_id) {
      const d = await json(
        await v1(key.id, `/v1/envs/${s.environment_id}/rollback?wait=true`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ version: s.paused_version_id }),
        }),
      );
      if (d.status !== "succeeded")
        throw new E2bHttpError(500, `the sandbox could not be resumed: ${String(d.reason ?? d.status)}`);
      resumed = true;
    }
    // A resumed sandbox's timeout starts again; a running one's is only ever lengthened.
    const end = resumed
      ? nowMs() + (timeoutS ?? DEFAULT_TIMEOUT_S) * 1000
      : Math.max(Number(s.end_at_ms), timeoutS === null ? 0 : nowMs() + timeoutS * 1000);
    await store
      .updateTable("e2b_sandboxes")
      .set({ end_at_ms: end, paused_version_id: null })
      .where("environment_id", "=", s.environment_id)
      .execute();
    return c.json(sandboxBody(s), resumed ? 201 : 200);
  };
  app.post("/v2/sandboxes/:id/connect", connect);
  app.post("/sandboxes/:id/connect", connect);
  app.post("/sandboxes/:id/resume", connect);

  async function kill(s: Sandbox, keyId: string): Promise<void> {
    processes.dropSandbox(s.environment_id);
    const res = await v1(keyId, `/v1/envs/${s.environment_id}`, { method: "DELETE" });
    // Already gone from denv (deleted through /v1), or the key that made it was revoked since (the
    // environment stays the team's, to remove through /v1): the record goes all the same.
    if (!res.ok && res.status !== 404 && res.status !== 401) await json(res);
    await store.deleteFrom("e2b_sandboxes").where("environment_id", "=", s.environment_id).execute();
  }

  /** Kills the sandboxes whose timeout has passed; returns how many. */
  async function sweep(): Promise<number> {
    const due = await store
      .selectFrom("e2b_sandboxes")
      .selectAll()
      .where("end_at_ms", "<=", nowMs())
      .where("paused_version_id", "is", null)
      .execute();
    let n = 0;
    for (const s of due) {
      try {
        await kill(s, s.key_id);
        n++;
      } catch {
        // Tried again at the next sweep.
      }
    }
    return n;
  }

  return { sweep };
}
