/**
 * The messages between the control plane and denvd over the one outbound WebSocket a host opens.
 * Every operation carries an id: a host that reconnects in the middle of one gets it again and
 * answers from what it already did, so work is neither lost nor repeated.
 */
import { z } from "zod";
import { OP_METHODS } from "./operations.ts";

/** 2: typed operations on stacks (stack_id); 1: the same operations on environment_id. */
export const PROTOCOL_VERSION = 2;

/**
 * The largest WebSocket message either side accepts (both set it as their maxPayload). The server
 * refuses to send an operation that would not fit, rather than have the host drop the connection
 * and the operation be sent again on every reconnect.
 */
export const MAX_MESSAGE_BYTES = 128 * 1024 * 1024;

const bytes = z.number().finite().nonnegative();
export const capacitySchema = z.object({
  total_bytes: bytes,
  free_bytes: bytes,
  cpus: bytes,
  memory_bytes: bytes,
});

const opId = z.string().min(1).max(80);
/** Text a host reports is bounded: what it says reaches records people read. */
const shortText = (max: number) => z.string().transform((s) => s.slice(0, max));

export const hostMessageSchema = z.discriminatedUnion("type", [
  z.object({
    type: z.literal("hello"),
    protocol: z.number(),
    arch: z.string().max(32),
    storage: z.enum(["zfs", "btrfs", "dir"]),
    capacity: capacitySchema,
    version: z.string().max(100),
    /** Operations the host finished or is running, so the server can settle what it is waiting on. */
    known_ops: z.array(opId).max(20_000),
  }),
  z.object({ type: z.literal("heartbeat"), capacity: capacitySchema.optional() }),
  /** Output of a running operation (exec with stream), in order, before its result. */
  z.object({
    type: z.literal("event"),
    op_id: opId,
    stream: z.enum(["stdout", "stderr"]),
    data_b64: z.string(),
  }),
  z.object({
    type: z.literal("result"),
    op_id: opId,
    ok: z.boolean(),
    result: z.unknown().optional(),
    error: z
      .object({ code: shortText(64), message: shortText(4000), details: z.unknown().optional() })
      .optional(),
  }),
]);

export type HostMessage = z.infer<typeof hostMessageSchema>;

export const serverMessageSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("welcome"), host_id: z.string() }),
  z.object({
    type: z.literal("op"),
    op_id: z.string(),
    method: z.enum(OP_METHODS),
    params: z.record(z.string(), z.unknown()),
  }),
]);

export type ServerMessage = z.infer<typeof serverMessageSchema>;

/** How often a host says it is alive (last_seen in GET /v1/hosts). */
export const HEARTBEAT_MS = 5000;

/**
 * Tunnel bytes (a client's connection to a port inside a sandbox) travel as binary WebSocket
 * frames beside the JSON messages: u8 kind, u32 stream id (big-endian), then the payload. The
 * server picks the stream id and opens it with the `open_tunnel` operation.
 */
export const TUNNEL_DATA = 1;
/** The sender will write no more on this stream (a half-close). */
export const TUNNEL_END = 2;
/** The stream is gone in both directions. */
export const TUNNEL_CLOSE = 3;

export function encodeTunnelFrame(kind: number, streamId: number, payload?: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head[0] = kind;
  head.writeUInt32BE(streamId >>> 0, 1);
  return payload?.length ? Buffer.concat([head, payload]) : head;
}

export function decodeTunnelFrame(frame: Buffer): { kind: number; streamId: number; payload: Buffer } | null {
  if (frame.length < 5) return null;
  return { kind: frame[0] as number, streamId: frame.readUInt32BE(1), payload: frame.subarray(5) };
}
