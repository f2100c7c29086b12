/**
 * The WebSocket hub the sidecars dial into. A host authenticates with its per-host secret, says
 * hello (arch, storage, capacity, version), heartbeats, and runs the operations sent to it. An
 * operation waiting on a host that dropped is sent again when it reconnects, under the same id.
 */
import type { IncomingMessage } from "node:http";
import { Duplex } from "node:stream";
import {
  decodeTunnelFrame,
  encodeTunnelFrame,
  type HostMessage,
  hostMessageSchema,
  type OpMethod,
  type ServerMessage,
  TUNNEL_CLOSE,
  TUNNEL_DATA,
  TUNNEL_END,
} from "@denv/protocol";
import { DenvError, ERROR_CODES, type ErrorCode } from "@denv/spec";
import { type WebSocket, WebSocketServer } from "ws";
import { hashSecret, newId, now } from "./ids.ts";
import type { Store } from "./store/open-store.ts";

interface PendingOp {
  onEvent?: ((stream: "stdout" | "stderr", data: Buffer) => void) | undefined;
  hostId: string;
  message: Extract<ServerMessage, { type: "op" }>;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

export class HostHub {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: 256 * 1024 * 1024 });
  private readonly sockets = new Map<string, WebSocket>();
  private readonly pending = new Map<string, PendingOp>();
  private readonly waiters = new Map<string, (() => void)[]>();
  private readonly tunnels = new Map<number, { hostId: string; stream: Duplex }>();
  private nextStreamId = 1;
  private readonly store: Store;

  constructor(store: Store) {
    this.store = store;
  }

  /** Handles an HTTP upgrade on /v1/hosts/connect; anything else is refused. */
  async handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const refuse = (status: number, text: string) => {
      socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    };
    if (!req.url?.startsWith("/v1/hosts/connect")) return refuse(404, "Not Found");
    const secret = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
    const host = secret
      ? await this.store
          .selectFrom("hosts")
          .selectAll()
          .where("secret_hash", "=", hashSecret(secret))
          .executeTakeFirst()
      : undefined;
    if (!host) return refuse(401, "Unauthorized");
    this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(host.id, ws));
  }

  private accept(hostId: string, ws: WebSocket): void {
    this.sockets.get(hostId)?.close(4000, "replaced by a newer connection");
    this.sockets.set(hostId, ws);
    ws.on("message", (data, isBinary) => {
      if (isBinary) this.onTunnelFrame(data as Buffer);
      else void this.onMessage(hostId, ws, data.toString()).catch(() => {});
    });
    ws.on("close", () => {
      for (const [id, t] of this.tunnels) {
        if (t.hostId !== hostId) continue;
        this.tunnels.delete(id);
        t.stream.destroy();
      }
      if (this.sockets.get(hostId) === ws) {
        this.sockets.delete(hostId);
        void this.store
          .updateTable("hosts")
          .set({ connected: 0 })
          .where("id", "=", hostId)
          .execute()
          .catch(() => {});
      }
    });
  }

  private async onMessage(hostId: string, ws: WebSocket, text: string): Promise<void> {
    let msg: HostMessage;
    try {
      msg = hostMessageSchema.parse(JSON.parse(text));
    } catch {
      ws.close(4400, "malformed message");
      return;
    }
    if (msg.type === "hello") {
      await this.store
        .updateTable("hosts")
        .set({
          arch: msg.arch,
          storage: msg.storage,
          capacity_json: JSON.stringify(msg.capacity),
          version: msg.version,
          last_seen: now(),
          connected: 1,
        })
        .where("id", "=", hostId)
        .execute();
      this.sendTo(ws, { type: "welcome", host_id: hostId });
      // Operations sent before the drop go again, under the same ids.
      for (const p of this.pending.values()) if (p.hostId === hostId) this.sendTo(ws, p.message);
      for (const w of this.waiters.get(hostId) ?? []) w();
      this.waiters.delete(hostId);
    } else if (msg.type === "heartbeat") {
      await this.store
        .updateTable("hosts")
        .set({ last_seen: now(), ...(msg.capacity ? { capacity_json: JSON.stringify(msg.capacity) } : {}) })
        .where("id", "=", hostId)
        .execute();
    } else if (msg.type === "event") {
      this.pending.get(msg.op_id)?.onEvent?.(msg.stream, Buffer.from(msg.data_b64, "base64"));
    } else {
      const p = this.pending.get(msg.op_id);
      if (!p) return;
      this.pending.delete(msg.op_id);
      clearTimeout(p.timer);
      if (msg.ok) p.resolve(msg.result);
      else {
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

  private onTunnelFrame(frame: Buffer): void {
    const f = decodeTunnelFrame(frame);
    const t = f ? this.tunnels.get(f.streamId) : undefined;
    if (!f || !t) return;
    if (f.kind === TUNNEL_DATA) t.stream.push(Buffer.from(f.payload));
    else if (f.kind === TUNNEL_END) t.stream.push(null);
    else if (f.kind === TUNNEL_CLOSE) {
      this.tunnels.delete(f.streamId);
      t.stream.push(null);
      t.stream.destroy();
    }
  }

  /**
   * A byte stream to a port inside an environment's service, carried over the host's WebSocket
   * (denvd listens on no port, and the container needs no address the host can route to).
   */
  async openTunnel(
    hostId: string,
    params: { environment_id: string; service?: string | undefined; port: number },
  ): Promise<Duplex> {
    const ws = this.sockets.get(hostId);
    if (!ws) throw new DenvError("unavailable", `host ${hostId} is not connected`);
    const streamId = this.nextStreamId++;
    const send = (kind: number, payload?: Buffer, cb?: (err?: Error) => void) => {
      if (ws.readyState !== ws.OPEN) return cb?.(new Error("the host disconnected"));
      ws.send(encodeTunnelFrame(kind, streamId, payload), { binary: true }, cb);
    };
    const stream = new Duplex({
      read() {},
      write(chunk: Buffer, _enc, cb) {
        send(TUNNEL_DATA, chunk, cb);
      },
      final(cb) {
        send(TUNNEL_END, undefined, () => cb());
      },
      destroy: (err, cb) => {
        if (this.tunnels.delete(streamId)) send(TUNNEL_CLOSE);
        cb(err);
      },
    });
    // Registered before the host is asked, so bytes it sends right after connecting are kept.
    this.tunnels.set(streamId, { hostId, stream });
    try {
      await this.call(hostId, "open_tunnel", { ...params, stream_id: streamId }, { timeoutMs: 30_000 });
    } catch (err) {
      this.tunnels.delete(streamId);
      stream.destroy();
      throw err;
    }
    return stream;
  }

  private sendTo(ws: WebSocket, msg: ServerMessage): void {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(msg));
  }

  isConnected(hostId: string): boolean {
    return this.sockets.has(hostId);
  }

  /** Resolves when the host is connected, or rejects after timeoutMs. */
  waitConnected(hostId: string, timeoutMs: number): Promise<void> {
    if (this.isConnected(hostId)) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new DenvError("unavailable", `host ${hostId} did not connect within ${timeoutMs} ms`)),
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
   * Runs an operation on a host and resolves to its result. Sent now if the host is connected,
   * otherwise when it reconnects; the id stays the same, so the host runs it at most once.
   */
  call<T = unknown>(
    hostId: string,
    method: OpMethod,
    params: Record<string, unknown>,
    options: {
      opId?: string;
      timeoutMs?: number;
      onEvent?: (stream: "stdout" | "stderr", data: Buffer) => void;
    } = {},
  ): Promise<T> {
    const opId = options.opId ?? newId("op");
    const message = { type: "op" as const, op_id: opId, method, params };
    return new Promise<T>((resolve, reject) => {
      const timeoutMs = options.timeoutMs ?? 15 * 60_000;
      const timer = setTimeout(() => {
        this.pending.delete(opId);
        reject(new DenvError("timeout", `host ${hostId} did not finish ${method} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(opId, {
        hostId,
        message,
        resolve: resolve as (v: unknown) => void,
        reject,
        timer,
        onEvent: options.onEvent,
      });
      const ws = this.sockets.get(hostId);
      if (ws) this.sendTo(ws, message);
    });
  }

  close(): void {
    for (const ws of this.sockets.values()) ws.terminate();
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(new DenvError("unavailable", "the server is shutting down"));
    }
    this.pending.clear();
    this.wss.close();
  }
}
