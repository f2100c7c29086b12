/**
 * snapshot: one consistent capture of every dataset of a running stack. Databases checkpoint
 * first (forks then start without a long recovery), every service is frozen, every dataset is
 * captured in the same frozen window, everything thaws and is healthy again. The result is a version.
 * A live one also holds every service's processes, dumped in that window (live-capture.ts).
 */
import { DenvError, type SnapshotEvidence } from "@denv/protocol";
import { stackClockMs } from "../clock/stack-clock.ts";
import type { LiveRecord, StackRecord, VersionRecord } from "../host/state-store.ts";
import { waitServiceHealthy } from "../services/service-health.ts";
import { newId, type StackContext } from "../stack/stack-context.ts";
import {
  captureLive,
  checkpointsOf,
  detachAgents,
  type LiveMode,
  liveEvidence,
  planLive,
  removeLive,
  sealLive,
} from "./live-capture.ts";

/** Refuses a fork or snapshot when the pool has less free space than minFreeBytes (default 1 GiB). */
export async function assertSpace(ctx: StackContext, what: string): Promise<void> {
  const min = ctx.options.minFreeBytes ?? 1024 ** 3;
  const free = await ctx.storage.freeBytes();
  if (free < min) {
    throw new DenvError(
      "insufficient_storage",
      `the ${ctx.storage.kind} pool has ${Math.round(free / 1024 ** 2)} MiB free, below the ${Math.round(min / 1024 ** 2)} MiB a ${what} needs; destroy old environments or grow the pool`,
    );
  }
}

export async function snapshotStack(
  ctx: StackContext,
  stackId: string,
  options: { versionId?: string; live?: LiveMode } = {},
): Promise<{ version: VersionRecord; evidence: SnapshotEvidence }> {
  const stack = ctx.stack(stackId);
  if (options.versionId && ctx.store.version(options.versionId))
    throw new DenvError("conflict", `a version ${options.versionId} already exists on this host`);
  if (stack.status !== "running")
    throw new DenvError("conflict", `environment ${stack.name} is ${stack.status}, not running`);
  await assertSpace(ctx, "snapshot");
  // A live snapshot finds what CRIU cannot take before anything is frozen.
  const cp = options.live ? await checkpointsOf(ctx) : null;
  const plan = options.live ? await planLive(ctx, stack, options.live) : null;
  // What the version will not keep, read beside the checkpoint and the capture (the engine's diff
  // of a layer takes 0.4-1.2 s on a busy host): awaited once the version is stored.
  const outsideRead = writesOutsideVolumes(ctx, stack);
  outsideRead.catch(() => {});
  const checkpoint = await checkpointDatabases(ctx, stack);
  const versionId = options.versionId ?? newId("ver");
  // A container already paused (an agent frozen by verify) stays paused, and is not thawed here;
  // one that has exited (a one-shot service that did its work) has nothing to pause.
  const states = await Promise.all(
    Object.values(stack.containers).map((id) => ctx.runtime.inspectContainer(id)),
  );
  const live = states.filter((st) => st.running && !st.paused);
  const ids = live.map((st) => st.id);
  const snapshots: Record<string, string> = {};
  let kept: LiveRecord | undefined;
  // Most of what the snapshot would flush goes out now, while the stack still runs.
  await ctx.storage.flush?.().catch(() => {});
  const reattach = plan ? await detachAgents(ctx, stack, plan.services) : null;
  const frozenStart = performance.now();
  let clockMs = Date.now();
  let frozenAt = frozenStart;
  let capturedAt = frozenStart;
  try {
    // Every freeze ends before a failure is raised: the thaw below must not run before one lands.
    const froze = await Promise.allSettled(live.map((st) => ctx.runtime.freezeContainer(st.id, st.pid)));
    for (const f of froze) if (f.status === "rejected") throw f.reason;
    frozenAt = performance.now();
    clockMs = await stackClockMs(ctx, stack);
    // Every capture ends before a failure is raised: none is left running to finish after the cleanup.
    const taken = await Promise.allSettled(
      Object.entries(stack.datasets).map(async ([vol, ds]) => {
        const snapId = `${versionId}-${vol}`;
        await ctx.storage.snapshot(ds, snapId);
        snapshots[vol] = snapId;
      }),
    );
    for (const t of taken) if (t.status === "rejected") throw t.reason;
    if (cp && plan) kept = await captureLive(ctx, cp, stack, versionId, plan);
    capturedAt = performance.now();
  } catch (err) {
    // Nothing half-made outlives a failed snapshot (the next open would also find it unrecorded).
    await Promise.all(
      Object.values(snapshots).map((snap) => ctx.storage.destroySnapshot(snap).catch(() => {})),
    );
    throw err;
  } finally {
    await Promise.all(ids.map((id) => ctx.runtime.thawContainer(id).catch(() => false)));
    await reattach?.();
  }
  const thawedAt = performance.now();
  const frozenMs = Math.round(thawedAt - frozenStart);
  if (kept)
    await sealLive(ctx, versionId, kept).catch(async (err: unknown) => {
      await removeLive(ctx, versionId);
      await Promise.all(
        Object.values(snapshots).map((snap) => ctx.storage.destroySnapshot(snap).catch(() => {})),
      );
      throw err;
    });
  const healthStart = performance.now();
  await Promise.all(
    Object.entries(stack.containers)
      .filter(([, id]) => ids.includes(id))
      .map(([svc]) => waitServiceHealthy(ctx, stack, svc, performance.now())),
  );
  const healthAfterMs = Math.round(performance.now() - healthStart);
  const version: VersionRecord = {
    id: versionId,
    stackId: stack.id,
    specHash: stack.spec.hash,
    spec: stack.spec,
    images: Object.fromEntries(
      Object.entries(stack.spec.services).map(([n, s]) => [n, s.image_digest ?? s.image_pinned ?? s.image]),
    ),
    snapshots,
    frozenMs,
    clockMs,
    createdAt: new Date().toISOString(),
    ...(kept ? { live: kept } : {}),
    ...(stack.egressPolicy ? { egressPolicy: stack.egressPolicy } : {}),
  };
  await ctx.store.putVersion(version);
  stack.versionId = versionId;
  await ctx.store.putStack(stack);
  const datasets: SnapshotEvidence["datasets"] = {};
  for (const [vol, snapId] of Object.entries(snapshots)) {
    datasets[vol] = {
      dataset_id: stack.datasets[vol] as string,
      snapshot_id: snapId,
      bytes: await ctx.storage.snapshotBytes(snapId),
    };
  }
  const outside = await outsideRead.catch(() => ({}));
  // The window's steps, for where its time goes: freezing every service, the captures, the thaw.
  ctx.log("Snapshot taken", {
    stack: stack.id,
    version: versionId,
    frozenMs,
    freezeMs: Math.round(frozenAt - frozenStart),
    captureMs: Math.round(capturedAt - frozenAt),
    thawMs: Math.round(thawedAt - capturedAt),
  });
  return {
    version,
    evidence: {
      version_id: versionId,
      frozen_ms: frozenMs,
      checkpoint,
      datasets,
      health_after_ms: healthAfterMs,
      clock: { mode: stack.spec.clock, at: new Date(clockMs).toISOString() },
      ...(Object.keys(outside).length ? { outside_volumes: outside } : {}),
      ...(kept ? { live: liveEvidence(kept) } : {}),
    },
  };
}

/**
 * Where a process keeps what it runs on, not what it made: an engine's and a program's run-time
 * files, which every start makes anew. Writes there are not the service's data.
 */
const RUNTIME_PATHS = /^\/(tmp|run|var\/run|var\/tmp|var\/lock|dev|proc|sys)(\/|$)/;
/** What denv puts in a container of its own (the agent and its socket). */
const DENV_PATHS = /^\/\.denv(\/|$)/;
/** A few paths named in the evidence; the count says the rest. */
const OUTSIDE_EXAMPLES = 5;

/**
 * Each service's files written outside its volumes (its container's layer, mounts left out by the
 * runtime): added or changed files, leaving out run-time paths and denv's own (its agent, /.denv).
 */
export async function writesOutsideVolumes(
  ctx: StackContext,
  stack: Pick<StackRecord, "containers">,
): Promise<NonNullable<SnapshotEvidence["outside_volumes"]>> {
  const out: NonNullable<SnapshotEvidence["outside_volumes"]> = {};
  await Promise.all(
    Object.entries(stack.containers).map(async ([svc, id]) => {
      const changes = await ctx.runtime.containerChanges(id).catch(() => []);
      const paths = changes.map((c) => c.path).filter((p) => !RUNTIME_PATHS.test(p) && !DENV_PATHS.test(p));
      // A folder listed as changed because something under it changed says nothing of its own.
      const leaves = paths.filter((p) => !paths.some((q) => q !== p && q.startsWith(`${p}/`)));
      if (leaves.length)
        out[svc] = { paths: leaves.length, examples: leaves.sort().slice(0, OUTSIDE_EXAMPLES) };
    }),
  );
  return out;
}

/**
 * Postgres and Redis checkpoint by themselves; x-denv.checkpoint adds commands per service. Without
 * redisSave, Redis is left alone: its append-only file already holds every write, while SAVE writes
 * a dump with the server's memory use in it, which differs between identical runs.
 */
export async function checkpointDatabases(
  ctx: StackContext,
  stack: StackRecord,
  options: { redisSave: boolean } = { redisSave: true },
): Promise<SnapshotEvidence["checkpoint"]> {
  const out: SnapshotEvidence["checkpoint"] = [];
  await Promise.all(
    Object.entries(stack.spec.services).map(async ([svc, s]) => {
      const cmds: { command: string[]; user?: string }[] = (stack.spec.checkpoint[svc] ?? []).map(
        (command) => ({
          command,
        }),
      );
      if (/(^|\/)postgres[^/]*(:|@|$)/.test(s.image)) {
        cmds.unshift({
          command: ["sh", "-c", 'psql -U "${POSTGRES_USER:-postgres}" -d postgres -qc CHECKPOINT'],
          user: "postgres",
        });
      } else if (options.redisSave && /(^|\/)redis[^/]*(:|@|$)/.test(s.image)) {
        cmds.unshift({ command: ["redis-cli", "SAVE"] });
      }
      for (const c of cmds) {
        const r = await ctx.runIn(stack.containers[svc] as string, {
          command: c.command,
          user: c.user ?? null,
          timeoutMs: 120_000,
        });
        out.push({ service: svc, command: c.command, exit_code: r.exitCode, ms: r.durationMs });
      }
    }),
  );
  return out;
}
