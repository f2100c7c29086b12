/**
 * A host for in-process tests: it joins like denvd (a real WebSocket to the hub, hello, welcome),
 * checks every operation's params against the protocol table, and answers from a table of typed
 * handlers (tsc checks each answer's shape against the operation's result). No engine, no storage:
 * what a route sends to a host and does with its answer, tested in milliseconds.
 */
import type { Duplex } from "node:stream";
import {
  finishStream,
  type GpuInventory,
  type HostMessage,
  type MuxStream,
  OPERATIONS,
  type OpCheckedParams,
  type OpMethod,
  type OpResult,
  operationStreams,
  PROTOCOL_VERSION,
  StreamMux,
  serverMessageSchema,
} from "@denv/protocol";
import WebSocket from "ws";

/** A handler gets the operation's checked params and its byte streams by id. */
export type DoubleHandlers = {
  [M in OpMethod]?: (
    p: OpCheckedParams<M>,
    streams: (id: number) => Duplex,
  ) => OpResult<M> | Promise<OpResult<M>>;
};

export class HostDouble {
  /** Every operation received, with its params as sent. */
  readonly calls: { method: OpMethod; params: unknown }[] = [];
  private ws: WebSocket | null = null;
  private mux: StreamMux | null = null;
  private readonly handlers: DoubleHandlers;

  private readonly gpus: GpuInventory | undefined;

  /** `gpus`: the GPU inventory its hello reports (none: it says nothing of GPUs). */
  constructor(handlers: DoubleHandlers, options: { gpus?: GpuInventory } = {}) {
    this.handlers = handlers;
    this.gpus = options.gpus;
  }

  /** Dials the hosts at wsUrl with the host's secret; resolves once welcomed, to the host id. */
  connect(wsUrl: string, secret: string): Promise<string> {
    const ws = new WebSocket(wsUrl, { headers: { authorization: `Bearer ${secret}` } });
    this.ws = ws;
    const mux = new StreamMux((frame, done) => ws.send(frame, { binary: true }, done));
    this.mux = mux;
    return new Promise((resolve, reject) => {
      ws.on("error", reject);
      ws.on("open", () =>
        this.send({
          type: "hello",
          protocol: PROTOCOL_VERSION,
          arch: "x86_64",
          storage: "btrfs",
          capacity: {
            total_bytes: 100 * 1024 ** 3,
            free_bytes: 90 * 1024 ** 3,
            cpus: 2,
            memory_bytes: 8 * 1024 ** 3,
          },
          version: "host-double",
          ...(this.gpus ? { gpus: this.gpus } : {}),
          known_ops: [],
        }),
      );
      ws.on("message", (data, isBinary) => {
        if (isBinary) return mux.onFrame(data as Buffer);
        const msg = serverMessageSchema.parse(JSON.parse(data.toString()));
        if (msg.type === "welcome") resolve(msg.host_id);
        else void this.answer(msg.op_id, msg.method, msg.params);
      });
    });
  }

  private send(msg: HostMessage): void {
    this.ws?.send(JSON.stringify(msg));
  }

  private async answer(opId: string, method: OpMethod, raw: unknown): Promise<void> {
    this.calls.push({ method, params: raw });
    const parsed = OPERATIONS[method].params.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      this.send({
        type: "result",
        op_id: opId,
        ok: false,
        error: {
          code: "invalid_argument",
          message: `${method}: ${issue?.path.join(".")}: ${issue?.message}`,
        },
      });
      return;
    }
    const streams = new Map<number, MuxStream>();
    for (const key of operationStreams(method)) {
      const id = (parsed.data as Record<string, unknown>)[key];
      if (typeof id === "number" && this.mux) {
        const s = this.mux.open(id);
        s.on("error", () => {});
        streams.set(id, s);
      }
    }
    const handler = this.handlers[method] as
      | ((p: unknown, streams: (id: number) => Duplex) => unknown)
      | undefined;
    if (!handler) {
      this.send({
        type: "result",
        op_id: opId,
        ok: false,
        error: { code: "unavailable", message: `the host double does not do ${method}` },
      });
      return;
    }
    const result = await handler(parsed.data, (id) => {
      const s = streams.get(id);
      if (!s) throw new Error(`no stream ${id}`);
      return s;
    });
    if (method !== "open_tunnel") await Promise.all([...streams.values()].map(finishStream));
    this.send({ type: "result", op_id: opId, ok: true, result });
  }

  /** A binary frame sent as is, credit or not: what a host that breaks the protocol does. */
  sendRaw(frame: Buffer): void {
    this.ws?.send(frame, { binary: true });
  }

  close(): void {
    this.ws?.close();
  }
}
