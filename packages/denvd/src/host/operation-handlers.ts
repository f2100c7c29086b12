/**
 * The host operations (packages/protocol/src/operations.ts), each served by one handler typed
 * from the protocol table: its checked params in, its result out. The sidecar runs them for the
 * control plane; tests and benchmarks run the very same handlers, so they drive the path the
 * server drives.
 */
import type { Duplex } from "node:stream";
import {
  DenvError,
  finishStream,
  OPERATIONS,
  type OpCheckedParams,
  type OpMethod,
  type OpResult,
} from "@denv/protocol";
import { STEP_ADVANCE_MS, STEP_TICK_MS } from "../clock/clock-state.ts";
import type { Denvd } from "../denvd.ts";
import type { FileSink } from "../exec/executor.ts";
import { DEPLOY_SETTLE_MS } from "../services/service-health.ts";
import { writeServiceLogs } from "../services/service-logs.ts";
import { Verifier } from "../stack/verify.ts";

/**
 * The byte streams an operation was given (its *_stream params, the operation table's `streams`), opened on the
 * connection it came on before its first frame could arrive.
 */
export interface OpStreams {
  get(id: number): Duplex;
}

/** Operations run without a connection (tests, benchmarks) have no streams to move bytes on. */
const noStreams: OpStreams = {
  get: () => {
    throw new DenvError(
      "invalid_argument",
      "this operation moves bytes, which only a host connection carries",
    );
  },
};

export type OperationHandlers = {
  [M in OpMethod]: (p: OpCheckedParams<M>, io: OpStreams) => Promise<OpResult<M>>;
};

export interface HandlerHooks {
  /** Relays a port inside a service over a stream of the connection the operation came on. */
  openTunnel(p: OpCheckedParams<"open_tunnel">, stream: Duplex): Promise<Record<string, never>>;
}

/**
 * Writes to a stream as a sink: resolves at once while it has room, else once it drained, so the
 * producer waits for the reader at the far end; rejects once the stream is gone.
 */
export function streamSink(stream: Duplex): FileSink {
  return (chunk) => {
    if (stream.destroyed) return Promise.reject(new Error("the stream's reader went away"));
    if (stream.write(chunk)) return;
    return new Promise<void>((resolve, reject) => {
      const drained = () => {
        stream.off("close", gone);
        resolve();
      };
      const gone = () => {
        stream.off("drain", drained);
        reject(new Error("the stream's reader went away"));
      };
      stream.once("drain", drained);
      stream.once("close", gone);
    });
  };
}

export function operationHandlers(denvd: Denvd, hooks: HandlerHooks): OperationHandlers {
  const verifier = () => new Verifier(denvd, denvd.stateDir);
  return {
    find_built_image: async (p) => ({ image_id: await denvd.findBuiltImage(p.build_key) }),
    remove_built_images: (p) => denvd.removeBuiltImages(p),
    build_image: async (p, io) => {
      const log = io.get(p.log_stream);
      const sink = streamSink(log);
      try {
        return await denvd.buildImage(p, io.get(p.context_stream), (text) => sink(Buffer.from(text)));
      } finally {
        await finishStream(log).catch(() => {});
      }
    },
    prepare: async (p) => {
      const r = await denvd.prepare(p.spec, {
        name: p.name,
        operationId: p.operation_id,
        ...(p.new_stack_id ? { stackId: p.new_stack_id } : {}),
        ...(p.data_from_version_id ? { dataFromVersionId: p.data_from_version_id } : {}),
        ...(p.gpus ? { gpus: p.gpus } : {}),
      });
      return { stack_id: r.stack.id, evidence: r.evidence };
    },
    seed_dataset: (p, io) => denvd.seedDataset(p.stack_id, p.dataset, io.get(p.content_stream)),
    start: async (p) => {
      // A deploy's start: what is frozen next must have stayed up (forks, of a version that did,
      // are not held back).
      const r = await denvd.start(p.stack_id, { settleMs: DEPLOY_SETTLE_MS });
      return { ...r, egress: await denvd.probeEgress(p.stack_id) };
    },
    warm: (p) => denvd.warm(p.stack_id),
    pause: (p) => denvd.pause(p.stack_id),
    unpause: (p) => denvd.unpause(p.stack_id),
    set_egress: (p) => denvd.setEgress(p.stack_id, p.policy),
    egress_log: async (p) => denvd.egressLog(p.stack_id, p.limit),
    snapshot: async (p) => {
      const r = await denvd.snapshot(p.stack_id, {
        ...(p.new_version_id ? { versionId: p.new_version_id } : {}),
        ...(p.live ? { live: p.live } : {}),
      });
      return { version_id: r.version.id, images: r.version.images, evidence: r.evidence };
    },
    probe: (p) => denvd.probeEgress(p.stack_id),
    fork: async (p) => {
      const r = await denvd.fork(p.version_id, {
        name: p.name,
        operationId: p.operation_id,
        holdClock: p.hold_clock ?? false,
        ...(p.new_stack_id ? { stackId: p.new_stack_id } : {}),
        ...(p.gpus ? { gpus: p.gpus } : {}),
        ...(p.cold ? { cold: true } : {}),
      });
      return { stack_id: r.stack.id, evidence: r.evidence };
    },
    diff: (p) =>
      denvd.diff(p.stack_id, {
        ...(p.against ? { against: p.against } : {}),
        bounds: {
          ...(p.max_entries ? { maxEntries: p.max_entries } : {}),
          ...(p.max_diff_bytes !== undefined ? { maxDiffBytes: p.max_diff_bytes } : {}),
        },
      }),
    digest_volumes: (p) => denvd.digestVolumes(p.stack_id, { holdClock: p.hold_clock ?? true }),
    check_health: (p) => denvd.checkHealth(p.stack_id),
    hold_clock: async (p) => ({ clock_at: await denvd.holdClock(p.stack_id) }),
    release_clock: async (p) => ({ clock_at: await denvd.releaseClock(p.stack_id) }),
    rollback: (p) => denvd.rollback(p.stack_id, p.version_id),
    destroy: async (p) => {
      await denvd.destroy(p.stack_id);
      return {};
    },
    delete_version: async (p) => {
      await denvd.deleteVersion(p.version_id);
      return {};
    },
    exec: async (p, io) => {
      const stdout = io.get(p.stdout_stream);
      const stderr = io.get(p.stderr_stream);
      // A replay's step: the stack's frozen clock runs for the command's run only, here on the
      // host, so no round trip to the server counts as the episode's time: in STEP_TICK_MS ticks
      // while it runs (what it reads early on is the step's start, on a starved host too), then it
      // stands STEP_ADVANCE_MS on, so the next step's time does not depend on how long this one
      // took either.
      if (p.episode_clock) await denvd.releaseClock(p.stack_id, STEP_TICK_MS);
      const r = await denvd
        .exec(p.stack_id, p.service, {
          command: p.command,
          user: p.user ?? null,
          cwd: p.cwd ?? null,
          env: p.env ?? {},
          stdin: p.stdin_stream !== undefined ? io.get(p.stdin_stream) : null,
          timeoutMs: p.timeout_ms ?? null,
          maxOutputBytes: p.max_output_bytes ?? Number.POSITIVE_INFINITY,
          keepOutput: false,
          tty: p.tty ?? null,
          onStdout: streamSink(stdout),
          onStderr: streamSink(stderr),
        })
        .finally(() => (p.episode_clock ? denvd.holdClock(p.stack_id, STEP_ADVANCE_MS) : null));
      // Every byte of output is on its way before the result is.
      await Promise.all([finishStream(stdout), finishStream(stderr)]);
      return {
        exit_code: r.exitCode,
        stdout_truncated: r.stdoutTruncated,
        stdout_dropped_bytes: r.stdoutDroppedBytes,
        stderr_dropped_bytes: r.stderrDroppedBytes,
        stderr_truncated: r.stderrTruncated,
        timed_out: r.timedOut,
        duration_ms: r.durationMs,
      };
    },
    put_files: (p, io) =>
      denvd.putFiles(p.stack_id, p.service, p.path, io.get(p.tar_stream), { user: p.user }),
    get_files: async (p, io) => {
      const tar = io.get(p.tar_stream);
      const r = await denvd.readFilesTo(p.stack_id, p.service, p.path, streamSink(tar), { user: p.user });
      await finishStream(tar);
      return r;
    },
    service_logs: async (p, io) => {
      const out = io.get(p.logs_stream);
      const r = await writeServiceLogs(
        denvd.runtime,
        denvd.stack(p.stack_id),
        {
          follow: p.follow,
          ...(p.service === undefined ? {} : { service: p.service }),
          ...(p.tail_lines === undefined ? {} : { tailLines: p.tail_lines }),
          ...(p.since_ms === undefined ? {} : { sinceMs: p.since_ms }),
        },
        streamSink(out),
        (stop) => out.once("close", stop),
      );
      if (!out.destroyed) await finishStream(out);
      return r;
    },
    stat_path: async (p) => {
      const r = await denvd.fileOp(p.stack_id, p.service, { op: "stat", path: p.path }, { user: p.user });
      const entry = r.entries[0];
      if (!entry) throw new DenvError("not_found", `${p.path} does not exist in the service`);
      return entry;
    },
    list_path: async (p) => ({
      entries: (
        await denvd.fileOp(
          p.stack_id,
          p.service,
          { op: "list", path: p.path, depth: p.depth },
          { user: p.user },
        )
      ).entries,
    }),
    make_dir: async (p) => ({
      created: (
        await denvd.fileOp(
          p.stack_id,
          p.service,
          { op: "mkdir", path: p.path, parents: p.parents },
          { user: p.user },
        )
      ).created,
    }),
    remove_path: async (p) => {
      await denvd.fileOp(
        p.stack_id,
        p.service,
        { op: "remove", path: p.path, recursive: p.recursive },
        { user: p.user },
      );
      return {};
    },
    rename_path: async (p) => {
      await denvd.fileOp(p.stack_id, p.service, { op: "rename", path: p.from, to: p.to }, { user: p.user });
      return {};
    },
    verify_stop: (p) => verifier().stop(p.stack_id),
    verify_collect: (p) => verifier().collect(p.stack_id, p.verify_id),
    verify_grade: (p) => verifier().grade(p.stack_id, p.verify_id),
    verify_cleanup: async (p) => {
      await verifier().cleanup(p.verify_id);
      return {};
    },
    open_tunnel: (p, io) => hooks.openTunnel(p, io.get(p.stream_id)),
    stop_service: (p) => denvd.stopService(p.stack_id, p.service),
    resume: async (p) => {
      await verifier().resume(p.stack_id);
      return {};
    },
    describe_version: async (p) => denvd.transfers.describe(p.version_id),
    send_snapshot: async (p, io) => {
      const out = io.get(p.out_stream);
      const r = await denvd.transfers.send(p, out);
      await finishStream(out).catch(() => {});
      return r;
    },
    receive_snapshot: (p, io) => denvd.transfers.receive(p, io.get(p.in_stream)),
    send_live: async (p, io) => {
      const out = io.get(p.out_stream);
      const r = await denvd.transfers.sendLive(p, out);
      await finishStream(out).catch(() => {});
      return r;
    },
    receive_live: (p, io) => denvd.transfers.receiveLive(p, io.get(p.in_stream)),
    adopt_version: (p) => denvd.transfers.adopt(p),
    discard_received: async (p) => {
      await denvd.transfers.discard(p.snapshot_ids, p.live_version_id);
      return {};
    },
    ensure_images: (p) => denvd.transfers.ensureImages(p.images),
    status: async () => ({
      stacks: denvd
        .stacks()
        .map((s) => ({ id: s.id, name: s.name, status: s.status, frozen: s.frozen ?? [] })),
    }),
  };
}

/** Checks an operation's params against the protocol table, then runs its handler. */
export async function performOperation<M extends OpMethod>(
  handlers: OperationHandlers,
  method: M,
  raw: unknown,
  io: OpStreams = noStreams,
): Promise<OpResult<M>> {
  const parsed = OPERATIONS[method].params.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new DenvError(
      "invalid_argument",
      `${method}: ${issue?.path.join(".") || "params"}: ${issue?.message ?? "invalid"}`,
    );
  }
  const handler = handlers[method] as (p: unknown, io: OpStreams) => Promise<OpResult<M>>;
  return handler(parsed.data, io);
}
