/**
 * The WebSocket hub the sidecars dial into. A host authenticates with its per-host secret, says
 * hello (arch, storage, capacity, version), heartbeats, and runs the operations sent to it. An
 * operation waiting on a host that dropped is sent again when it reconnects, under the same id; a
 * host that stays away fails it within seconds (host_unavailable) instead of leaving it hanging.
 *
 * Invariant (DESIGN, trust boundaries): a host's messages can only touch that host's operations
 * and streams. Hosts belong to teams and any team can connect one, so every host is untrusted
 * toward every other: a result or event is taken only for an operation sent to the host that
 * answers; stream frames are looked up in the table of the connection they arrive on (stream ids
 * are per connection), so no id a hostile host sends can reach another host's streams. Bytes
 * (tunnels, files, exec's stdin and output) travel as stream frames with per-stream credit
 * (@denv/protocol stream-mux.ts): a host cannot make the server hold more than a window per stream,
 * and a window grows past its first 64 KiB only within its team's budget (TEAM_STREAM_BUDGET_BYTES),
 * so a team's streams whose readers stopped hold a bounded amount however many it opens.
 */
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import {
  DenvError,
  ERROR_CODES,
  type ErrorCode,
  type HostMessage,
  hostMessageSchema,
  MAX_MESSAGE_BYTES,
  type MuxStream,
  OPERATIONS,
  type OpMethod,
  type OpParams,
  type OpResult,
  operationDeadlineMs,
  PROTOCOL_VERSION,
  type ServerMessage,
  StreamMux,
  WindowBudget,
} from "@denv/protocol";
import { type WebSocket, WebSocketServer } from "ws";
import { newId, now } from "../../ids.ts";
import { currentTrace, serverLog } from "../../server-log.ts";
import { hostBySecret, hostDisconnected, updateHost } from "../../store/host-store.ts";
import type { Store } from "../../store/open-store.ts";
import { type HostOperations, tunnelStream } from "./host-operations.ts";

interface PendingOp {
  opId: string;
  hostId: string;
  /** Set for an operation with streams: it lives and dies with this one connection. */
  conn: Connection | null;
  method: OpMethod;
  text: string;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
  /** Runs while the host is away; when it fires the operation fails with host_unavailable. */
  awayTimer: NodeJS.Timeout | null;
  /** How long this operation waits for an absent host. */
  waitForHostMs: number;
  /** Connections the operation was sent on; each that dropped before answering counts. */
  sends: number;
}

/** One connected host: its socket and the byte streams opened on that connection. */
interface Connection {
  ws: WebSocket;
  mux: StreamMux;
  nextStreamId: number;
  helloed: boolean;
  /** Its hello is recorded (arch, storage, capacity): only now does placement count it connected. */
  ready: boolean;
  lastHeartbeatWrite: number;
}

export interface HostHubOptions {
  /** How long a call waits for a host that is not connected, or that dropped mid-operation. */
  waitForHostMs?: number;
  /** This server replica: written as the holder of each host that connects here (replicas/). */
  replicaId?: string;
}

/**
 * What one team's streams from its hosts may hold beyond their initial windows, together: a full
 * window (8 MiB) each for 32 streams read at full speed at once; more streams share it.
 */
export const TEAM_STREAM_BUDGET_BYTES = 256 * 1024 * 1024;

/** A host that drops its connection this many times while one operation runs fails it. */
const MAX_SENDS = 3;
/** Heartbeats refresh last_seen at most this often per host (a host cannot flood the store). */
const HEARTBEAT_WRITE_MS = 2000;

export class HostHub implements HostOperations {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES });
  private readonly connections = new Map<string, Connection>();
  private readonly pending = new Map<string, PendingOp>();
  private readonly waiters = new Map<string, (() => void)[]>();
  private readonly readyListeners: ((hostId: string) => void)[] = [];
  private readonly store: Store;
  private readonly waitForHostMs: number;
  private readonly replicaId: string | null;
  /** Each team's budget for the windows of the streams its hosts send on (shared by its hosts). */
  private readonly budgets = new Map<string, WindowBudget>();

  constructor(store: Store, options: HostHubOptions = {}) {
    this.store = store;
    this.waitForHostMs = options.waitForHostMs ?? 10_000;
    this.replicaId = options.replicaId ?? null;
  }

  /** Handles an HTTP upgrade on /v1/hosts/connect; anything else is refused. */
  async handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const refuse = (status: number, text: string) => {
      socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    };
    if (!req.url?.startsWith("/v1/hosts/connect")) return refuse(404, "Not Found");
    const secret = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
    const host = secret ? await hostBySecret(this.store, secret) : undefined;
    if (!host) return refuse(401, "Unauthorized");
    this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(host.id, host.team_id, ws));
  }

  private accept(hostId: string, teamId: string, ws: WebSocket): void {
    this.connections.get(hostId)?.ws.close(4000, "replaced by a newer connection");
    let budget = this.budgets.get(teamId);
    if (!budget) {
      budget = new WindowBudget(TEAM_STREAM_BUDGET_BYTES);
      this.budgets.set(teamId, budget);
    }
    const conn: Connection = {
      ws,
      mux: new StreamMux((frame, done) => {
        if (ws.readyState !== ws.OPEN) return done?.(new Error("the host disconnected"));
        ws.send(frame, { binary: true }, done);
      }, budget),
      nextStreamId: 1,
      helloed: false,
      ready: false,
      lastHeartbeatWrite: 0,
    };
    this.connections.set(hostId, conn);
    ws.on("message", (data, isBinary) => {
      if (isBinary) conn.mux.onFrame(data as Buffer);
      else void this.onMessage(hostId, conn, data.toString()).catch(() => {});
    });
    ws.on("close", () => {
      conn.mux.closeAll();
      // An operation with streams cannot be sent again (its bytes went with the connection).
      for (const p of this.pending.values())
        if (p.conn === conn) {
          this.settle(p.opId, p);
          p.reject(
            new DenvError(
              "host_unavailable",
              `the host's connection dropped during ${p.method}; nothing was retried, run it again`,
            ),
          );
        }
      if (this.connections.get(hostId) !== conn) return;
      this.connections.delete(hostId);
      if (conn.helloed) serverLog().info({ host_id: hostId }, "host disconnected");
      // What was sent on this connection waits for the host to come back, for a while.
      for (const p of this.pending.values()) if (p.hostId === hostId) this.awaitHost(p);
      // Unless the host already said hello to another replica: that one holds it now.
      void hostDisconnected(this.store, hostId, this.replicaId).catch(() => {});
    });
  }

  private async onMessage(hostId: string, conn: Connection, text: string): Promise<void> {
    let msg: HostMessage;
    try {
      msg = hostMessageSchema.parse(JSON.parse(text));
    } catch {
      conn.ws.close(4400, "malformed message");
      return;
    }
    if (msg.type === "hello") {
      if (conn.helloed) {
        conn.ws.close(4400, "hello twice on one connection");
        return;
      }
      if (msg.protocol !== PROTOCOL_VERSION) {
        // What `denv host list` shows for it: the version it runs, and not connected.
        await updateHost(this.store, hostId, { version: msg.version, last_seen: now(), connected: 0 });
        conn.ws.close(
          4426,
          `denvd speaks protocol ${msg.protocol}, this server ${PROTOCOL_VERSION}: upgrade it (the installer upgrades in place)`,
        );
        return;
      }
      conn.helloed = true;
      await updateHost(this.store, hostId, {
        arch: msg.arch,
        storage: msg.storage,
        capacity_json: JSON.stringify(msg.capacity),
        gpus_json: msg.gpus ? JSON.stringify(msg.gpus) : null,
        version: msg.version,
        last_seen: now(),
        connected: 1,
        replica_id: this.replicaId,
      });
      conn.ready = true;
      serverLog().info(
        { host_id: hostId, version: msg.version, arch: msg.arch, storage: msg.storage },
        "host connected",
      );
      this.sendText(conn.ws, JSON.stringify({ type: "welcome", host_id: hostId } satisfies ServerMessage));
      // Operations sent before the drop go again, under the same ids.
      for (const p of this.pending.values()) if (p.hostId === hostId && !p.conn) this.send(p, conn);
      for (const w of this.waiters.get(hostId) ?? []) w();
      this.waiters.delete(hostId);
      for (const l of this.readyListeners) l(hostId);
    } else if (msg.type === "heartbeat") {
      const t = Date.now();
      if (t - conn.lastHeartbeatWrite < HEARTBEAT_WRITE_MS) return;
      conn.lastHeartbeatWrite = t;
      await updateHost(this.store, hostId, {
        last_seen: now(),
        ...(msg.capacity ? { capacity_json: JSON.stringify(msg.capacity) } : {}),
      });
    } else {
      const p = this.pending.get(msg.op_id);
      if (p?.hostId !== hostId) return;
      this.settle(msg.op_id, p);
      if (msg.ok) {
        // Checked against the operation's result schema: a host's answer is input like any other.
        const checked = OPERATIONS[p.method].result.safeParse(msg.result);
        if (checked.success) p.resolve(checked.data);
        else {
          const issue = checked.error.issues[0];
          p.reject(
            new DenvError(
              "unavailable",
              `the host answered ${p.method} in a shape this server does not know (${issue?.path.join(".") || "result"}: ${issue?.message ?? "invalid"}); check that its denvd is this server's version`,
            ),
          );
        }
      } else {
        const code = (msg.error?.code ?? "internal") as ErrorCode;
        p.reject(
          new DenvError(
            code in ERROR_CODES ? code : "internal",
            msg.error?.message ?? "the host reported a failure",
            {
              details: (msg.error?.details as Record<string, unknown> | undefined) ?? undefined,
            },
          ),
        );
      }
    }
  }

  /**
   * Runs an operation that moves bytes: opens `count` streams on the host's connection, builds the
   * params from their ids, and sends it on that connection only (it is not sent again on another:
   * its bytes went with the first). Resolves once sent, with the streams and the result to come.
   * The host closes its streams before it answers; one still open when the answer comes is failed
   * (unless `streamsOutliveOp`, as a tunnel's do).
   */
  async streamCall<M extends OpMethod>(
    hostId: string,
    method: M,
    count: number,
    build: (ids: number[]) => OpParams<M>,
    options: { opId?: string; timeoutMs?: number; waitForHostMs?: number; streamsOutliveOp?: boolean } = {},
  ): Promise<{ streams: MuxStream[]; result: Promise<OpResult<M>> }> {
    const waitMs = options.waitForHostMs ?? this.waitForHostMs;
    if (waitMs > 0) await this.waitConnected(hostId, waitMs);
    const conn = this.connections.get(hostId);
    if (!conn?.helloed) throw new DenvError("host_unavailable", "the environment's host is not connected");
    const ids = Array.from({ length: count }, () => {
      conn.nextStreamId = conn.nextStreamId >= 0xffffffff ? 1 : conn.nextStreamId + 1;
      return conn.nextStreamId;
    });
    // Registered before the host is asked, so bytes it sends right away are kept.
    const opId = options.opId ?? newId("op");
    const streams = ids.map((id) => {
      const s = conn.mux.open(id);
      // A cut stream is reported by its operation's result and to whoever reads it; with no reader
      // (a request that already failed) it must not become an uncaught error.
      s.on("error", () => {
        // A host that broke the stream protocol is not waited on for an answer.
        if (s.violated)
          this.fail(
            opId,
            new DenvError(
              "unavailable",
              `the host broke the stream protocol during ${method} (it sent past its window)`,
            ),
          );
      });
      return s;
    });
    const result = this.call(hostId, method, build(ids), { ...options, opId, conn });
    if (!options.streamsOutliveOp) {
      const sweep = () => {
        for (const s of streams)
          if (conn.mux.has(s.streamId)) s.destroy(new Error(`the host left a stream of ${method} open`));
      };
      result.then(sweep, sweep);
    }
    result.catch(() => {});
    return { streams, result };
  }

  /**
   * A byte stream to a port inside an environment's service, carried over the host's WebSocket
   * (denvd listens on no port, and the container needs no address the host can route to).
   */
  async openTunnel(
    hostId: string,
    params: { stack_id: string; service?: string | undefined; port: number },
    options?: { early?: boolean },
  ): Promise<Duplex> {
    const { streams, result } = await this.streamCall(
      hostId,
      "open_tunnel",
      1,
      ([id]) => ({ ...params, stream_id: id as number }),
      { timeoutMs: 30_000, waitForHostMs: 0, streamsOutliveOp: true },
    );
    return tunnelStream(streams[0] as MuxStream, result, options?.early === true);
  }

  private sendText(ws: WebSocket, text: string): void {
    if (ws.readyState === ws.OPEN) ws.send(text);
  }

  /** Sends an operation on a connection; a host that keeps dropping while it runs fails it. */
  private send(p: PendingOp, conn: Connection): void {
    if (p.awayTimer) clearTimeout(p.awayTimer);
    p.awayTimer = null;
    p.sends++;
    this.sendText(conn.ws, p.text);
  }

  /** The host is away: the operation waits for it for a while, then fails. */
  private awaitHost(p: PendingOp): void {
    if (p.awayTimer) return;
    const fail = (message: string) => {
      this.settle(p.opId, p);
      p.reject(new DenvError("host_unavailable", message));
    };
    if (p.sends >= MAX_SENDS) {
      fail(
        `the environment's host dropped its connection ${p.sends} times while running ${p.method}; check the host (denv host list) and try again`,
      );
      return;
    }
    p.awayTimer = setTimeout(
      () =>
        fail(
          `the environment's host is not connected (waited ${Math.round(p.waitForHostMs / 1000)} s for ${p.method}); check it with denv host list`,
        ),
      p.waitForHostMs,
    );
  }

  /** Fails an operation still waiting for its answer. */
  private fail(opId: string, err: Error): void {
    const p = this.pending.get(opId);
    if (!p) return;
    this.settle(opId, p);
    p.reject(err);
  }

  private settle(opId: string, p: PendingOp): void {
    this.pending.delete(opId);
    clearTimeout(p.timer);
    if (p.awayTimer) clearTimeout(p.awayTimer);
    p.awayTimer = null;
  }

  /** Called each time a host says hello (first connection and every reconnect). */
  onHostReady(listener: (hostId: string) => void): void {
    this.readyListeners.push(listener);
  }

  isConnected(hostId: string): boolean {
    // A socket whose hello is not recorded yet has no capacity on record: a placement reading it
    // would take it for a full host.
    return this.connections.get(hostId)?.ready === true;
  }

  /** Resolves when the host is connected, or rejects after timeoutMs. */
  waitConnected(hostId: string, timeoutMs: number): Promise<void> {
    if (this.connections.get(hostId)?.helloed) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(new DenvError("host_unavailable", `host ${hostId} did not connect within ${timeoutMs} ms`)),
        timeoutMs,
      );
      const list = this.waiters.get(hostId) ?? [];
      list.push(() => {
        clearTimeout(timer);
        resolve();
      });
      this.waiters.set(hostId, list);
    });
  }

  /**
   * Runs an operation on a host and resolves to its result. Sent now if the host is connected;
   * otherwise it waits up to waitForHostMs for the host (default 10 s) and fails with
   * host_unavailable. The id stays the same across reconnects, so the host runs it at most once.
   */
  call<M extends OpMethod>(
    hostId: string,
    method: M,
    params: OpParams<M>,
    options: {
      opId?: string;
      timeoutMs?: number;
      /** How long to wait for an absent host before failing (background work waits longer). */
      waitForHostMs?: number;
      /** @internal The one connection an operation with streams goes on (streamCall). */
      conn?: Connection;
    } = {},
  ): Promise<OpResult<M>> {
    const opId = options.opId ?? newId("op");
    // The request and deployment it is done for: the host's log lines name them.
    const trace = currentTrace();
    const text = JSON.stringify({
      type: "op",
      op_id: opId,
      method,
      params,
      ...(trace ? { trace } : {}),
    } satisfies ServerMessage);
    if (Buffer.byteLength(text) > MAX_MESSAGE_BYTES) {
      return Promise.reject(
        new DenvError(
          "payload_too_large",
          `the ${method} request is over ${MAX_MESSAGE_BYTES / 1024 ** 2} MiB once encoded for the host; send less at a time`,
        ),
      );
    }
    return new Promise<OpResult<M>>((resolve, reject) => {
      const timeoutMs = options.timeoutMs ?? operationDeadlineMs(method);
      const timer = setTimeout(() => {
        const p = this.pending.get(opId);
        if (p) this.settle(opId, p);
        reject(new DenvError("timeout", `the host did not finish ${method} within ${timeoutMs} ms`));
      }, timeoutMs);
      const p: PendingOp = {
        opId,
        hostId,
        method,
        text,
        resolve: resolve as (v: unknown) => void,
        reject,
        timer,
        awayTimer: null,
        waitForHostMs: options.waitForHostMs ?? this.waitForHostMs,
        sends: 0,
        conn: options.conn ?? null,
      };
      this.pending.set(opId, p);
      if (options.conn) {
        if (this.connections.get(hostId) === options.conn) this.send(p, options.conn);
        else {
          this.settle(opId, p);
          reject(
            new DenvError("host_unavailable", `the host's connection dropped before ${method} was sent`),
          );
        }
        return;
      }
      const conn = this.connections.get(hostId);
      if (conn?.helloed) this.send(p, conn);
      else this.awaitHost(p);
    });
  }

  connectedCount(): number {
    return this.connections.size;
  }

  close(): void {
    for (const c of this.connections.values()) c.ws.terminate();
    for (const [id, p] of this.pending) {
      this.settle(id, p);
      p.reject(new DenvError("unavailable", "the server is shutting down"));
    }
    this.pending.clear();
    this.wss.close();
  }
}
