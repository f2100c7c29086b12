/**
 * The messages between the control plane and denvd over the one outbound WebSocket a host opens.
 * Every operation carries an id: a host that reconnects in the middle of one gets it again and
 * answers from what it already did, so work is neither lost nor repeated.
 */
import { z } from "zod";
import { OP_METHODS } from "./operations.ts";

/**
 * 5: a stream's window starts at 64 KiB and grows as its reader takes bytes (stream-mux.ts): a
 * denvd of 4 would send a whole 8 MiB window at once, which a server of 5 takes as a flood; 4: the
 * server names new stacks and versions before it asks (new_stack_id, new_version_id: crash
 * safety); a denvd of 3 refuses those params, so it is told to upgrade at hello rather than failing
 * every deploy with "Unrecognized key" (found by the installer's upgrade from a previous release); 3: exec and files as byte streams
 * (stream-mux.ts), not base64 in JSON; 2: typed operations on stacks (stack_id); 1: the same
 * operations on environment_id.
 */
export const PROTOCOL_VERSION = 5;

/**
 * The largest WebSocket message either side accepts (both set it as their maxPayload). Bulk bytes
 * travel as stream frames of at most STREAM_CHUNK_BYTES; a JSON message is an operation, its
 * result or a heartbeat. The server refuses to send an operation that would not fit (an argv of
 * several MiB does), rather than have the host drop the connection and the operation be sent again
 * on every reconnect.
 */
export const MAX_MESSAGE_BYTES = 32 * 1024 * 1024;

const bytes = z.number().finite().nonnegative();
export const capacitySchema = z.object({
  total_bytes: bytes,
  free_bytes: bytes,
  cpus: bytes,
  memory_bytes: bytes,
  /** Memory available for new work now (the kernel's MemAvailable); older hosts do not say. */
  memory_free_bytes: bytes.optional(),
});

/** A host's GPUs and how its engine passes them to containers (denvd's gpu-inventory.ts). */
export const gpuInventorySchema = z.object({
  driver_version: z.string().max(40).nullable(),
  devices: z
    .array(
      z.object({
        index: z.number().int().nonnegative(),
        /** As nvidia-smi prints it (GPU-…, MIG-…): sent back in a fork's or prepare's gpus. */
        uuid: z.string().regex(/^[A-Za-z0-9:._/-]{1,80}$/),
        model: z.string().max(100),
        memory_bytes: z.number().nonnegative().nullable(),
      }),
    )
    .max(64),
  device_nodes: z.array(z.string().max(40)).max(64),
  cdi_devices: z.array(z.string().max(200)).max(512),
  runtime: z.object({ nvidia: z.boolean(), cdi: z.boolean() }),
  /** How GPUs reach a container here: CDI device names, the engine's nvidia driver, or not at all. */
  mode: z.enum(["cdi", "nvidia", "none"]),
  /** Why no GPU is offered, when none is. */
  note: z.string().max(300).nullable(),
});
export type GpuInventory = z.infer<typeof gpuInventorySchema>;

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
    /** Its GPUs (older hosts do not say: taken as none). */
    gpus: gpuInventorySchema.optional(),
    /** Operations the host finished or is running, so the server can settle what it is waiting on. */
    known_ops: z.array(opId).max(20_000),
  }),
  z.object({ type: z.literal("heartbeat"), capacity: capacitySchema.optional() }),
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
    /** The request and deployment it is done for, named in the host's log lines. */
    trace: z
      .object({ request_id: z.string().max(100).optional(), deployment_id: z.string().max(100).optional() })
      .optional(),
  }),
]);

export type ServerMessage = z.infer<typeof serverMessageSchema>;

/** How often a host says it is alive (last_seen in GET /v1/hosts). */
export const HEARTBEAT_MS = 5000;
