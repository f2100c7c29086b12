/**
 * E2B's API on denv, at /e2b: the unmodified E2B SDK works against `denv server` with
 * E2B_API_URL=http(s)://SERVER/e2b, E2B_SANDBOX_URL=http(s)://SERVER/e2b and E2B_API_KEY set to a
 * team's denv key. The control plane (POST /sandboxes, GET /v2/sandboxes, …) takes the key in
 * X-API-Key; envd's calls (process.Process, filesystem.Filesystem, /files) are routed by the
 * E2b-Sandbox-Id header and take the sandbox's access token in X-Access-Token.
 *
 * Every action is a /v1 call made in process as the key (for envd calls, the key that made the
 * sandbox, checked again on each call): the same scoping, rate limits and rules as /v1, and a
 * command is a denv exec. A sandbox id is the environment's id without its `env_` prefix (E2B
 * wants [a-z0-9]+, no hyphen); its access token is derived from the server's key, never stored.
 */
import { randomBytes, timingSafeEqual } from "node:crypto";
import { PassThrough, Readable } from "node:stream";
import { type Context, Hono } from "hono";
import { stream } from "hono/streaming";
import tar from "tar-stream";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { Store } from "../store/open-store.ts";
import type { E2bSandboxesTable } from "../store/schema.ts";
import { findApiKey } from "../store/team-store.ts";
import {
  CONNECT_CODES,
  ConnectError,
  encodeEnvelope,
  endOfStream,
  MAX_CONNECT_MESSAGE_BYTES,
  parseJson,
  readEnvelopes,
} from "./connect-protocol.ts";
import { EnvdProcess, EnvdProcesses, type ProcessEvent, responseError } from "./envd-processes.ts";

/** The envd version reported: the SDK takes the paths this gateway serves for it (stdin, multipart uploads). */
export const ENVD_VERSION = "0.5.7";
const ENVD_PORT = "49983";
/** A sandbox's timeout when the create names none (E2B's API default), and the longest allowed. */
const DEFAULT_TIMEOUT_S = 300;
const MAX_TIMEOUT_S = 24 * 3600;

/** A call of /v1 in process, as an API key (by its id). */
export type V1Call = (keyId: string, path: string, init?: RequestInit) => Promise<Response>;

export interface E2bGatewayOptions {
  store: Store;
  secrets: SecretBox;
  v1: V1Call;
  /** The clock, in ms (tests drive it). */
  nowMs?: () => number;
}

type Sandbox = E2bSandboxesTable;

const envIdOf = (sandboxId: string) => `env_${sandboxId}`;
const sandboxIdOf = (envId: string) => envId.replace(/^env_/, "");

/** E2B's error body: {code, message}. */
function e2bError(status: number, message: string): Response {
  return Response.json({ code: status, message }, { status });
}

export function createE2bGateway(options: E2bGatewayOptions): { app: Hono; sweep: () => Promise<number> } {
  const { store, secrets, v1 } = options;
  const nowMs = options.nowMs ?? Date.now;
  const processes = new EnvdProcesses();
  const app = new Hono();

  const tokenOf = (s: Pick<Sandbox, "environment_id" | "token_salt">) =>
    `ea_${secrets.derive(`e2b-envd:${s.environment_id}:${s.token_salt}`)}`;

  const sandboxBody = (s: Sandbox) => ({
    templateID: s.template_id,
    sandboxID: sandboxIdOf(s.environment_id),
    clientID: "denv",
    envdVersion: ENVD_VERSION,
    envdAccessToken: tokenOf(s),
    domain: null,
  });

  const detail = (s: Sandbox) => ({
    ...sandboxBody(s),
    alias: s.template_id,
    startedAt: new Date(Number(s.started_at_ms)).toISOString(),
    endAt: new Date(Number(s.end_at_ms)).toISOString(),
    cpuCount: 0,
    memoryMB: 0,
    diskSizeMB: 0,
    state: "running",
    metadata: JSON.parse(s.metadata_json) as Record<string, string>,
  });

  /** The key in X-API-Key (or Authorization: Bearer), or a 401. */
  async function keyOf(c: { req: { header(n: string): string | undefined } }) {
    const key = c.req.header("x-api-key") ?? /^Bearer (.+)$/.exec(c.req.header("authorization") ?? "")?.[1];
    if (!key) return null;
    return (await findApiKey(store, key)) ?? null;
  }

  /** The team's sandbox by its E2B id, or null (another team's is null too). */
  async function sandboxOf(teamId: string, sandboxId: string): Promise<Sandbox | null> {
    if (!/^[a-z0-9]{1,64}$/.test(sandboxId)) return null;
    const s = await store
      .selectFrom("e2b_sandboxes")
      .selectAll()
      .where("environment_id", "=", envIdOf(sandboxId))
      .where("team_id", "=", teamId)
      .executeTakeFirst();
    return s ?? null;
  }

  async function json(res: Response): Promise<Record<string, unknown>> {
    if (!res.ok) {
      const e = await responseError(res);
      throw new E2bHttpError(CONNECT_CODES[e.code] === 499 ? 500 : CONNECT_CODES[e.code], e.message);
    }
    return (await res.json()) as Record<string, unknown>;
  }

  // The control plane's errors (envd's calls answer their own, in Connect's form).
  app.onError((err) => {
    if (err instanceof E2bHttpError) return e2bError(err.status, err.message);
    if (err instanceof ConnectError) return e2bError(CONNECT_CODES[err.code], err.message);
    return e2bError(500, "the server failed");
  });

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
    };
    await store.insertInto("e2b_sandboxes").values(row).execute();
    return row;
  }

  const create = async (c: Context) => {
    const key = await keyOf(c);
    if (!key) return e2bError(401, "send a denv API key in X-API-Key");
    const body = parseJson(new Uint8Array(await c.req.arrayBuffer()));
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
    const made = /^ver_[a-z0-9]+$/.test(templateId)
      ? { from_version: templateId }
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
        `template ${JSON.stringify(templateId)} is not a denv version id (ver_…) or an image reference (registry/name:tag)`,
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

  /** denv's extension of E2B's fork: the sandbox as it is now (snapshotted), forked `count` times. */
  app.post("/sandboxes/:id/fork", async (c) => {
    const key = await keyOf(c);
    if (!key) return e2bError(401, "send a denv API key in X-API-Key");
    const s = await sandboxOf(key.team_id, c.req.param("id") ?? "");
    if (!s) return e2bError(404, `sandbox ${c.req.param("id") ?? ""} not found`);
    const body = parseJson(new Uint8Array(await c.req.arrayBuffer()));
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
    const key = await keyOf(c);
    if (!key) return e2bError(401, "send a denv API key in X-API-Key");
    const s = await sandboxOf(key.team_id, c.req.param("id") ?? "");
    if (!s) return e2bError(404, `sandbox ${c.req.param("id") ?? ""} not found`);
    return c.json(detail(s));
  });

  const list = async (c: Context) => {
    const key = await keyOf(c);
    if (!key) return e2bError(401, "send a denv API key in X-API-Key");
    const states = (c.req.queries("state") ?? ["running,paused"]).flatMap((x) => x.split(","));
    if (!states.includes("running")) return c.json([]);
    const wanted = new URLSearchParams(c.req.query("metadata") ?? "");
    const rows = await store
      .selectFrom("e2b_sandboxes")
      .selectAll()
      .where("team_id", "=", key.team_id)
      .execute();
    const limit = Math.min(Math.max(Number(c.req.query("limit") ?? 100) || 100, 1), 100);
    const out = rows
      .filter((r) => {
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
    const key = await keyOf(c);
    if (!key) return e2bError(401, "send a denv API key in X-API-Key");
    const s = await sandboxOf(key.team_id, c.req.param("id") ?? "");
    if (!s) return e2bError(404, `sandbox ${c.req.param("id") ?? ""} not found`);
    await kill(s, key.id);
    return c.body(null, 204);
  });

  app.post("/sandboxes/:id/timeout", async (c) => {
    const key = await keyOf(c);
    if (!key) return e2bError(401, "send a denv API key in X-API-Key");
    const s = await sandboxOf(key.team_id, c.req.param("id") ?? "");
    if (!s) return e2bError(404, `sandbox ${c.req.param("id") ?? ""} not found`);
    const body = parseJson(new Uint8Array(await c.req.arrayBuffer()));
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

  const connect = async (c: Context) => {
    const key = await keyOf(c);
    if (!key) return e2bError(401, "send a denv API key in X-API-Key");
    const s = await sandboxOf(key.team_id, c.req.param("id") ?? "");
    if (!s) return e2bError(404, `sandbox ${c.req.param("id") ?? ""} not found`);
    const body = parseJson(new Uint8Array(await c.req.arrayBuffer()));
    if (typeof body.timeout === "number" && Number.isInteger(body.timeout) && body.timeout > 0) {
      const end = Math.max(Number(s.end_at_ms), nowMs() + Math.min(body.timeout, MAX_TIMEOUT_S) * 1000);
      await store
        .updateTable("e2b_sandboxes")
        .set({ end_at_ms: end })
        .where("environment_id", "=", s.environment_id)
        .execute();
    }
    return c.json(sandboxBody(s), 200);
  };
  app.post("/v2/sandboxes/:id/connect", connect);
  app.post("/sandboxes/:id/connect", connect);

  async function kill(s: Sandbox, keyId: string): Promise<void> {
    processes.dropSandbox(s.environment_id);
    const res = await v1(keyId, `/v1/envs/${s.environment_id}`, { method: "DELETE" });
    // Already gone from denv (deleted through /v1): the record goes all the same.
    if (!res.ok && res.status !== 404) await json(res);
    await store.deleteFrom("e2b_sandboxes").where("environment_id", "=", s.environment_id).execute();
  }

  /** Kills the sandboxes whose timeout has passed; returns how many. */
  async function sweep(): Promise<number> {
    const due = await store
      .selectFrom("e2b_sandboxes")
      .selectAll()
      .where("end_at_ms", "<=", nowMs())
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

  // --- envd ----------------------------------------------------------------------------------

  /** The sandbox an envd call is for (E2b-Sandbox-Id and its X-Access-Token), or unauthenticated. */
  async function envdSandbox(c: { req: { header(n: string): string | undefined } }): Promise<Sandbox> {
    const id = c.req.header("e2b-sandbox-id") ?? "";
    const port = c.req.header("e2b-sandbox-port") ?? ENVD_PORT;
    if (port !== ENVD_PORT)
      throw new ConnectError("unimplemented", `port ${port} is not served here (only envd's, ${ENVD_PORT})`);
    const token = c.req.header("x-access-token") ?? "";
    const s = /^[a-z0-9]{1,64}$/.test(id)
      ? await store
          .selectFrom("e2b_sandboxes")
          .selectAll()
          .where("environment_id", "=", envIdOf(id))
          .executeTakeFirst()
      : undefined;
    const want = s ? Buffer.from(tokenOf(s)) : null;
    const got = Buffer.from(token);
    if (!s || !want || want.length !== got.length || !timingSafeEqual(want, got))
      throw new ConnectError(
        "unauthenticated",
        "the sandbox's access token (X-Access-Token) is missing or wrong",
      );
    return s;
  }

  /** Who a call acts as: `Authorization: Basic base64("user:")`, else the service's own user. */
  function userOf(c: { req: { header(n: string): string | undefined } }): string | undefined {
    const basic = /^Basic (.+)$/.exec(c.req.header("authorization") ?? "")?.[1];
    if (!basic) return undefined;
    const user = Buffer.from(basic, "base64").toString().split(":")[0] ?? "";
    if (!/^[a-z_][a-z0-9_.-]{0,31}$|^[0-9]{1,10}$/i.test(user))
      throw new ConnectError("invalid_argument", "the user in Authorization is not a user name or uid");
    return user;
  }

  app.get("/health", (c) => c.body(null, 204));

  /** A unary Connect call: the bare JSON message in, the answer's out. */
  const unary = (
    path: string,
    handler: (s: Sandbox, user: string | undefined, msg: Record<string, unknown>) => Promise<unknown>,
  ) =>
    app.post(path, async (c) => {
      try {
        const s = await envdSandbox(c);
        const body = await c.req.arrayBuffer();
        if (body.byteLength > MAX_CONNECT_MESSAGE_BYTES)
          throw new ConnectError(
            "resource_exhausted",
            `the message is over ${MAX_CONNECT_MESSAGE_BYTES} bytes`,
          );
        return c.json((await handler(s, userOf(c), parseJson(new Uint8Array(body)))) ?? {});
      } catch (err) {
        return connectUnaryError(
          err instanceof ConnectError ? err : new ConnectError("internal", "the call failed"),
        );
      }
    });

  /** A server-streaming Connect call: one enveloped request, enveloped messages out, then the end. */
  const serverStream = (
    path: string,
    handler: (
      s: Sandbox,
      user: string | undefined,
      msg: Record<string, unknown>,
      send: (m: unknown) => Promise<void>,
      signal: AbortSignal,
      headers: { timeoutMs: number; keepAliveMs: number },
    ) => Promise<void>,
  ) =>
    app.post(path, async (c) => {
      let s: Sandbox;
      let user: string | undefined;
      let msg: Record<string, unknown> | undefined;
      try {
        s = await envdSandbox(c);
        user = userOf(c);
        const body = c.req.raw.body;
        if (body) for await (const e of readEnvelopes(body)) msg ??= e.message as Record<string, unknown>;
      } catch (err) {
        return connectUnaryError(
          err instanceof ConnectError ? err : new ConnectError("invalid_argument", "bad request"),
        );
      }
      const timeoutMs = Number(c.req.header("connect-timeout-ms") ?? 0) || 0;
      const keepAliveS = Number(c.req.header("keepalive-ping-interval") ?? 50) || 50;
      c.header("content-type", "application/connect+json");
      return stream(c, async (out) => {
        const ac = new AbortController();
        out.onAbort(() => ac.abort());
        let writing = Promise.resolve();
        const send = (m: unknown) => {
          writing = writing.then(() => out.write(encodeEnvelope(m)).then(() => {}));
          return writing;
        };
        try {
          await handler(s, user, msg ?? {}, send, ac.signal, {
            timeoutMs,
            keepAliveMs: Math.min(Math.max(keepAliveS, 1), 300) * 1000,
          });
          await writing;
          await out.write(endOfStream());
        } catch (err) {
          await writing.catch(() => {});
          await out
            .write(
              endOfStream(
                err instanceof ConnectError ? err : new ConnectError("internal", (err as Error).message),
              ),
            )
            .catch(() => {});
        }
      });
    });

  /**
   * Relays a process's events to one stream until it ends or the caller goes: `firsts` go out
   * before anything the process does from now on (the watcher is added with no wait in between).
   */
  function follow(
    p: EnvdProcess,
    send: (m: unknown) => Promise<void>,
    signal: AbortSignal,
    keepAliveMs: number,
    firsts: ProcessEvent[],
  ): Promise<void> {
    return new Promise<void>((resolve) => {
      const keepAlive = setInterval(
        () => void send({ event: { keepalive: {} } }).catch(() => {}),
        keepAliveMs,
      );
      let unwatch = () => {};
      const done = () => {
        clearInterval(keepAlive);
        unwatch();
        resolve();
      };
      let last: Promise<void> = Promise.resolve();
      for (const e of firsts) last = send({ event: e });
      if (p.ended) {
        (firsts.includes(p.ended) ? last : send({ event: p.ended })).then(done, done);
        return;
      }
      unwatch = p.watch((e) => {
        const sent = send({ event: e });
        if ("end" in e) sent.then(done, done);
        else sent.catch(() => {});
      });
      signal.addEventListener("abort", done, { once: true });
    });
  }

  serverStream("/process.Process/Start", async (s, user, msg, send, signal, h) => {
    const proc = (msg.process ?? {}) as { cmd?: unknown; args?: unknown; envs?: unknown; cwd?: unknown };
    if (typeof proc.cmd !== "string" || !proc.cmd)
      throw new ConnectError("invalid_argument", "process.cmd is required");
    if (msg.pty)
      throw new ConnectError("unimplemented", "a PTY is not served yet: run the command without one");
    const args = Array.isArray(proc.args) ? proc.args.map(String) : [];
    const envs = {
      ...(JSON.parse(secrets.open(s.env_vars_sealed)) as Record<string, string>),
      ...stringRecord(proc.envs, "process.envs"),
    };
    const cwd = typeof proc.cwd === "string" && proc.cwd ? proc.cwd : undefined;
    const tag = typeof msg.tag === "string" ? msg.tag : undefined;
    const p = new EnvdProcess(
      s.environment_id,
      { cmd: proc.cmd, args, envs, ...(cwd ? { cwd } : {}) },
      tag,
      user,
    );
    if (msg.stdin !== true) p.stdin.end();
    const request = {
      command: ["/bin/sh", "-c", 'echo "$$" >&2; exec "$0" "$@"', proc.cmd, ...args],
      ...(user ? { user } : {}),
      ...(cwd ? { cwd } : {}),
      env: envs,
      // Connect-Timeout-Ms bounds this call's stream, not the command: E2B's commands outlive the
      // connection that started them (a background server, a run reconnected to later).
    };
    // What the process does between its start and this stream's watcher is kept, then sent in order.
    const events: ProcessEvent[] = [];
    const early = p.watch((e) => events.push(e));
    const pid = await p.start(
      (envId, req, stdin, abort) =>
        v1(s.key_id, `/v1/envs/${envId}/exec/stream`, {
          method: "POST",
          headers: { "content-type": "application/octet-stream" },
          body: execStreamBody(req, stdin),
          signal: abort,
          duplex: "half",
        } as RequestInit),
      request,
    );
    processes.add(p);
    early();
    await follow(p, send, signal, h.keepAliveMs, [
      { start: { pid } },
      ...events.filter((e) => !("start" in e)),
    ]);
  });

  serverStream("/process.Process/Connect", async (s, _user, msg, send, signal, h) => {
    const p = processes.find(s.environment_id, msg.process);
    await follow(p, send, signal, h.keepAliveMs, [{ start: { pid: p.pid } }]);
  });

  unary("/process.Process/List", async (s) => ({
    processes: processes.list(s.environment_id).map((p) => ({
      config: {
        cmd: p.config.cmd,
        args: p.config.args,
        envs: p.config.envs,
        ...(p.config.cwd ? { cwd: p.config.cwd } : {}),
      },
      pid: p.pid,
      ...(p.tag ? { tag: p.tag } : {}),
    })),
  }));

  unary("/process.Process/SendInput", async (s, _user, msg) => {
    const p = processes.find(s.environment_id, msg.process);
    const input = (msg.input ?? {}) as { stdin?: unknown };
    if (typeof input.stdin !== "string")
      throw new ConnectError("invalid_argument", "input.stdin (base64) is required");
    if (p.stdin.writableEnded)
      throw new ConnectError("failed_precondition", `process ${p.pid}'s stdin is closed`);
    p.stdin.write(Buffer.from(input.stdin, "base64"));
    return {};
  });

  unary("/process.Process/CloseStdin", async (s, _user, msg) => {
    processes.find(s.environment_id, msg.process).stdin.end();
    return {};
  });

  unary("/process.Process/SendSignal", async (s, _user, msg) => {
    const p = processes.find(s.environment_id, msg.process);
    const signal = msg.signal === "SIGNAL_SIGTERM" || msg.signal === 15 ? "TERM" : "KILL";
    const res = await v1(s.key_id, `/v1/envs/${s.environment_id}/exec`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        command: ["kill", "-s", signal, String(p.pid)],
        ...(p.user ? { user: p.user } : {}),
      }),
    });
    const r = await connectJson(res);
    if (r.exit_code !== 0)
      throw new ConnectError("not_found", `process ${p.pid} could not be signalled (it may have ended)`);
    return {};
  });

  // --- filesystem ----------------------------------------------------------------------------

  const fsCall = async (s: Sandbox, user: string | undefined, path: string, init?: RequestInit) =>
    connectJson(
      await v1(
        s.key_id,
        `/v1/envs/${s.environment_id}${path}${path.includes("?") ? "&" : "?"}${user ? `user=${encodeURIComponent(user)}` : ""}`,
        init,
      ),
    );

  unary("/filesystem.Filesystem/Stat", async (s, user, msg) => ({
    entry: entryInfo(await fsCall(s, user, `/files/stat?path=${encodeURIComponent(absolute(msg.path))}`)),
  }));

  unary("/filesystem.Filesystem/ListDir", async (s, user, msg) => {
    const depth = typeof msg.depth === "number" && msg.depth >= 1 ? Math.min(msg.depth, 64) : 1;
    const r = await fsCall(
      s,
      user,
      `/files/list?path=${encodeURIComponent(absolute(msg.path))}&depth=${depth}`,
    );
    return { entries: (r.entries as Record<string, unknown>[]).map(entryInfo) };
  });

  unary("/filesystem.Filesystem/MakeDir", async (s, user, msg) => {
    const path = absolute(msg.path);
    const r = await fsCall(s, user, "/files/mkdir", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ path, parents: true }),
    });
    if (r.created === false) throw new ConnectError("already_exists", `${path} already exists`);
    return { entry: entryInfo(await fsCall(s, user, `/files/stat?path=${encodeURIComponent(path)}`)) };
  });

  unary("/filesystem.Filesystem/Move", async (s, user, msg) => {
    const to = absolute(msg.destination);
    await fsCall(s, user, "/files/rename", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ from: absolute(msg.source), to }),
    });
    return { entry: entryInfo(await fsCall(s, user, `/files/stat?path=${encodeURIComponent(to)}`)) };
  });

  unary("/filesystem.Filesystem/Remove", async (s, user, msg) => {
    await fsCall(s, user, `/files?path=${encodeURIComponent(absolute(msg.path))}&recursive=true`, {
      method: "DELETE",
    });
    return {};
  });

  // --- /files: a file's bytes in and out (the SDK's files.read and files.write) --------------

  /** The sandbox and user of a /files call, its failures as envd's HTTP errors. */
  async function filesCall(c: Context): Promise<{ s: Sandbox; user: string | undefined; path: string }> {
    const s = await envdSandbox(c);
    const username = c.req.query("username");
    const user = username
      ? userOf({ req: { header: () => `Basic ${Buffer.from(`${username}:`).toString("base64")}` } })
      : userOf(c);
    return { s, user, path: c.req.query("path") ?? "" };
  }

  app.get("/files", async (c) => {
    try {
      const { s, user, path } = await filesCall(c);
      const res = await v1(
        s.key_id,
        `/v1/envs/${s.environment_id}/files?path=${encodeURIComponent(absolute(path))}${user ? `&user=${encodeURIComponent(user)}` : ""}`,
      );
      if (!res.ok || !res.body) throw await responseError(res);
      const file = await firstFileOfTar(res.body, path);
      return new Response(file.body, {
        status: 200,
        headers: { "content-type": "application/octet-stream", "content-length": String(file.size) },
      });
    } catch (err) {
      return filesError(err);
    }
  });

  app.post("/files", async (c) => {
    try {
      const { s, user, path } = await filesCall(c);
      const type = c.req.header("content-type") ?? "";
      const files: { path: string; bytes: Uint8Array }[] = [];
      const length = Number(c.req.header("content-length") ?? 0);
      if (length > MAX_UPLOAD_BYTES)
        throw new ConnectError(
          "resource_exhausted",
          `an upload of ${length} bytes is over the ${MAX_UPLOAD_BYTES}-byte limit here`,
        );
      if (type.startsWith("multipart/form-data")) {
        const form = await c.req.raw.formData();
        for (const [, v] of form.entries()) {
          if (typeof v === "string") continue;
          files.push({ path: v.name || path, bytes: new Uint8Array(await v.arrayBuffer()) });
        }
      } else {
        if (c.req.header("content-encoding"))
          throw new ConnectError(
            "invalid_argument",
            "compressed uploads are not accepted here: send the bytes as they are",
          );
        files.push({ path, bytes: new Uint8Array(await boundedBody(c.req.raw.body, MAX_UPLOAD_BYTES)) });
      }
      if (!files.length) throw new ConnectError("invalid_argument", "the upload carried no file");
      const written: unknown[] = [];
      for (const f of files) {
        const abs = absolute(f.path);
        const dir = abs.slice(0, abs.lastIndexOf("/")) || "/";
        const name = abs.slice(abs.lastIndexOf("/") + 1);
        if (!name) throw new ConnectError("invalid_argument", `${abs} names a directory, not a file`);
        const res = await v1(
          s.key_id,
          `/v1/envs/${s.environment_id}/files?path=${encodeURIComponent(dir)}${user ? `&user=${encodeURIComponent(user)}` : ""}`,
          {
            method: "PUT",
            headers: { "content-type": "application/x-tar" },
            body: await oneFileTar(name, f.bytes),
          },
        );
        if (!res.ok) throw await responseError(res);
        written.push({ name, type: "file", path: abs });
      }
      return c.json(written);
    } catch (err) {
      return filesError(err);
    }
  });

  return { app, sweep };
}

/** The most one upload may carry here (it is held whole to make its tar). */
const MAX_UPLOAD_BYTES = 256 * 1024 * 1024;

/** envd's HTTP errors for /files: {code, message} with the status. */
function filesError(err: unknown): Response {
  const e = err instanceof ConnectError ? err : new ConnectError("internal", "the call failed");
  const status = CONNECT_CODES[e.code] === 499 ? 500 : CONNECT_CODES[e.code];
  return Response.json({ code: status, message: e.message }, { status });
}

async function boundedBody(body: ReadableStream<Uint8Array> | null, maxBytes: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  if (body)
    for await (const chunk of body) {
      n += chunk.length;
      if (n > maxBytes)
        throw new ConnectError("resource_exhausted", `an upload over ${maxBytes} bytes is not accepted here`);
      parts.push(Buffer.from(chunk));
    }
  return Buffer.concat(parts);
}

/** A tar of one regular file, to PUT through /v1's files route. */
async function oneFileTar(name: string, bytes: Uint8Array): Promise<Buffer> {
  const pack = tar.pack();
  pack.entry({ name, size: bytes.length, mode: 0o644, type: "file" }, Buffer.from(bytes));
  pack.finalize();
  const parts: Buffer[] = [];
  for await (const chunk of pack) parts.push(chunk as Buffer);
  return Buffer.concat(parts);
}

/**
 * The one regular file a tar of a path holds (GET /v1/…/files of a file), streamed: its bytes as
 * they arrive. A directory or a link is refused (envd reads files, and never follows a link).
 */
async function firstFileOfTar(
  body: ReadableStream<Uint8Array>,
  path: string,
): Promise<{ size: number; body: ReadableStream<Uint8Array> }> {
  const extract = tar.extract();
  Readable.fromWeb(body as import("node:stream/web").ReadableStream<Uint8Array>).pipe(extract);
  const it = extract[Symbol.asyncIterator]();
  const first = await it.next();
  if (first.done) throw new ConnectError("not_found", `${path} was not found`);
  const entry = first.value;
  if (entry.header.type !== "file") {
    entry.resume();
    extract.destroy();
    throw new ConnectError("invalid_argument", `${path} is a ${entry.header.type ?? "non-file"}, not a file`);
  }
  const size = entry.header.size ?? 0;
  const out = new PassThrough();
  entry.pipe(out);
  // The rest of the tar (its end blocks) is read and dropped once the file is through.
  entry.on(
    "end",
    () =>
      void it.next().then(
        () => extract.destroy(),
        () => {},
      ),
  );
  return { size, body: Readable.toWeb(out) as ReadableStream<Uint8Array> };
}

/** An error of the control plane's, with its HTTP status. */
class E2bHttpError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

function connectUnaryError(err: ConnectError): Response {
  return Response.json(err.toJSON(), { status: CONNECT_CODES[err.code] });
}

async function connectJson(res: Response): Promise<Record<string, unknown>> {
  if (!res.ok) throw await responseError(res);
  return (await res.json()) as Record<string, unknown>;
}

/** exec/stream's body: the request as its first line, then stdin as it is written. */
function execStreamBody(request: Record<string, unknown>, stdin: PassThrough): ReadableStream<Uint8Array> {
  const head = Buffer.from(`${JSON.stringify(request)}\n`);
  const it = stdin[Symbol.asyncIterator]();
  let sentHead = false;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (!sentHead) {
        sentHead = true;
        controller.enqueue(head);
        return;
      }
      const next = await it.next();
      if (next.done) controller.close();
      else controller.enqueue(next.value as Buffer);
    },
    cancel() {
      stdin.destroy();
    },
  });
}

/** A timeout in whole seconds (1 to MAX_TIMEOUT_S), or the default when none is given. */
function timeoutOf(v: unknown, fallback: number | null): number {
  if (v === undefined || v === null) {
    if (fallback === null) throw new ConnectError("invalid_argument", "timeout (seconds) is required");
    return fallback;
  }
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1 || v > MAX_TIMEOUT_S)
    throw new ConnectError(
      "invalid_argument",
      `timeout: a whole number of seconds from 1 to ${MAX_TIMEOUT_S}`,
    );
  return v;
}

function stringRecord(v: unknown, what: string): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (typeof v !== "object" || Array.isArray(v))
    throw new ConnectError("invalid_argument", `${what} must be an object of strings`);
  const out: Record<string, string> = {};
  for (const [k, x] of Object.entries(v)) {
    if (typeof x !== "string") throw new ConnectError("invalid_argument", `${what}.${k} must be a string`);
    out[k] = x;
  }
  return out;
}

/** Paths are absolute here: a relative one has no home to resolve against yet. */
function absolute(p: unknown): string {
  if (typeof p !== "string" || !p.startsWith("/"))
    throw new ConnectError("invalid_argument", `path ${JSON.stringify(p)} must be absolute (start with /)`);
  return p;
}

const FILE_TYPES: Record<string, string> = {
  file: "FILE_TYPE_FILE",
  directory: "FILE_TYPE_DIRECTORY",
  symlink: "FILE_TYPE_SYMLINK",
};

/** denv's fs entry as envd's EntryInfo JSON. */
function entryInfo(e: Record<string, unknown>): Record<string, unknown> {
  const mode = Number(e.mode);
  return {
    name: e.name,
    type: FILE_TYPES[String(e.type)] ?? "FILE_TYPE_UNSPECIFIED",
    path: e.path,
    size: String(e.size),
    mode,
    permissions: permissionString(String(e.type), mode),
    owner: e.owner ?? String(e.uid),
    group: e.group ?? String(e.gid),
    modifiedTime: e.modified_at,
    ...(e.link_target ? { symlinkTarget: e.link_target } : {}),
  };
}

function permissionString(type: string, mode: number): string {
  const kind = type === "directory" ? "d" : type === "symlink" ? "l" : "-";
  const bits = "rwxrwxrwx";
  let out = kind;
  for (let i = 0; i < 9; i++) out += mode & (1 << (8 - i)) ? bits[i] : "-";
  return out;
}
