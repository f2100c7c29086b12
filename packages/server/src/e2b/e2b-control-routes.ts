/**
 * E2B's control plane on denv: create (from a denv version or an image), list, get, kill, set the
 * timeout, connect, and fork (denv's extension: the sandbox snapshotted as it is, then forked). The
 * key comes in X-API-Key; every action is a /v1 call in process as that key.
 */

import { randomBytes } from "node:crypto";
import type { Context, Hono } from "hono";
import { allows, refusal, tokenAccessOf } from "../people/access-rules.ts";
import {
  deleteE2bSandbox,
  dueE2bSandboxes,
  insertE2bSandbox,
  insertE2bSnapshot,
  namedE2bSnapshot,
  teamE2bSandboxes,
  teamE2bSnapshots,
  updateE2bSandbox,
} from "../store/e2b-store.ts";
import type { Role } from "../store/people-store.ts";
import { findApiKey } from "../store/team-store.ts";
import { CONNECT_CODES } from "./connect-protocol.ts";
import {
  boundedJson,
  DEFAULT_TIMEOUT_S,
  type E2bCaller,
  type E2bContext,
  ENVD_VERSION,
  type Headed,
  MAX_TIMEOUT_S,
  type Sandbox,
  sandboxIdOf,
  stringRecord,
  timeoutOf,
} from "./e2b-context.ts";
import { E2B_CONTROL_OPERATIONS, type E2bControlOperation, pathOf } from "./e2b-operations.ts";
import { responseError } from "./envd-processes.ts";
import { egressFromE2bNetwork } from "./sandbox-network.ts";
import { type PauseDeps, pauseSandbox, resumeSandbox } from "./sandbox-pause.ts";

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
  const pausing: PauseDeps = { store, v1, nowMs, dropStreams: (id) => processes.dropSandbox(id) };

  /** The key in X-API-Key (or Authorization: Bearer), or a 401; its role held to what the route needs. */
  async function callersKey(c: Headed, op: E2bControlOperation): Promise<E2bCaller> {
    const key = c.req.header("x-api-key") ?? /^Bearer (.+)$/.exec(c.req.header("authorization") ?? "")?.[1];
    const row = key ? await findApiKey(store, key) : undefined;
    if (!row) throw new E2bHttpError(401, "send a denv API key of your team in X-API-Key");
    const turn = limiter.take(row.id);
    if (!turn.ok)
      throw new E2bHttpError(429, `this key is over its rate limit; retry in ${turn.retryAfterMs} ms`);
    const role = row.role as Role;
    const needs = E2B_CONTROL_OPERATIONS[op];
    if (!allows(role, needs)) throw new E2bHttpError(403, refusal(role, needs));
    return { id: row.id, team_id: row.team_id, role };
  }

  /** The team's sandbox the path names (another team's: 404, as a missing one). */
  async function pathSandbox(c: Context, key: E2bCaller): Promise<Sandbox> {
    const id = c.req.param("id") ?? "";
    const s = await sandboxOf(key.team_id, id);
    if (!s) throw new E2bHttpError(404, `sandbox ${id} not found`);
    return s;
  }

  /**
   * Mounts one operation of E2B_CONTROL_OPERATIONS: the caller's key is checked, and its role held
   * to what the operation needs, before anything of the request is read.
   */
  const on = (op: E2bControlOperation, handler: (c: Context, key: E2bCaller) => Promise<Response>) => {
    const method = op.slice(0, op.indexOf(" "));
    app.on(method, pathOf(op), async (c) => handler(c, await callersKey(c, op)));
  };

  /**
   * A sandbox as the caller sees it: the access token is the caller's own (its envd calls act as
   * the caller, with the caller's role), and so is the traffic token's reach.
   */
  const sandboxBody = (s: Sandbox, key: E2bCaller) => ({
    templateID: s.template_id,
    sandboxID: sandboxIdOf(s.environment_id),
    clientID: "denv",
    envdVersion: ENVD_VERSION,
    envdAccessToken: tokenOf(s, key.id),
    // getHost(port) is `${port}-${sandboxID}.${domain}`: an ingress name, private behind this token.
    domain: ingress?.domain ?? null,
    ...(ingress ? { trafficAccessToken: ingress.tokenFor(s.environment_id, tokenAccessOf(key.role)) } : {}),
  });

  const detail = (s: Sandbox, key: E2bCaller) => ({
    ...sandboxBody(s, key),
    alias: s.template_id,
    startedAt: new Date(Number(s.started_at_ms)).toISOString(),
    endAt: new Date(Number(s.end_at_ms)).toISOString(),
    cpuCount: 0,
    memoryMB: 0,
    diskSizeMB: 0,
    state: s.paused_version_id ? "paused" : "running",
    metadata: JSON.parse(s.metadata_json) as Record<string, string>,
    lifecycle: { onTimeout: s.auto_pause ? "pause" : "kill", autoResume: Boolean(s.auto_resume) },
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
    key: E2bCaller,
    envId: string,
    templateId: string,
    timeoutS: number,
    metadata: Record<string, string>,
    envVars: Record<string, string>,
    auto: { pause: boolean; memory: boolean; resume: boolean } = {
      pause: false,
      memory: true,
      resume: false,
    },
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
      // 1: pause keeping memory at the timeout; 2: without it (autoPauseMemory false).
      auto_pause: auto.pause ? (auto.memory ? 1 : 2) : null,
      auto_resume: auto.resume ? 1 : null,
    };
    await insertE2bSandbox(store, row);
    return row;
  }

  const create = async (c: Context, key: E2bCaller) => {
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
    // A create that restricts its network is refused rather than made open or closed on a guess: an
    // egress policy comes from a template's file, and updateNetwork changes it (sandbox-network.ts).
    const network = (body.network ?? {}) as Record<string, unknown>;
    if (
      ["allowOut", "denyOut", "rules", "egressProxy", "maskRequestHost"].some(
        (f) => network[f] !== undefined && network[f] !== null,
      )
    )
      return e2bError(
        400,
        "network rules on create are not served by denv: create from a template whose file has an egress policy (x-denv.egress), then updateNetwork changes it",
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
    const auto = {
      pause: body.autoPause === true,
      memory: body.autoPauseMemory !== false,
      resume: (body.autoResume as { enabled?: unknown } | undefined)?.enabled === true,
    };
    if (auto.resume && !(auto.pause && auto.memory))
      return e2bError(400, "autoResume needs autoPause with its memory kept (autoPauseMemory not false)");
    const row = await register(key, env.id as string, templateId, timeoutS, metadata, envVars, auto);
    return c.json(sandboxBody(row, key), 201);
  };
  on("POST /v2/sandboxes", create);
  on("POST /sandboxes", create);

  /**
   * What a template names, when it is denv's: a version id (ver_…), the team's newest snapshot of
   * that name, or PROJECT/ENV (that environment's current version). Null: an image, or nothing.
   */
  async function templateVersion(key: E2bCaller, templateId: string) {
    if (/^ver_[a-z0-9]+$/.test(templateId)) return templateId;
    const named = await namedE2bSnapshot(store, key.team_id, templateId);
    if (named) return named;
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
  on("POST /sandboxes/:id/snapshots", async (c, key) => {
    const s = await pathSandbox(c, key);
    const body = await boundedJson(c.req);
    const name = body.name === undefined || body.name === null ? null : body.name;
    if (name !== null && (typeof name !== "string" || !/^[A-Za-z0-9][\w.-]{0,127}$/.test(name)))
      return e2bError(400, "name: 1-128 letters, digits, '.', '_' or '-', from a letter or digit");
    await json(await v1(key.id, `/v1/envs/${s.environment_id}/snapshot`, { method: "POST" }));
    const now = await json(await v1(key.id, `/v1/envs/${s.environment_id}`));
    const versionId = now.current_version_id as string;
    await insertE2bSnapshot(store, {
      version_id: versionId,
      team_id: key.team_id,
      sandbox_id: sandboxIdOf(s.environment_id),
      name,
      created_at_ms: nowMs(),
    });
    return c.json({ snapshotID: versionId, names: name ? [name] : [] }, 201);
  });

  on("GET /snapshots", async (c, key) => {
    const limit = Math.min(Math.max(Number(c.req.query("limit") ?? 100) || 100, 1), 100);
    const rows = await teamE2bSnapshots(store, key.team_id, {
      sandboxId: c.req.query("sandboxID"),
      name: c.req.query("name"),
      limit,
    });
    return c.json(rows.map((r) => ({ snapshotID: r.version_id, names: r.name ? [r.name] : [] })));
  });

  /** denv's extension of E2B's fork: the sandbox as it is now (snapshotted), forked `count` times. */
  on("POST /sandboxes/:id/fork", async (c, key) => {
    const s = await pathSandbox(c, key);
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
      out.push({ sandbox: sandboxBody(row, key) });
    }
    return c.json(out, 201);
  });

  on("GET /sandboxes/:id", async (c, key) => c.json(detail(await pathSandbox(c, key), key)));

  const list = async (c: Context, key: E2bCaller) => {
    const states = (c.req.queries("state") ?? ["running,paused"]).flatMap((x) => x.split(","));
    const wanted = new URLSearchParams(c.req.query("metadata") ?? "");
    const rows = await teamE2bSandboxes(store, key.team_id);
    const limit = Math.min(Math.max(Number(c.req.query("limit") ?? 100) || 100, 1), 100);
    const out = rows
      .filter((r) => {
        if (!states.includes(r.paused_version_id ? "paused" : "running")) return false;
        const m = JSON.parse(r.metadata_json) as Record<string, string>;
        return [...wanted].every(([k, v]) => m[k] === v);
      })
      .slice(0, limit)
      .map((s) => detail(s, key));
    c.header("x-total-running", String(out.length));
    return c.json(out);
  };
  on("GET /v2/sandboxes", list);
  on("GET /sandboxes", list);

  on("DELETE /sandboxes/:id", async (c, key) => {
    await kill(await pathSandbox(c, key), key.id);
    return c.body(null, 204);
  });

  on("POST /sandboxes/:id/timeout", async (c, key) => {
    const s = await pathSandbox(c, key);
    const body = await boundedJson(c.req);
    const timeoutS = body.timeout;
    if (
      typeof timeoutS !== "number" ||
      !Number.isInteger(timeoutS) ||
      timeoutS < 0 ||
      timeoutS > MAX_TIMEOUT_S
    )
      return e2bError(400, `timeout: a whole number of seconds from 0 to ${MAX_TIMEOUT_S}`);
    await updateE2bSandbox(store, s.environment_id, { end_at_ms: nowMs() + timeoutS * 1000 });
    return c.body(null, 204);
  });

  /**
   * Pause (sandbox-pause.ts): with `memory`, E2B's default, its processes kept on disk; without, or
   * where they cannot be kept, its services stopped. Either way it holds no CPU or memory and its
   * timeout no longer runs, under the same sandbox id.
   */
  on("POST /sandboxes/:id/pause", async (c, key) => {
    const s = await pathSandbox(c, key);
    const body = await boundedJson(c.req);
    if (s.paused_version_id)
      return e2bError(409, `sandbox ${sandboxIdOf(s.environment_id)} is already paused`);
    await pauseSandbox(pausing, s, key.id, { memory: body.memory !== false });
    return c.body(null, 204);
  });

  /**
   * Network update: the sandbox's egress policy replaced through /v1 as the caller (so its role and
   * team are checked there); only a sandbox whose template has an egress policy takes one.
   */
  on("PUT /sandboxes/:id/network", async (c, key) => {
    const s = await pathSandbox(c, key);
    const policy = egressFromE2bNetwork(await boundedJson(c.req));
    if ("error" in policy) return e2bError(400, policy.error);
    const res = await pausing.v1(key.id, `/v1/envs/${s.environment_id}/egress`, {
      method: "PATCH",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(policy),
    });
    if (!res.ok) {
      const e = ((await res.json().catch(() => ({}))) as { error?: { message?: string } }).error;
      return e2bError(
        res.status === 403 ? 403 : res.status === 404 ? 404 : res.status === 409 ? 409 : 400,
        e?.message ?? `HTTP ${res.status}`,
      );
    }
    return c.body(null, 204);
  });

  /**
   * Connect: a running sandbox as it is (200), a paused one resumed first (201). A caller that may
   * only read gets the sandbox as it is: resuming it, or lengthening its timeout, is a change.
   */
  const connect = async (c: Context, key: E2bCaller) => {
    const s = await pathSandbox(c, key);
    const body = await boundedJson(c.req);
    const timeoutS =
      typeof body.timeout === "number" && Number.isInteger(body.timeout) && body.timeout > 0
        ? Math.min(body.timeout, MAX_TIMEOUT_S)
        : null;
    const mayChange = allows(key.role, "change");
    if (!mayChange) {
      if (s.paused_version_id)
        throw new E2bHttpError(403, `${refusal(key.role, "change")} (resume a paused sandbox)`);
      return c.json(sandboxBody(s, key), 200);
    }
    // A resumed sandbox's timeout starts again (resumeSandbox sets it); a running one's is only
    // ever lengthened.
    const resumed = Boolean(s.paused_version_id);
    if (resumed) await resumeSandbox(pausing, s, key.id, timeoutS ?? DEFAULT_TIMEOUT_S);
    else if (timeoutS !== null)
      await updateE2bSandbox(store, s.environment_id, {
        end_at_ms: Math.max(Number(s.end_at_ms), nowMs() + timeoutS * 1000),
      });
    return c.json(sandboxBody(s, key), resumed ? 201 : 200);
  };
  on("POST /v2/sandboxes/:id/connect", connect);
  on("POST /sandboxes/:id/connect", connect);
  on("POST /sandboxes/:id/resume", connect);

  async function kill(s: Sandbox, keyId: string): Promise<void> {
    processes.dropSandbox(s.environment_id);
    const res = await v1(keyId, `/v1/envs/${s.environment_id}`, { method: "DELETE" });
    // Already gone from denv (deleted through /v1), or the key that made it was revoked since (the
    // environment stays the team's, to remove through /v1): the record goes all the same.
    if (!res.ok && res.status !== 404 && res.status !== 401) await json(res);
    await deleteE2bSandbox(store, s.environment_id);
  }

  /** Ends the sandboxes whose timeout has passed (pausing those made with autoPause); how many. */
  async function sweep(): Promise<number> {
    const due = await dueE2bSandboxes(store, nowMs());
    let n = 0;
    for (const s of due) {
      try {
        if (s.auto_pause) await pauseSandbox(pausing, s, s.key_id, { memory: s.auto_pause === 1 });
        else await kill(s, s.key_id);
        n++;
      } catch {
        // Tried again at the next sweep.
      }
    }
    return n;
  }

  return { sweep };
}
