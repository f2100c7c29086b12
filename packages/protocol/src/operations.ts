/**
 * The operations the control plane runs on a host: one table, each with the schema of its params
 * and of its result. Both sides are compiled against it: `HostHub.call(host, op, params)` takes
 * the op's params and resolves to its result (checked on arrival), and denvd checks the params
 * and dispatches to a handler typed from the same entry. A renamed field fails the type check.
 *
 * Names: a host runs *stacks* (`stack_id`, `stk_…`): the containers, networks and datasets of one
 * environment on that host. The control plane's environments (`environment_id`, `env_…`) point at
 * the stack that currently serves them. Versions are one id on both sides (`ver_…`).
 */
import { z } from "zod";
import { buildImageParams, buildImageResult, buildKey } from "./build-operations.ts";
import { diffEvidence } from "./diff-evidence.ts";
import {
  clockEvidence,
  collectEvidence,
  egressEvidence,
  egressPolicySchema,
  egressRecord,
  forkEvidence,
  gradeEvidence,
  healthEvidence,
  pauseEvidence,
  prepareEvidence,
  serviceStartEvidence,
  snapshotEvidence,
  warmEvidence,
} from "./evidence.ts";
import { nameSchema, stackNameSchema } from "./names.ts";
import { stackId, streamId, versionId } from "./operation-fields.ts";
import { resolvedSpecSchema } from "./resolved-spec.ts";
import { TRANSFER_OPERATIONS } from "./transfer-operations.ts";

export { type BuildImageParams, buildImageParams, buildImageResult } from "./build-operations.ts";
export { stackId, streamId, versionId } from "./operation-fields.ts";

/** Service → the GPU UUIDs it is given. */
const gpuAssignment = z.record(z.string(), z.array(z.string().regex(/^[A-Za-z0-9:._/-]{1,128}$/)).max(64));
/** The deployment (or other operation) a stack is made for, kept on its objects' labels. */
const operationId = z.string().min(1).max(80);
const serviceName = z.string().min(1).max(63);
const stack = z.strictObject({ stack_id: stackId });
/**
 * The id a new stack or version gets, chosen by the server and written into its deployment before
 * it asks: whatever then dies (the server, the host, the connection), the server can name what to
 * remove. The host picks one when it is absent.
 */
const newStackId = stackId.optional();

export const execParams = z.strictObject({
  stack_id: stackId,
  service: serviceName.optional(),
  command: z.union([z.string().min(1), z.array(z.string()).min(1)]),
  user: z.string().optional(),
  cwd: z.string().optional(),
  env: z.record(z.string(), z.string()).optional(),
  /** The command's stdin, from the server, to its end; none: stdin is empty. */
  stdin_stream: streamId.optional(),
  /** The command's stdout and stderr, to the server, as it writes them. */
  stdout_stream: streamId,
  stderr_stream: streamId,
  timeout_ms: z.number().int().positive().optional(),
  /** Per stream; output past it is counted and dropped. None: all of it is streamed. */
  max_output_bytes: z.number().int().positive().optional(),
  /**
   * A replay's step: the stack's frozen clock is released as the command starts and held as it
   * ends, a second on, so the episode's time is a function of its steps, not of the host's speed.
   */
  episode_clock: z.boolean().optional(),
  /**
   * On a terminal of this size (the command's session's controlling one, as `docker exec -t`):
   * its output comes as stdout alone, and stdin's end is the terminal's end-of-file.
   */
  tty: z
    .strictObject({ rows: z.number().int().min(1).max(1000), cols: z.number().int().min(1).max(1000) })
    .optional(),
});

export const execResult = z.object({
  exit_code: z.number(),
  stdout_truncated: z.boolean(),
  /** How many bytes of output went past max_output_bytes and were dropped. */
  stdout_dropped_bytes: z.number().int().nonnegative(),
  stderr_dropped_bytes: z.number().int().nonnegative(),
  stderr_truncated: z.boolean(),
  timed_out: z.boolean(),
  duration_ms: z.number(),
});

const empty = z.object({});

/** One line of service_logs' stream: which service wrote it, on which stream, when, and what. */
export const logLine = z.object({
  service: z.string(),
  stream: z.enum(["stdout", "stderr"]),
  /** The engine's time for it (RFC 3339, to the nanosecond); empty when it kept none. */
  time: z.string(),
  line: z.string(),
});
export type LogLine = z.infer<typeof logLine>;

/** A path in a container as the user saw it (a link is reported as a link, not followed). */
export const fsEntry = z.object({
  /** The absolute path. */
  path: z.string(),
  name: z.string(),
  type: z.enum(["file", "directory", "symlink", "other"]),
  size: z.number(),
  /** Permission bits (0o7777), as a number. */
  mode: z.number(),
  uid: z.number(),
  gid: z.number(),
  /** The owner's and group's names in the container's own files, when they have one. */
  owner: z.string().nullable(),
  group: z.string().nullable(),
  modified_at: z.string(),
  link_target: z.string().nullable(),
});

/** Which service, and as whom (the service's own user when none is given). */
const inService = {
  stack_id: stackId,
  service: serviceName.optional(),
  user: z.string().min(1).max(256).optional(),
};
const containerPath = z.string().min(1).max(4096);

/**
 * What happens to a journaled operation that a denvd killed mid-way finds at its next open
 * (reconcile.ts): finished (rollback, destroy, delete_version: doing the rest is safe), the stack
 * or version it was making removed, or only marked undone (the server sends it again).
 */
export type AfterCrash = "finish" | "remove_stack_made" | "remove_version_made" | "mark_undone";

/** One host operation: its schemas, and every fact about it the server and denvd act on. */
export interface OperationEntry {
  params: z.ZodType;
  result: z.ZodType;
  /** How long the server waits for its answer, resends included (default DEFAULT_OP_DEADLINE_MS). */
  deadlineMs?: number;
  /** Written to denvd's journal before it acts (op-journal.ts): it changes engine or storage state. */
  journaled?: true;
  /** Set on every journaled operation. */
  afterCrash?: AfterCrash;
  /** Its params that name byte streams, opened by the host as the operation arrives. */
  streams?: readonly string[];
}

/** An operation's deadline when its entry names none: the user's own commands run in it. */
export const DEFAULT_OP_DEADLINE_MS = 15 * 60_000;

export const OPERATIONS = {
  /** The image this host built earlier for a build key, when it still has it. */
  find_built_image: {
    params: z.strictObject({ build_key: buildKey }),
    result: z.object({
      image_id: z
        .string()
        .regex(/^sha256:[0-9a-f]{64}$/)
        .nullable(),
    }),
  },
  /** An image built by the host's engine from a context streamed from the server. */
  build_image: {
    streams: ["context_stream", "log_stream"],
    params: buildImageParams,
    result: buildImageResult,
  },
  /**
   * Removes the images this host built for a team's project (or for all its projects): each one
   * not in `keep` (the images versions still pin) and not used by a container.
   */
  remove_built_images: {
    params: z.strictObject({
      team_id: z.string().min(1).max(64),
      project_id: z.string().min(1).max(64),
      keep: z.array(z.string().regex(/^sha256:[0-9a-f]{64}$/)).max(100_000),
    }),
    result: z.object({ removed: z.array(z.string()), in_use: z.array(z.string()) }),
  },
  /** Images present (pulled by digest when missing) and fresh, empty datasets. */
  prepare: {
    journaled: true,
    afterCrash: "remove_stack_made",
    params: z.strictObject({
      spec: resolvedSpecSchema,
      name: stackNameSchema,
      operation_id: operationId,
      new_stack_id: newStackId,
      /** Volumes start as clones of this version's snapshots of the same name, not empty. */
      data_from_version_id: versionId.optional(),
      /** The GPUs (UUIDs) placement gave each service that asks for GPUs: its own, no one else's. */
      gpus: gpuAssignment.optional(),
    }),
    result: z.object({ stack_id: stackId, evidence: prepareEvidence }),
  },
  /**
   * A prepared stack's dataset seeded with the project's files a bind mount names: the tar on
   * content_stream, checked and extracted into the fresh dataset before any container exists.
   */
  seed_dataset: {
    streams: ["content_stream"],
    params: z.strictObject({
      stack_id: stackId,
      dataset: nameSchema,
      content_stream: z.number().int().nonnegative(),
    }),
    result: z.object({ entries: z.number(), bytes: z.number(), ms: z.number() }),
  },
  /** Networks, volumes and containers, started in dependency order, healthy; then the egress probe. */
  start: {
    journaled: true,
    afterCrash: "mark_undone",
    params: stack,
    result: z.object({
      evidence: z.record(z.string(), serviceStartEvidence),
      ms: z.number(),
      health: healthEvidence,
      egress: egressEvidence,
      clock: clockEvidence.optional(),
    }),
  },
  /** x-denv.warm commands, in order. */
  warm: { journaled: true, afterCrash: "mark_undone", params: stack, result: warmEvidence },
  /** A consistent snapshot of every dataset: a version. */
  snapshot: {
    deadlineMs: 5 * 60_000,
    journaled: true,
    afterCrash: "remove_version_made",
    params: z.strictObject({
      stack_id: stackId,
      new_version_id: versionId.optional(),
      /** Also every service's processes (on), or those CRIU can take (best-effort). */
      live: z.enum(["on", "best-effort"]).optional(),
    }),
    result: z.object({
      version_id: versionId,
      images: z.record(z.string(), z.string()),
      evidence: snapshotEvidence,
    }),
  },
  /** The egress probe alone. */
  probe: { params: stack, result: egressEvidence },
  /** A new stack from a version, started and healthy. */
  fork: {
    deadlineMs: 5 * 60_000,
    journaled: true,
    afterCrash: "remove_stack_made",
    params: z.strictObject({
      version_id: versionId,
      name: stackNameSchema,
      operation_id: operationId,
      new_stack_id: newStackId,
      /** Keep a frozen clock held at the version's time until release_clock (a pool's member). */
      hold_clock: z.boolean().optional(),
      gpus: gpuAssignment.optional(),
      /** Start every service afresh, even from a live version. */
      cold: z.boolean().optional(),
    }),
    result: z.object({ stack_id: stackId, evidence: forkEvidence }),
  },
  /** Every service checked once: its healthcheck passes (as its user), or it runs when it has none. */
  check_health: { params: stack, result: healthEvidence },
  /** Every volume's state, digested (databases checkpointed, services paused while it is read). */
  digest_volumes: {
    params: z.strictObject({
      stack_id: stackId,
      /** Hold a frozen clock at the version's time for the checkpoint (default true: a replay's). */
      hold_clock: z.boolean().optional(),
    }),
    result: z.object({
      volumes: z.record(
        z.string(),
        z.object({
          digest: z.string(),
          files: z.number(),
          bytes: z.number(),
          entries: z.array(z.tuple([z.string(), z.string()])),
          listed_all: z.boolean(),
          left_out: z.array(z.string()),
        }),
      ),
      checkpoint: snapshotEvidence.shape.checkpoint,
      /** The frozen clock was held at the version's time for the checkpoint. */
      clock_held: z.boolean(),
      ms: z.number(),
    }),
  },
  /**
   * What changed in a stack's volumes (and its PostgreSQL services' rows) since a version: its live
   * datasets against `against` (default: the version it came from or was last rolled back to).
   */
  diff: {
    deadlineMs: 5 * 60_000,
    params: z.strictObject({
      stack_id: stackId,
      against: versionId.optional(),
      max_entries: z.number().int().min(1).max(100_000).optional(),
      max_diff_bytes: z
        .number()
        .int()
        .min(0)
        .max(16 * 1024 * 1024)
        .optional(),
    }),
    result: diffEvidence,
  },
  /** A frozen clock stops at what it reads, until release_clock (between a replay's steps). */
  hold_clock: {
    deadlineMs: 60_000,
    journaled: true,
    afterCrash: "mark_undone",
    params: stack,
    result: z.object({ clock_at: z.string().nullable() }),
  },
  /** A held frozen clock starts to advance (a pool's member handed over); a running one is left. */
  release_clock: {
    deadlineMs: 60_000,
    journaled: true,
    afterCrash: "mark_undone",
    params: stack,
    result: z.object({ clock_at: z.string().nullable() }),
  },
  /** A stack put back to one of its versions. */
  rollback: {
    deadlineMs: 5 * 60_000,
    journaled: true,
    afterCrash: "finish",
    params: z.strictObject({ stack_id: stackId, version_id: versionId }),
    result: z.object({ health: healthEvidence, ms: z.number() }),
  },
  /** Everything of a stack removed (idempotent). */
  destroy: { deadlineMs: 3 * 60_000, journaled: true, afterCrash: "finish", params: stack, result: empty },
  delete_version: {
    deadlineMs: 2 * 60_000,
    journaled: true,
    afterCrash: "finish",
    params: z.strictObject({ version_id: versionId }),
    result: empty,
  },
  exec: {
    streams: ["stdin_stream", "stdout_stream", "stderr_stream"],
    params: execParams,
    result: execResult,
  },
  /** A tar, streamed from the server, written at a path as a user (the service's own when none is given). */
  put_files: {
    streams: ["tar_stream"],
    params: z.strictObject({
      stack_id: stackId,
      service: serviceName.optional(),
      path: z.string().min(1),
      user: z.string().min(1).max(256).optional(),
      tar_stream: streamId,
    }),
    result: z.object({ entries: z.number(), bytes: z.number() }),
  },
  /**
   * A tar of a path, streamed to the server. The host starts the stream only once the path was
   * found and may be read, so a failure before its first byte is the operation's own error.
   */
  get_files: {
    streams: ["tar_stream"],
    params: z.strictObject({
      stack_id: stackId,
      service: serviceName.optional(),
      path: z.string().min(1),
      user: z.string().min(1).max(256).optional(),
      tar_stream: streamId,
    }),
    result: z.object({ bytes: z.number() }),
  },
  /** A path's type, size, mode, owner and time. */
  stat_path: {
    deadlineMs: 2 * 60_000,
    params: z.strictObject({ ...inService, path: containerPath }),
    result: fsEntry,
  },
  /** A directory's entries, one level (depth 1) or deeper; links are listed, not entered. */
  list_path: {
    deadlineMs: 2 * 60_000,
    params: z.strictObject({ ...inService, path: containerPath, depth: z.number().int().min(1).max(64) }),
    result: z.object({ entries: z.array(fsEntry) }),
  },
  make_dir: {
    deadlineMs: 2 * 60_000,
    params: z.strictObject({ ...inService, path: containerPath, parents: z.boolean() }),
    result: z.object({ created: z.boolean() }),
  },
  remove_path: {
    deadlineMs: 2 * 60_000,
    params: z.strictObject({ ...inService, path: containerPath, recursive: z.boolean() }),
    result: empty,
  },
  rename_path: {
    deadlineMs: 2 * 60_000,
    params: z.strictObject({ ...inService, from: containerPath, to: containerPath }),
    result: empty,
  },
  verify_stop: {
    deadlineMs: 60_000,
    journaled: true,
    afterCrash: "mark_undone",
    params: stack,
    result: z.object({ service: z.string(), frozen: z.literal(true), ms: z.number() }),
  },
  verify_collect: {
    deadlineMs: 5 * 60_000,
    journaled: true,
    afterCrash: "mark_undone",
    params: z.strictObject({ stack_id: stackId, verify_id: operationId }),
    result: collectEvidence,
  },
  verify_grade: {
    journaled: true,
    afterCrash: "mark_undone",
    params: z.strictObject({ stack_id: stackId, verify_id: operationId }),
    result: gradeEvidence,
  },
  verify_cleanup: {
    deadlineMs: 60_000,
    journaled: true,
    afterCrash: "mark_undone",
    params: z.strictObject({ verify_id: operationId }),
    result: empty,
  },
  stop_service: {
    deadlineMs: 2 * 60_000,
    journaled: true,
    afterCrash: "mark_undone",
    params: z.strictObject({ stack_id: stackId, service: serviceName }),
    result: z.object({ stopped: z.string() }),
  },
  /**
   * What the services wrote (the engine's kept lines, bounded and rotated per container), as
   * newline-delimited JSON on logs_stream: {"service", "stream", "time", "line"} per line, by time
   * across services. Followed, it goes on until the server closes the stream or every service ends.
   */
  service_logs: {
    // A followed stream lives as long as its reader: the server's call gives it its own deadline.
    streams: ["logs_stream"],
    params: z.strictObject({
      stack_id: stackId,
      /** One service; none: every service of the stack. */
      service: serviceName.optional(),
      tail_lines: z.number().int().min(0).max(100_000).optional(),
      since_ms: z.number().int().min(0).optional(),
      follow: z.boolean(),
      logs_stream: streamId,
    }),
    result: z.object({ lines: z.number() }),
  },
  /** A byte stream to a port in a service, carried as tunnel frames under stream_id. */
  open_tunnel: {
    streams: ["stream_id"],
    params: z.strictObject({
      stack_id: stackId,
      service: serviceName.optional(),
      port: z.number().int().min(1).max(65535),
      stream_id: streamId,
    }),
    result: empty,
  },
  /** Thaws an agent verify froze. */
  resume: { deadlineMs: 60_000, journaled: true, afterCrash: "mark_undone", params: stack, result: empty },
  /** Pause that keeps memory: every service's processes checkpointed and stopped (stack-pause.ts). */
  pause: { deadlineMs: 5 * 60_000, params: stack, result: pauseEvidence },
  /** A paused stack's services started from their checkpoints, in start order, and healthy. */
  unpause: {
    deadlineMs: 5 * 60_000,
    params: stack,
    result: z.object({ health: healthEvidence, ms: z.number() }),
  },
  /**
   * A running stack's egress policy replaced (egress/egress-gateways.ts): the next connection
   * follows it and open ones it no longer allows are closed (`closed` counts them).
   */
  set_egress: {
    deadlineMs: 60_000,
    params: stack.extend({ policy: egressPolicySchema }),
    result: z.object({ closed: z.number().int().nonnegative() }),
  },
  /** The stack's egress policy now and its log's last `limit` records (oldest first). */
  egress_log: {
    deadlineMs: 30_000,
    params: stack.extend({ limit: z.number().int().min(1).max(10_000).optional() }),
    result: z.object({
      policy: egressPolicySchema.nullable(),
      records: z.array(egressRecord),
      /** Records before these that are not returned (older), and those never kept (past the log's bound). */
      earlier: z.number().int().nonnegative(),
      dropped: z.number().int().nonnegative(),
    }),
  },
  ...TRANSFER_OPERATIONS,
  status: {
    deadlineMs: 30_000,
    params: z.strictObject({}),
    result: z.object({
      stacks: z.array(
        z.object({
          id: z.string(),
          name: z.string(),
          status: z.string(),
          /** Services verify froze for inspection (the only pause a restart keeps). */
          frozen: z.array(z.string()).optional(),
        }),
      ),
    }),
  },
} as const satisfies Record<string, OperationEntry>;

export type OpMethod = keyof typeof OPERATIONS;

export const OP_METHODS = Object.keys(OPERATIONS) as [OpMethod, ...OpMethod[]];

/** An operation's entry with its facts typed (the table's literal types vary by entry). */
export function operationEntry(method: OpMethod): OperationEntry {
  return OPERATIONS[method];
}

/** How long the server waits for an operation's answer. */
export function operationDeadlineMs(method: OpMethod): number {
  return operationEntry(method).deadlineMs ?? DEFAULT_OP_DEADLINE_MS;
}

/** The params of an operation that name byte streams. */
export function operationStreams(method: OpMethod): readonly string[] {
  return operationEntry(method).streams ?? [];
}
/** What a caller passes (defaults may be left out). */
export type OpParams<M extends OpMethod> = z.input<(typeof OPERATIONS)[M]["params"]>;
/** What a handler receives once the params are checked. */
export type OpCheckedParams<M extends OpMethod> = z.output<(typeof OPERATIONS)[M]["params"]>;
/** What a handler returns and a caller gets. */
export type OpResult<M extends OpMethod> = z.output<(typeof OPERATIONS)[M]["result"]>;
