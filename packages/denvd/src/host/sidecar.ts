/**
 * denvd as a process: one outbound WebSocket to the control plane (it listens on no port), a hello
 * with what this host is, heartbeats, reconnects with backoff, and operations served from the
 * Denvd library. Each operation has an id; one already running or done is answered from that run,
 * not started again, so a reconnect neither loses nor repeats work.
 */

import { arch, cpus, freemem, totalmem } from "node:os";
import type { Duplex } from "node:stream";
import {
  DenvError,
  finishStream,
  HEARTBEAT_MS,
  type HostMessage,
  MAX_MESSAGE_BYTES,
  type MuxStream,
  type OpCheckedParams,
  type OpMethod,
  operationStreams,
  PROTOCOL_VERSION,
  type ServerMessage,
  StreamMux,
  serverMessageSchema,
  streamLinkMaskOptions,
} from "@denv/protocol";
import WebSocket from "ws";
import type { Denvd } from "../denvd.ts";
import { JOURNALED_OPS, type OpEntry } from "./op-journal.ts";
import { OpResultCache } from "./op-result-cache.ts";
import { type OperationHandlers, operationHandlers, performOperation } from "./operation-handlers.ts";

/** The release, with the build's commit when built as one executable (scripts/build-denvd.sh). */
export const DENVD_VERSION: string = process.env.DENVD_BUILD_VERSION ?? "0.1.0";

export interface SidecarOptions {
  /** The server, or several replicas of it: each reconnect tries the next one in turn. */
  serverUrl: string | string[];
  secret: string;
  denvd: Denvd;
  log?: (message: string, context?: Record<string, unknown>) => void;
  /** Called on each welcome with the host id, what this host reported in its hello, and the server's URL. */
  onWelcome?: (hostId: string, hello: HostMessage, serverUrl: string) => void;
}

type Outcome = { ok: boolean; result?: unknown; error?: unknown };

/** An outcome's error as one short line for the log. */
function errorLine(error: unknown): string {
  const e = (error ?? {}) as { code?: unknown; message?: unknown };
  return `${String(e.code ?? "error")}: ${String(e.message ?? "").slice(0, 300)}`;
}

export class Sidecar {
  private ws: WebSocket | null = null;
  private stopped = false;
  private backoffMs = 250;
  private readonly serverUrls: string[];
  /** Which of serverUrls the current (or next) connection dials. */
  private urlIndex = 0;
  private heartbeat: NodeJS.Timeout | null = null;
  /** Operations running or done, answered again from their run when re-sent (op-result-cache.ts). */
  private readonly ops = new OpResultCache<Outcome>();
  /** The last journaled operation of each stack: the next one on it waits for it (runJournaled). */
  private readonly stackTurns = new Map<string, Promise<void>>();
  private lastHello: HostMessage | null = null;
  /** The byte streams of the current connection (tunnels, file tars, exec's stdin and output). */
  private mux: StreamMux | null = null;
  private readonly options: SidecarOptions;
  /** The operations this host serves (operation-handlers.ts). */
  private readonly handlers: OperationHandlers;
  private readonly log: NonNullable<SidecarOptions["log"]>;
  /** Resolves once the first connection is welcomed (tests and `denv up` wait on it). */
  readonly ready: Promise<void>;
  private markReady!: () => void;

  constructor(options: SidecarOptions) {
    this.options = options;
    this.serverUrls = Array.isArray(options.serverUrl) ? options.serverUrl : [options.serverUrl];
    if (!this.serverUrls.length) throw new Error("denvd needs at least one server URL");
    this.log = options.log ?? (() => {});
    this.ready = new Promise((r) => {
      this.markReady = r;
    });
    this.handlers = operationHandlers(options.denvd, { openTunnel: (p, s) => this.openTunnel(p, s) });
  }

  start(): void {
    this.connect();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.ws?.close();
  }

  private wsUrl(): string {
    const u = new URL(this.serverUrls[this.urlIndex] as string);
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    u.pathname = "/v1/hosts/connect";
    return u.toString();
  }

  private connect(): void {
    if (this.stopped) return;
    const url = this.wsUrl();
    const ws = new WebSocket(url, {
      headers: { authorization: `Bearer ${this.options.secret}` },
      maxPayload: MAX_MESSAGE_BYTES,
      ...streamLinkMaskOptions(url),
    });
    this.ws = ws;
    const mux = new StreamMux((frame, done) => {
      if (ws.readyState !== WebSocket.OPEN) return done?.(new Error("the connection closed"));
      ws.send(frame, { binary: true }, done);
    });
    this.mux = mux;
    ws.on("open", async () => {
      this.backoffMs = 250;
      this.lastHello = await this.hello();
      this.send(this.lastHello);
      this.heartbeat = setInterval(async () => {
        this.send({ type: "heartbeat", capacity: await this.capacity() });
      }, HEARTBEAT_MS);
    });
    ws.on("message", (data, isBinary) => {
      if (isBinary) mux.onFrame(data as Buffer);
      else this.onMessage(data.toString());
    });
    ws.on("close", (code, reason) => {
      if (this.heartbeat) clearInterval(this.heartbeat);
      // Streams live on one connection: their operations fail with it (the server does not resend them).
      mux.closeAll();
      if (this.stopped) return;
      // Another replica first, at once; back off only once every one was tried.
      this.urlIndex = (this.urlIndex + 1) % this.serverUrls.length;
      const wait = this.urlIndex === 0 ? this.backoffMs : 250;
      if (this.urlIndex === 0) this.backoffMs = Math.min(this.backoffMs * 2, 10_000);
      // The server's reason (another protocol, a revoked host) is what its operator needs to read.
      this.log("Disconnected; reconnecting", {
        waitMs: wait,
        code,
        reason: reason.toString().slice(0, 300),
        next: this.serverUrls[this.urlIndex],
      });
      setTimeout(() => this.connect(), wait);
    });
    ws.on("error", (err) => this.log("Connection error", { error: err.message }));
  }

  private send(msg: HostMessage): void {
    if (this.ws?.readyState !== WebSocket.OPEN) return;
    let text = JSON.stringify(msg);
    if (msg.type === "result" && Buffer.byteLength(text) > MAX_MESSAGE_BYTES) {
      // Too large for the server to take: say so, instead of dropping the connection over it.
      text = JSON.stringify({
        type: "result",
        op_id: msg.op_id,
        ok: false,
        error: {
          code: "payload_too_large",
          message: `the answer is over ${MAX_MESSAGE_BYTES / 1024 ** 2} MiB once encoded; ask for less at a time`,
        },
      } satisfies HostMessage);
    }
    this.ws.send(text);
  }

  private async capacity() {
    const c = await this.options.denvd.storage.capacity();
    return {
      total_bytes: c.totalBytes,
      free_bytes: c.freeBytes,
      cpus: cpus().length,
      memory_bytes: totalmem(),
      // libuv reads MemAvailable: page cache the kernel can drop counts as free.
      memory_free_bytes: freemem(),
    };
  }

  private async hello(): Promise<HostMessage> {
    return {
      type: "hello",
      protocol: PROTOCOL_VERSION,
      arch: arch() === "x64" ? "x86_64" : arch() === "arm64" ? "aarch64" : arch(),
      storage: this.options.denvd.storage.kind,
      capacity: await this.capacity(),
      gpus: await this.options.denvd.gpus(),
      version: DENVD_VERSION,
      known_ops: this.ops.ids(),
    };
  }

  private onMessage(text: string): void {
    let msg: ServerMessage;
    try {
      msg = serverMessageSchema.parse(JSON.parse(text));
    } catch (err) {
      this.log("Ignored a malformed message", { error: (err as Error).message });
      return;
    }
    if (msg.type === "welcome") {
      this.log("Connected", { hostId: msg.host_id });
      if (this.lastHello)
        this.options.onWelcome?.(msg.host_id, this.lastHello, this.serverUrls[this.urlIndex] as string);
      this.markReady();
      return;
    }
    const opId = msg.op_id;
    if (this.ops.forgotten(opId)) {
      this.send({
        type: "result",
        op_id: opId,
        ok: false,
        error: {
          code: "unavailable",
          message: "this operation ran, but its result is no longer kept on the host; run it again",
        },
      });
      return;
    }
    let run = this.ops.get(opId);
    if (!run) {
      const { method, params } = msg;
      run = JOURNALED_OPS.has(method)
        ? this.runJournaled(opId, method, params)
        : this.perform(method, params, this.openStreams(method, params));
      this.ops.add(opId, run, (r) => JSON.stringify(r).length);
    }
    const started = performance.now();
    const { method } = msg;
    void run.then((r) => {
      // What changed the host, and every failure, is logged with the request and deployment the
      // server did it for (the server's log lines carry the same ids).
      if (JOURNALED_OPS.has(method) || !r.ok)
        this.log(r.ok ? "Operation done" : "Operation failed", {
          op: method,
          op_id: opId,
          ms: Math.round(performance.now() - started),
          ...(r.ok ? {} : { error: errorLine(r.error) }),
          ...msg.trace,
        });
      this.send({ type: "result", op_id: opId, ...r } as HostMessage);
    });
  }

  /**
   * An operation that changes engine state: written down before it acts and when it ends
   * (op-journal.ts), so that a re-send after this process died is answered from its outcome, or
   * run anew once the next open undid what it had made; never run twice over.
   */
  private async runJournaled(
    opId: string,
    method: OpMethod,
    params: Record<string, unknown>,
  ): Promise<Outcome> {
    const { journal } = this.options.denvd;
    const prior = await journal.get(opId);
    if (prior?.status === "done" && prior.outcome) return prior.outcome;
    const stackId = typeof params.stack_id === "string" ? params.stack_id : undefined;
    // One change at a time per stack: a server restarted mid-rollback finishes it with a rollback
    // of its own, and a destroy sent after a fork's deadline must wait for that fork to end.
    const key = stackId ?? (typeof params.new_stack_id === "string" ? params.new_stack_id : undefined);
    if (!key) return this.runWritten(opId, method, params, undefined);
    const prev = this.stackTurns.get(key) ?? Promise.resolve();
    const turn = prev.then(() => this.runWritten(opId, method, params, stackId));
    const tail = turn.then(
      () => {},
      () => {},
    );
    this.stackTurns.set(key, tail);
    void tail.then(() => {
      if (this.stackTurns.get(key) === tail) this.stackTurns.delete(key);
    });
    return turn;
  }

  private async runWritten(
    opId: string,
    method: OpMethod,
    params: Record<string, unknown>,
    stackId: string | undefined,
  ): Promise<Outcome> {
    const { journal } = this.options.denvd;
    let entry: OpEntry;
    try {
      entry = await journal.begin({
        opId,
        method,
        params,
        ...(stackId
          ? { stackVersionId: this.options.denvd.stacks().find((x) => x.id === stackId)?.versionId ?? null }
          : {}),
      });
    } catch (err) {
      // Not written down, not run: acting without the record is what a restart could not settle.
      if (err instanceof DenvError)
        return { ok: false, error: { code: err.code, message: `${method}: ${err.message}` } };
      this.log("Could not write the operation down", { op: method, error: (err as Error).message });
      return {
        ok: false,
        error: {
          code: "unavailable",
          message: `the host could not record ${method} before running it; its log has the details`,
        },
      };
    }
    const outcome = await this.perform(method, params, new Map());
    await journal
      .finish(entry, outcome)
      .catch((err: Error) =>
        this.log("Could not write the operation's outcome", { op: method, error: err.message }),
      );
    return outcome;
  }

  /** Runs an operation's handler and turns its end into the answer sent to the server. */
  private perform(
    method: OpMethod,
    params: Record<string, unknown>,
    streams: Map<number, MuxStream>,
  ): Promise<Outcome> {
    return performOperation(this.handlers, method, params, {
      get: (id) => {
        const s = streams.get(id);
        if (!s) throw new DenvError("invalid_argument", `stream ${id} was not opened for ${method}`);
        return s;
      },
    }).then(
      (result): Outcome => {
        if (method !== "open_tunnel") for (const s of streams.values()) void finishStream(s);
        return { ok: true, result };
      },
      (err: unknown): Outcome => {
        // A failed operation's streams are cut, not ended: a half-sent tar must not look whole.
        for (const s of streams.values()) s.destroy();
        if (err instanceof DenvError)
          return { ok: false, error: { code: err.code, message: err.message, details: err.details } };
        // Anything else is a fault of denvd's own (a file, a system call): its words, with host
        // paths in them, stay in the host's log.
        this.log("Operation failed", { op: method, error: (err as Error).message });
        return {
          ok: false,
          error: {
            code: "internal",
            message: `the host could not finish ${method}; its log has the details`,
          },
        };
      },
    );
  }

  /**
   * The streams an operation names, opened now: its first frames may follow it at once. An id
   * already in use is not taken over (the operation then fails when it asks for it).
   */
  private openStreams(method: OpMethod, params: Record<string, unknown>): Map<number, MuxStream> {
    const streams = new Map<number, MuxStream>();
    const mux = this.mux;
    for (const key of operationStreams(method)) {
      const id = params[key];
      if (!mux || typeof id !== "number" || !Number.isInteger(id) || id < 1 || id > 0xffffffff) continue;
      if (mux.has(id) || streams.has(id)) continue;
      const s = mux.open(id);
      // Failures show in the operation's result; the stream's own error is only its end.
      s.on("error", () => {});
      streams.set(id, s);
    }
    return streams;
  }

  /** A port in a service, relayed both ways over a stream, each side waiting for the other's reader. */
  private async openTunnel(
    p: OpCheckedParams<"open_tunnel">,
    stream: Duplex,
  ): Promise<Record<string, never>> {
    const sock = await this.options.denvd.openPort(p.stack_id, p.service, p.port);
    sock.on("error", () => {});
    stream.pipe(sock);
    sock.pipe(stream);
    sock.on("close", () => stream.destroy());
    stream.on("close", () => sock.destroy());
    sock.resume();
    return {};
  }
}

/** `denvd join`: trades a single-use join token for this host's id and secret. */
export async function joinServer(
  serverUrl: string,
  token: string,
  name: string,
): Promise<{ host_id: string; secret: string }> {
  let res: Response;
  try {
    res = await fetch(new URL("/v1/hosts/join", serverUrl), {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token, name }),
      signal: AbortSignal.timeout(15_000),
    });
  } catch (err) {
    throw new DenvError("unavailable", `cannot reach the server at ${serverUrl}: ${(err as Error).message}`);
  }
  const body = (await res.json().catch(() => ({}))) as {
    host_id?: string;
    secret?: string;
    error?: { code: string; message: string };
  };
  if (!res.ok || !body.host_id || !body.secret) {
    throw new DenvError(
      "unauthenticated",
      body.error?.message ?? `the server refused the join (HTTP ${res.status})`,
    );
  }
  return { host_id: body.host_id, secret: body.secret };
}
