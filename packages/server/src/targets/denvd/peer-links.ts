/**
 * Calls for a host whose connection another replica holds. A replica dials the holder's
 * `/v1/replicas/link` (a WebSocket on the API's own port: no new service) and sends the operation
 * there; the holder runs it on its hub and answers. Byte streams (exec's output, file tars, port
 * tunnels, snapshots) travel as stream frames on the link with the same per-stream credit as a
 * host's connection (@denv/protocol stream-mux.ts), spliced to the host's streams at the holder:
 * memory stays a window per stream at each hop.
 *
 * Trust: a link can run any operation on any host the holder has, so only replicas may open one.
 * The key is derived from the secret key every replica must share anyway (it seals what the store
 * keeps), and is compared in constant time; it is never stored.
 */
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import {
  DenvError,
  ERROR_CODES,
  type ErrorCode,
  isDenvError,
  MAX_MESSAGE_BYTES,
  type MuxStream,
  OPERATIONS,
  type OpMethod,
  operationStreams,
  StreamMux,
  streamLinkMaskOptions,
} from "@denv/protocol";
import { WebSocket, WebSocketServer } from "ws";
import { z } from "zod";
import { newId } from "../../ids.ts";
import { constantTimeEqual } from "../../replicas/link-key.ts";
import { currentTrace, withTrace } from "../../server-log.ts";
import type { HostConnections } from "./host-connections.ts";

export const LINK_PATH = "/v1/replicas/link";
/** A link silent for this long (no pong) is taken for dead; its calls fail and are routed again. */
const LINK_PING_MS = 5000;
/** How long the holder waits for a call's streams to drain to the link before it answers. */
const DRAIN_WAIT_MS = 30_000;

const idText = z.string().min(1).max(120);
const linkCallSchema = z.object({
  type: z.literal("call"),
  id: idText,
  host_id: idText,
  method: z.string().refine((m) => m in OPERATIONS, "not an operation"),
  params: z.unknown(),
  op_id: idText,
  timeout_ms: z.number().int().positive().optional(),
  wait_for_host_ms: z.number().int().nonnegative().optional(),
  /** The link's stream ids named in params, in order; the holder opens as many on the host. */
  streams: z.array(z.number().int().min(1).max(0xffffffff)).max(16).optional(),
  streams_outlive_op: z.boolean().optional(),
  trace: z.object({ request_id: idText.optional(), deployment_id: idText.optional() }).optional(),
});
type LinkCall = z.infer<typeof linkCallSchema>;

const linkAnswerSchema = z.object({
  type: z.literal("answer"),
  id: idText,
  ok: z.boolean(),
  result: z.unknown().optional(),
  error: z
    .object({ code: z.string(), message: z.string(), details: z.record(z.string(), z.unknown()).optional() })
    .optional(),
});
type LinkAnswer = z.infer<typeof linkAnswerSchema>;

export interface CallOptions {
  opId: string;
  timeoutMs?: number;
  waitForHostMs?: number;
  streamsOutliveOp?: boolean;
}

/** One replica's outbound link to another: its calls and their streams. */
class PeerLink {
  readonly mux: StreamMux;
  private nextStreamId = 0;
  private readonly pending = new Map<string, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private alive = true;
  closed = false;
  private readonly ws: WebSocket;

  constructor(ws: WebSocket) {
    this.ws = ws;
    this.mux = new StreamMux((frame, done) => {
      if (ws.readyState !== ws.OPEN) return done?.(new Error("the link to the replica closed"));
      ws.send(frame, { binary: true }, done);
    });
    ws.on("message", (data, isBinary) => {
      if (isBinary) return this.mux.onFrame(data as Buffer);
      let a: LinkAnswer;
      try {
        a = linkAnswerSchema.parse(JSON.parse(data.toString()));
      } catch {
        return ws.close(4400, "malformed answer");
      }
      const p = this.pending.get(a.id);
      if (!p) return;
      this.pending.delete(a.id);
      if (a.ok) p.resolve(a.result);
      else {
        const code = (a.error?.code ?? "internal") as ErrorCode;
        p.reject(
          new DenvError(code in ERROR_CODES ? code : "internal", a.error?.message ?? "the call failed", {
            details: a.error?.details,
          }),
        );
      }
    });
    ws.on("pong", () => {
      this.alive = true;
    });
    const ping = setInterval(() => {
      if (!this.alive) return ws.terminate();
      this.alive = false;
      ws.ping();
    }, LINK_PING_MS);
    ping.unref();
    ws.on("close", () => {
      clearInterval(ping);
      this.closed = true;
      this.mux.closeAll();
      for (const p of this.pending.values())
        p.reject(linkDown("the replica holding the host's connection went away"));
      this.pending.clear();
    });
    ws.on("error", () => {});
  }

  /** Opens streams on the link (their ids for the call's params) before the call is sent. */
  openStreams(count: number): MuxStream[] {
    return Array.from({ length: count }, () => {
      this.nextStreamId = this.nextStreamId >= 0xffffffff ? 1 : this.nextStreamId + 1;
      const s = this.mux.open(this.nextStreamId);
      s.on("error", () => {});
      return s;
    });
  }

  call(
    hostId: string,
    method: OpMethod,
    params: unknown,
    options: CallOptions,
    streams: MuxStream[] = [],
  ): Promise<unknown> {
    if (this.closed) return Promise.reject(linkDown("the link to the host's replica is closed"));
    const trace = currentTrace();
    const msg: LinkCall = {
      type: "call",
      id: newId("lc"),
      host_id: hostId,
      method,
      params,
      op_id: options.opId,
      ...(options.timeoutMs ? { timeout_ms: options.timeoutMs } : {}),
      ...(options.waitForHostMs !== undefined ? { wait_for_host_ms: options.waitForHostMs } : {}),
      ...(streams.length ? { streams: streams.map((s) => s.streamId) } : {}),
      ...(options.streamsOutliveOp ? { streams_outlive_op: true } : {}),
      ...(trace ? { trace } : {}),
    };
    const text = JSON.stringify(msg);
    if (Buffer.byteLength(text) > MAX_MESSAGE_BYTES)
      return Promise.reject(new DenvError("payload_too_large", `the ${method} request is too large to send`));
    return new Promise((resolve, reject) => {
      this.pending.set(msg.id, { resolve, reject });
      this.ws.send(text);
    });
  }

  close(): void {
    this.ws.terminate();
  }
}

export interface PeerLinksOptions {
  /** This replica's hub: calls from peers run on it. */
  hub: HostConnections;
  /** The link key every replica derives from the shared secret key. */
  key: string;
}

export class PeerLinks {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES });
  private readonly links = new Map<string, Promise<PeerLink>>();
  private readonly served = new Set<WebSocket>();
  private readonly options: PeerLinksOptions;

  constructor(options: PeerLinksOptions) {
    this.options = options;
  }

  /** The key replicas present to each other. */
  get key(): string {
    return this.options.key;
  }

  /** A peer's link upgrade on LINK_PATH (its key checked). */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const key = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1] ?? "";
    if (!constantTimeEqual(key, this.options.key)) {
      socket.end("HTTP/1.1 401 Unauthorized\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.serve(ws));
  }

  /** The link to a replica, opened on first use and again after it dropped. */
  async to(replica: { id: string; url: string }): Promise<{
    call: PeerLink["call"];
    openStreams: PeerLink["openStreams"];
  }> {
    const cached = this.links.get(replica.id);
    if (cached) {
      const link = await cached.catch(() => null);
      if (link && !link.closed) return link;
      this.links.delete(replica.id);
    }
    const opening = new Promise<PeerLink>((resolve, reject) => {
      const u = new URL(LINK_PATH, replica.url);
      u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
      const ws = new WebSocket(u, {
        headers: { authorization: `Bearer ${this.options.key}` },
        maxPayload: MAX_MESSAGE_BYTES,
        handshakeTimeout: 10_000,
        ...streamLinkMaskOptions(u),
      });
      ws.once("open", () => resolve(new PeerLink(ws)));
      ws.once("error", (err) => reject(linkDown(`the host's replica cannot be reached: ${err.message}`)));
    });
    this.links.set(replica.id, opening);
    opening.catch(() => this.links.delete(replica.id));
    return opening;
  }

  private serve(ws: WebSocket): void {
    this.served.add(ws);
    const mux = new StreamMux((frame, done) => {
      if (ws.readyState !== ws.OPEN) return done?.(new Error("the link closed"));
      ws.send(frame, { binary: true }, done);
    });
    const answer = (a: LinkAnswer) => {
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(a));
    };
    ws.on("message", (data, isBinary) => {
      if (isBinary) return mux.onFrame(data as Buffer);
      let msg: LinkCall;
      try {
        msg = linkCallSchema.parse(JSON.parse(data.toString()));
      } catch {
        return ws.close(4400, "malformed call");
      }
      // Opened now, before the next frame is read: bytes the caller sends at once are kept.
      let streams: MuxStream[];
      try {
        streams = (msg.streams ?? []).map((id) => {
          const s = mux.open(id);
          s.on("error", () => {});
          return s;
        });
      } catch (err) {
        return answer({ type: "answer", id: msg.id, ok: false, error: errorOf(err) });
      }
      void withTrace(msg.trace ?? {}, () => this.run(msg, streams)).then(
        (result) => answer({ type: "answer", id: msg.id, ok: true, result }),
        (err) => {
          for (const s of streams) s.destroy();
          answer({ type: "answer", id: msg.id, ok: false, error: errorOf(err) });
        },
      );
    });
    ws.on("close", () => {
      this.served.delete(ws);
      mux.closeAll();
    });
    ws.on("error", () => {});
  }

  private async run(msg: LinkCall, linkStreams: MuxStream[]): Promise<unknown> {
    const method = msg.method as OpMethod;
    const hub = this.options.hub;
    const options = {
      opId: msg.op_id,
      ...(msg.timeout_ms ? { timeoutMs: msg.timeout_ms } : {}),
      ...(msg.wait_for_host_ms !== undefined ? { waitForHostMs: msg.wait_for_host_ms } : {}),
    };
    if (!linkStreams.length) return hub.call(msg.host_id, method, msg.params as never, options);
    const linkIds = msg.streams ?? [];
    const names = operationStreams(method);
    const { streams, result } = await hub.streamCall(
      msg.host_id,
      method,
      linkStreams.length,
      (hostIds) => {
        // The caller named its link streams; the host is told the ids of the streams opened to it.
        const params = { ...(msg.params as Record<string, unknown>) };
        for (const name of names) {
          const i = linkIds.indexOf(params[name] as number);
          if (i >= 0) params[name] = hostIds[i];
        }
        return params as never;
      },
      { ...options, streamsOutliveOp: msg.streams_outlive_op ?? false },
    );
    for (const [i, s] of streams.entries()) splice(linkStreams[i] as MuxStream, s);
    const r = await result;
    // The host closed its streams before it answered; the answer waits for them to reach the link.
    if (!msg.streams_outlive_op) await drained(linkStreams);
    return r;
  }

  close(): void {
    for (const l of this.links.values())
      void l.then(
        (x) => x.close(),
        () => {},
      );
    this.links.clear();
    for (const ws of this.served) ws.terminate();
    this.wss.close();
  }
}

/** The link to a replica failed (not the host): the call may be routed again elsewhere. */
function linkDown(message: string): DenvError {
  return new DenvError("host_unavailable", message, { details: { replica_link: "down" } });
}

export function isLinkDown(err: unknown): boolean {
  return isDenvError(err) && err.details?.replica_link === "down";
}

function errorOf(err: unknown): NonNullable<LinkAnswer["error"]> {
  if (isDenvError(err))
    return { code: err.code, message: err.message, ...(err.details ? { details: err.details } : {}) };
  return { code: "internal", message: (err as Error)?.message ?? String(err) };
}

/** Joins two byte streams both ways; one closing ends the other once what it wrote is out. */
export function splice(a: Duplex, b: Duplex): void {
  a.pipe(b);
  b.pipe(a);
  const follow = (from: Duplex, to: Duplex) =>
    from.once("close", () => {
      if (to.destroyed) return;
      if (!from.readableEnded) return void to.destroy();
      if (to.writableFinished) to.destroy();
      else to.once("finish", () => to.destroy());
    });
  follow(a, b);
  follow(b, a);
}

function drained(streams: Duplex[]): Promise<void> {
  return new Promise((resolve) => {
    let left = streams.filter((s) => !s.destroyed).length;
    if (!left) return resolve();
    const t = setTimeout(resolve, DRAIN_WAIT_MS);
    for (const s of streams)
      if (!s.destroyed)
        s.once("close", () => {
          if (--left === 0) {
            clearTimeout(t);
            resolve();
          }
        });
  });
}
