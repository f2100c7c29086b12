/**
 * envd's Connect services on denv: `process.Process` (Start, Connect, List, SendInput, CloseStdin,
 * SendSignal) and `filesystem.Filesystem` (Stat, ListDir, MakeDir, Move, Remove), and envd's
 * /health. A call names its sandbox in E2b-Sandbox-Id with the sandbox's X-Access-Token and acts as
 * the key that made the sandbox, through /v1's exec and files routes.
 */
import type { PassThrough } from "node:stream";
import type { Hono } from "hono";
import { stream } from "hono/streaming";
import { newId } from "../ids.ts";
import { serverLog } from "../server-log.ts";
import {
  CONNECT_CODES,
  ConnectError,
  encodeEnvelope,
  endOfStream,
  MAX_CONNECT_MESSAGE_BYTES,
  readEnvelopes,
} from "./connect-protocol.ts";
import {
  absolute,
  boundedJson,
  type E2bCaller,
  type E2bContext,
  type Sandbox,
  stringRecord,
  userOf,
} from "./e2b-context.ts";
import { ENVD_OPERATIONS, type EnvdOperation, pathOf } from "./e2b-operations.ts";
import { EnvdProcess, type ProcessEvent, responseError } from "./envd-processes.ts";

/** How many WatchDir streams a sandbox may hold at once (each lists its directory every poll). */
const MAX_WATCHES = 16;

export function mountEnvdRoutes(app: Hono, ctx: E2bContext): void {
  const { secrets, v1, processes, envdCall } = ctx;
  const watchPollMs = ctx.watchPollMs;
  const watches = new Map<string, number>();

  app.get("/health", (c) => c.body(null, 204));

  /**
   * A unary Connect call: the bare JSON message in, the answer's out. The sandbox's token names the
   * key the call acts as, whose role is held to what the operation needs before the body is read.
   */
  const unary = (
    op: EnvdOperation,
    handler: (
      s: Sandbox,
      user: string | undefined,
      msg: Record<string, unknown>,
      caller: E2bCaller,
    ) => Promise<unknown>,
  ) =>
    app.post(pathOf(op), async (c) => {
      try {
        const { s, caller } = await envdCall(c, ENVD_OPERATIONS[op]);
        const msg = await boundedJson(c.req, MAX_CONNECT_MESSAGE_BYTES);
        return c.json((await handler(s, userOf(c), msg, caller)) ?? {});
      } catch (err) {
        return connectUnaryError(asConnectError(err));
      }
    });

  /** A server-streaming Connect call: one enveloped request, enveloped messages out, then the end. */
  const serverStream = (
    op: EnvdOperation,
    handler: (
      s: Sandbox,
      user: string | undefined,
      msg: Record<string, unknown>,
      send: (m: unknown, keepAlive?: boolean) => Promise<void>,
      signal: AbortSignal,
      headers: { keepAliveMs: number },
      caller: E2bCaller,
    ) => Promise<void>,
  ) =>
    app.post(pathOf(op), async (c) => {
      let s: Sandbox;
      let caller: E2bCaller;
      let user: string | undefined;
      let msg: Record<string, unknown> | undefined;
      try {
        ({ s, caller } = await envdCall(c, ENVD_OPERATIONS[op]));
        user = userOf(c);
        const body = c.req.raw.body;
        // A server stream's request is one message: the first is taken, nothing after it is read.
        if (body)
          for await (const e of readEnvelopes(body)) {
            msg = e.message as Record<string, unknown>;
            break;
          }
      } catch (err) {
        // A stream's error is its end-of-stream message (HTTP 200), which the SDK reads with its
        // code and words; an HTTP error status reaches it as "HTTP 400" alone.
        const e = err instanceof ConnectError ? err : new ConnectError("invalid_argument", "bad request");
        return new Response(new Uint8Array(endOfStream(e)), {
          status: 200,
          headers: { "content-type": "application/connect+json" },
        });
      }
      const keepAliveS = Number(c.req.header("keepalive-ping-interval") ?? 50) || 50;
      c.header("content-type", "application/connect+json");
      return stream(c, async (out) => {
        const ac = new AbortController();
        out.onAbort(() => ac.abort());
        // Messages go out one at a time, each sent once the stream took the last (the response's
        // backpressure): a caller awaits its send, so a client that stops reading stops the sender.
        // A keep-alive is sent only when nothing is waiting: an unread stream does not gather them.
        let writing = Promise.resolve();
        let waiting = 0;
        const send = (m: unknown, keepAlive = false) => {
          if (keepAlive && waiting > 0) return writing;
          waiting++;
          writing = writing.then(() =>
            out.write(encodeEnvelope(m)).then(() => {
              waiting--;
            }),
          );
          return writing;
        };
        try {
          await handler(
            s,
            user,
            msg ?? {},
            send,
            ac.signal,
            { keepAliveMs: Math.min(Math.max(keepAliveS, 1), 300) * 1000 },
            caller,
          );
          await writing;
          await out.write(endOfStream());
        } catch (err) {
          await writing.catch(() => {});
          await out.write(endOfStream(asConnectError(err))).catch(() => {});
        }
      });
    });

  /**
   * Relays a process's events to one stream until it ends or the caller goes: `firsts` go out
   * before anything the process does from now on (the watcher is added with no wait in between).
   * The watcher's send is awaited by the process before it reads more of the command's output.
   */
  function follow(
    p: EnvdProcess,
    send: (m: unknown, keepAlive?: boolean) => Promise<void>,
    signal: AbortSignal,
    keepAliveMs: number,
    firsts: ProcessEvent[],
  ): Promise<void> {
    return new Promise<void>((resolve) => {
      const keepAlive = setInterval(
        () => void send({ event: { keepalive: {} } }, true).catch(() => {}),
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
        return sent.catch(() => {});
      });
      signal.addEventListener("abort", done, { once: true });
    });
  }

  serverStream("POST /process.Process/Start", async (s, user, msg, send, signal, h, caller) => {
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
    processes.assertRoom(s.environment_id);
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
    const early = p.watch((e) => {
      events.push(e);
    });
    const pid = await p.start(
      (envId, req, stdin, abort) =>
        v1(caller.id, `/v1/envs/${envId}/exec/stream`, {
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

  serverStream("POST /process.Process/Connect", async (s, _user, msg, send, signal, h) => {
    const p = processes.find(s.environment_id, msg.process);
    await follow(p, send, signal, h.keepAliveMs, [{ start: { pid: p.pid } }]);
  });

  unary("POST /process.Process/List", async (s) => ({
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

  unary("POST /process.Process/SendInput", async (s, _user, msg) => {
    const p = processes.find(s.environment_id, msg.process);
    const input = (msg.input ?? {}) as { stdin?: unknown };
    if (typeof input.stdin !== "string")
      throw new ConnectError("invalid_argument", "input.stdin (base64) is required");
    if (p.stdin.writableEnded)
      throw new ConnectError("failed_precondition", `process ${p.pid}'s stdin is closed`);
    p.stdin.write(Buffer.from(input.stdin, "base64"));
    return {};
  });

  unary("POST /process.Process/CloseStdin", async (s, _user, msg) => {
    processes.find(s.environment_id, msg.process).stdin.end();
    return {};
  });

  unary("POST /process.Process/SendSignal", async (s, _user, msg, caller) => {
    const p = processes.find(s.environment_id, msg.process);
    const signal = msg.signal === "SIGNAL_SIGTERM" || msg.signal === 15 ? "TERM" : "KILL";
    const res = await v1(caller.id, `/v1/envs/${s.environment_id}/exec`, {
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

  const fsCall = async (
    s: Sandbox,
    caller: E2bCaller,
    user: string | undefined,
    path: string,
    init?: RequestInit,
  ) =>
    connectJson(
      await v1(
        caller.id,
        `/v1/envs/${s.environment_id}${path}${path.includes("?") ? "&" : "?"}${user ? `user=${encodeURIComponent(user)}` : ""}`,
        init,
      ),
    );

  unary("POST /filesystem.Filesystem/Stat", async (s, user, msg, caller) => ({
    entry: entryInfo(
      await fsCall(s, caller, user, `/files/stat?path=${encodeURIComponent(absolute(msg.path))}`),
    ),
  }));

  unary("POST /filesystem.Filesystem/ListDir", async (s, user, msg, caller) => {
    const depth = typeof msg.depth === "number" && msg.depth >= 1 ? Math.min(msg.depth, 64) : 1;
    const r = await fsCall(
      s,
      caller,
      user,
      `/files/list?path=${encodeURIComponent(absolute(msg.path))}&depth=${depth}`,
    );
    return { entries: (r.entries as Record<string, unknown>[]).map(entryInfo) };
  });

  /**
   * WatchDir: the directory listed every WATCH_POLL_MS through /v1 (the agent has no inotify), each
   * difference sent as envd's event: a new entry CREATE, a gone one REMOVE, a new size or time
   * WRITE, a new mode alone CHMOD (a rename is a REMOVE and a CREATE). Changes undone between two
   * looks are not seen. At most MAX_WATCHES per sandbox at once.
   */
  serverStream("POST /filesystem.Filesystem/WatchDir", async (s, user, msg, send, signal, h, caller) => {
    const root = absolute(msg.path);
    const depth = msg.recursive === true ? 64 : 1;
    const withEntry = msg.includeEntry === true;
    const list = async () => {
      const r = await fsCall(s, caller, user, `/files/list?path=${encodeURIComponent(root)}&depth=${depth}`);
      const seen = new Map<string, { sig: string; mode: string; e: Record<string, unknown> }>();
      for (const e of r.entries as Record<string, unknown>[]) {
        const rel = String(e.path).slice(root.replace(/\/$/, "").length + 1);
        seen.set(rel, { sig: `${e.type}:${e.size}:${e.modified_at}`, mode: String(e.mode), e });
      }
      return seen;
    };
    const watching = watches.get(s.environment_id) ?? 0;
    if (watching >= MAX_WATCHES)
      throw new ConnectError("resource_exhausted", `at most ${MAX_WATCHES} watches per sandbox`);
    watches.set(s.environment_id, watching + 1);
    try {
      let before = await list();
      await send({ start: {} });
      let lastSent = Date.now();
      while (!signal.aborted) {
        await new Promise((r) => setTimeout(r, watchPollMs));
        if (signal.aborted) break;
        const now = await list();
        const events: Record<string, unknown>[] = [];
        const event = (name: string, type: string, e: Record<string, unknown>) =>
          events.push({ filesystem: { name, type, ...(withEntry ? { entry: entryInfo(e) } : {}) } });
        for (const [name, was] of before) if (!now.has(name)) event(name, "EVENT_TYPE_REMOVE", was.e);
        for (const [name, is] of now) {
          const was = before.get(name);
          if (!was) event(name, "EVENT_TYPE_CREATE", is.e);
          else if (was.sig !== is.sig) event(name, "EVENT_TYPE_WRITE", is.e);
          else if (was.mode !== is.mode) event(name, "EVENT_TYPE_CHMOD", is.e);
        }
        for (const e of events) await send(e);
        if (events.length) lastSent = Date.now();
        else if (Date.now() - lastSent >= h.keepAliveMs) {
          await send({ keepalive: {} });
          lastSent = Date.now();
        }
        before = now;
      }
    } finally {
      const left = (watches.get(s.environment_id) ?? 1) - 1;
      if (left > 0) watches.set(s.environment_id, left);
      else watches.delete(s.environment_id);
    }
  });

  unary("POST /filesystem.Filesystem/MakeDir", async (s, user, msg, caller) => {
    const path = absolute(msg.path);
    const r = await fsCall(s, caller, user, "/files/mkdir", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ path, parents: true }),
    });
    if (r.created === false) throw new ConnectError("already_exists", `${path} already exists`);
    return {
      entry: entryInfo(await fsCall(s, caller, user, `/files/stat?path=${encodeURIComponent(path)}`)),
    };
  });

  unary("POST /filesystem.Filesystem/Move", async (s, user, msg, caller) => {
    const to = absolute(msg.destination);
    await fsCall(s, caller, user, "/files/rename", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ from: absolute(msg.source), to }),
    });
    return {
      entry: entryInfo(await fsCall(s, caller, user, `/files/stat?path=${encodeURIComponent(to)}`)),
    };
  });

  unary("POST /filesystem.Filesystem/Remove", async (s, user, msg, caller) => {
    await fsCall(s, caller, user, `/files?path=${encodeURIComponent(absolute(msg.path))}&recursive=true`, {
      method: "DELETE",
    });
    return {};
  });
}

/** A Connect error as it is, or the server's own fault: logged under a reference, its words kept here. */
export function asConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  const ref = newId("err");
  serverLog().error({ ref, error: (err as Error).stack ?? String(err) }, "E2B call failed");
  return new ConnectError("internal", `the server failed (reference ${ref}); its log has the details`);
}

export function connectUnaryError(err: ConnectError): Response {
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
