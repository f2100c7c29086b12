/**
 * The life of a stack past its start: prepare (images and empty datasets), warm, fork from a
 * version, rollback to one, destroy, and deleting a version. Each returns the evidence the control
 * plane records for its phase; a failure part-way removes what the step made.
 */

import {
  DenvError,
  type ForkEvidence,
  type HealthEvidence,
  nameProblem,
  type QuotaEvidence,
  type ResolvedSpec,
  resolvedSpecSchema,
  type WarmEvidence,
} from "@denv/protocol";
import { releaseStackClock, setUpClock } from "../clock/stack-clock.ts";
import type { LiveRecord, StackRecord, VersionRecord } from "../host/state-store.ts";
import { assertCpuCanRestore } from "../snapshots/cpu-flags.ts";
import { checkpointsOf, liveSubnets, removeLive, restoreService } from "../snapshots/live-capture.ts";
import { assertSpace } from "../snapshots/snapshotter.ts";
import type { EgressEvidence } from "./egress-probe.ts";
import { newId, type StackContext, tail } from "./stack-context.ts";
import { probeService, probeStack } from "./stack-egress.ts";
import { startStack } from "./stack-starter.ts";
import { removeStackObjects, teardownStack } from "./stack-teardown.ts";

export interface PrepareEvidence {
  images: Record<string, { reference: string; pulled: boolean }>;
  datasets: Record<string, string>;
  quota: Record<string, QuotaEvidence>;
  data_from?: { version_id: string; cloned: string[] };
}

/**
 * prepare: images present (pulled by digest when missing) and fresh, empty datasets; or, given a
 * version (a preview deployed onto alpha's data), each volume the version also has cloned from its
 * snapshot there.
 */
export interface PrepareOptions {
  name: string;
  operationId?: string;
  stackId?: string;
  dataFromVersionId?: string;
  /** Service → the GPU UUIDs the control plane gave it. */
  gpus?: Record<string, string[]>;
}

export async function prepareStack(
  ctx: StackContext,
  spec: ResolvedSpec,
  options: PrepareOptions,
): Promise<{ stack: StackRecord; evidence: PrepareEvidence }> {
  checkSpec(spec);
  const from = options.dataFromVersionId ? ctx.version(options.dataFromVersionId) : null;
  const images: PrepareEvidence["images"] = {};
  for (const [name, svc] of Object.entries(spec.services)) {
    const ref = svc.image_pinned ?? svc.image;
    let pulled = false;
    if (!(await ctx.runtime.hasImage(ref))) {
      if (!svc.image_pinned || svc.image_pinned.startsWith("sha256:")) {
        throw new DenvError(
          "image_not_found",
          `the engine has no image ${ref} for service ${name}, and it cannot be pulled`,
        );
      }
      await ctx.runtime.pullImage(ref);
      pulled = true;
    }
    images[name] = { reference: ref, pulled };
  }
  const stack = await newStackRecord(
    ctx,
    spec,
    options.name,
    null,
    options.operationId,
    options.stackId,
    options.gpus,
  );
  try {
    // A deploy's stack runs on a clock that starts now: its snapshot fixes the version's time.
    await setUpClock(ctx, stack, { baseMs: Date.now(), held: false });
    // Every dataset at once: ops-world's three clones take 36–40 ms together against 69–78 ms one
    // after another. Each ends before a failure is raised: the teardown finds none being made.
    const made = await Promise.allSettled(
      Object.entries(stack.datasets).map(async ([vol, ds]) => {
        const snap = from?.snapshots[vol];
        if (snap) {
          await ctx.storage.clone(snap, ds);
          ctx.log("Cloned dataset", { stack: stack.id, volume: vol, dataset: ds, version: from?.id });
          return;
        }
        await ctx.storage.createDataset(ds);
        ctx.log("Created dataset", { stack: stack.id, volume: vol, dataset: ds });
      }),
    );
    for (const m of made) if (m.status === "rejected") throw m.reason;
    const cloned = Object.keys(stack.datasets).filter((vol) => from?.snapshots[vol]);
    const quota = await limitDatasets(ctx, stack);
    return {
      stack,
      evidence: {
        images,
        datasets: { ...stack.datasets },
        quota,
        ...(from ? { data_from: { version_id: from.id, cloned } } : {}),
      },
    };
  } catch (err) {
    await teardownStack(ctx, stack).catch(() => {});
    throw err;
  }
}

/** warm: x-denv.warm commands, in order, each in its service; a failure stops the deploy. */
export async function warmStack(ctx: StackContext, stackId: string): Promise<WarmEvidence> {
  const stack = ctx.stack(stackId);
  const commands: WarmEvidence["commands"] = [];
  for (const w of stack.spec.warm) {
    const r = await ctx.runIn(stack.containers[w.service] as string, {
      command: w.command,
      timeoutMs: 600_000,
    });
    commands.push({
      service: w.service,
      command: w.command,
      exit_code: r.exitCode,
      ms: r.durationMs,
      stdout_tail: tail(r.stdout),
      stderr_tail: tail(r.stderr),
    });
    if (r.exitCode !== 0) {
      throw new DenvError(
        "service_failed",
        `warm command in ${w.service} exited with ${r.exitCode}: ${tail(r.stderr).slice(-300)}`,
        { details: { commands } },
      );
    }
  }
  return { commands };
}

export interface ForkStackOptions {
  name: string;
  operationId?: string;
  holdClock?: boolean;
  stackId?: string;
  gpus?: Record<string, string[]>;
  /** Start every service afresh, even from a live version. */
  cold?: boolean;
}

/**
 * A new stack from a version: datasets cloned, a new network, the pinned images, healthy. From a
 * live version (unless cold), each service it holds the processes of is restored instead of started.
 */
export async function forkStack(
  ctx: StackContext,
  versionId: string,
  options: ForkStackOptions,
): Promise<{ stack: StackRecord; evidence: ForkEvidence }> {
  const version = ctx.version(versionId);
  await assertSpace(ctx, "fork");
  const live = version.live && !options.cold ? version.live : null;
  const cp = live ? await checkpointsOf(ctx) : null;
  if (live) await assertCpuCanRestore(version.id, live.cpuFlags);
  const total = performance.now();
  const stack = await newStackRecord(
    ctx,
    version.spec,
    options.name,
    version.id,
    options.operationId,
    options.stackId,
    options.gpus,
    version.egressPolicy,
  );
  try {
    // Held at the version's time while the fork starts and is checked: every fork is handed over
    // reading the same time, however long its start took.
    await setUpClock(ctx, stack, { baseMs: versionClockMs(version), held: true });
    const cloneStart = performance.now();
    await Promise.all(
      Object.entries(stack.datasets).map(([vol, ds]) =>
        ctx.storage.clone(version.snapshots[vol] as string, ds),
      ),
    );
    const quota = await limitDatasets(ctx, stack);
    const cloneMs = Math.round(performance.now() - cloneStart);
    // The probe runs as soon as the service it probes from is up, alongside the health checks.
    const probeFrom = probeService(version.spec);
    let probe: Promise<EgressEvidence> | undefined;
    const started = await startStack(ctx, stack.id, {
      ...(live && cp
        ? {
            avoidSubnets: await liveSubnets(ctx, version.id, live),
            restore: (svc: string, containerId: string) => {
              const kept = live.services[svc];
              if (!kept) return null;
              // Its connections to the stack's other services go on with their old addresses.
              return cp
                .admitRestoredAddresses(stack.network)
                .then(() => restoreService(ctx, cp, version.id, svc, containerId, kept.digest));
            },
          }
        : {}),
      onStarted: (svc) => {
        if (svc !== probeFrom) return;
        probe = probeStack(ctx, stack.id);
        probe.catch(() => {}); // awaited below; this only keeps an early failure from going unhandled
      },
    });
    // An early probe that lost its service (a one-shot that exited under it before the others ran)
    // is run again now that every service has started.
    const egress = await (probe?.catch(() => probeStack(ctx, stack.id)) ?? probeStack(ctx, stack.id));
    if (!options.holdClock) await releaseStackClock(ctx, stack.id);
    return {
      stack: ctx.stack(stack.id),
      evidence: {
        stack_id: stack.id,
        from_version: version.id,
        clone_ms: cloneMs,
        quota,
        start: started.evidence,
        start_ms: started.ms,
        health: started.health,
        egress,
        clock: started.clock,
        ...(version.live ? { live: forkLiveEvidence(version.live, options.cold ?? false) } : {}),
        total_ms: Math.round(performance.now() - total),
      },
    };
  } catch (err) {
    await teardownStack(ctx, ctx.store.stack(stack.id) ?? stack).catch(() => {});
    throw err;
  }
}

/** Restores a stack to a version: containers replaced, datasets re-cloned, healthy again. */
export async function rollbackStack(
  ctx: StackContext,
  stackId: string,
  versionId: string,
): Promise<{ health: HealthEvidence; ms: number }> {
  const stack = ctx.stack(stackId);
  const version = ctx.version(versionId);
  const begun = performance.now();
  // Written first: a kill anywhere below leaves a stack that the next open restores (reconcile.ts),
  // where "creating" would have it removed.
  stack.status = "restoring";
  stack.restoreVersionId = version.id;
  await ctx.store.putStack(stack);
  await removeStackObjects(ctx, stack);
  for (const [vol, ds] of Object.entries(stack.datasets)) {
    await ctx.storage.destroyDataset(ds);
    const snap = version.snapshots[vol];
    if (snap) await ctx.storage.clone(snap, ds);
    else await ctx.storage.createDataset(ds);
  }
  await limitDatasets(ctx, stack);
  stack.spec = version.spec;
  stack.versionId = version.id;
  stack.containers = {};
  // The egress policy is the version's too: the one set while it ran, else its file's.
  if (version.egressPolicy) stack.egressPolicy = version.egressPolicy;
  else delete stack.egressPolicy;
  // The restored stack runs again: nothing of it is frozen or paused any more.
  delete stack.frozen;
  delete stack.paused;
  await ctx.store.putStack(stack);
  await setUpClock(ctx, stack, { baseMs: versionClockMs(version), held: true });
  const { health } = await startStack(ctx, stack.id);
  await releaseStackClock(ctx, stack.id);
  return { health, ms: Math.round(performance.now() - begun) };
}

/** Removes containers, volumes, networks and datasets. Idempotent: an unknown id is already gone. */
export async function destroyStack(ctx: StackContext, stackId: string): Promise<void> {
  const stack = ctx.store.stack(stackId);
  if (!stack) return;
  stack.status = "destroying";
  await ctx.store.putStack(stack);
  await teardownStack(ctx, stack);
}

/** Deletes a version's snapshots and its record. */
export async function deleteVersion(ctx: StackContext, versionId: string): Promise<void> {
  const v = ctx.store.version(versionId);
  if (!v) return;
  for (const snap of Object.values(v.snapshots)) await ctx.storage.destroySnapshot(snap);
  await removeLive(ctx, versionId);
  await ctx.store.deleteVersion(versionId);
}

/** Which services a fork of a live version restored, and which it started afresh with why. */
function forkLiveEvidence(live: LiveRecord, cold: boolean): NonNullable<ForkEvidence["live"]> {
  if (cold) return { restored: [], started: { "*": "a cold fork starts every service afresh" } };
  return { restored: Object.keys(live.services).sort(), started: { ...live.skipped } };
}

/** The time a fork of a version starts at: its snapshot's clock (versions from before: their creation). */
function versionClockMs(version: VersionRecord): number {
  return version.clockMs ?? Date.parse(version.createdAt);
}

/** Caps every dataset's growth (the storage driver's quota), before any container can write. */
async function limitDatasets(ctx: StackContext, stack: StackRecord): Promise<Record<string, QuotaEvidence>> {
  const growth = ctx.options.datasetGrowthBytes ?? 10 * 1024 ** 3;
  const entries = await Promise.all(
    Object.entries(stack.datasets).map(
      async ([vol, ds]) => [vol, await ctx.storage.limitGrowth(ds, growth)] as const,
    ),
  );
  return Object.fromEntries(entries);
}

async function newStackRecord(
  ctx: StackContext,
  spec: ResolvedSpec,
  name: string,
  parentVersionId: string | null,
  operationId: string | undefined,
  chosenId: string | undefined,
  gpus?: Record<string, string[]>,
  /** The policy its version's stack had set while it ran (a fork keeps it). */
  egressPolicy?: { allow: string[]; deny: string[] },
): Promise<StackRecord> {
  if (chosenId && ctx.store.stack(chosenId))
    throw new DenvError("conflict", `a stack ${chosenId} already exists on this host`);
  const id = chosenId ?? newId("stk");
  const stack: StackRecord = {
    id,
    name,
    status: "creating",
    spec,
    versionId: parentVersionId,
    parentVersionId,
    network: `denv-${id}`,
    datasets: Object.fromEntries(Object.keys(spec.datasets).map((v) => [v, `${id}-${v}`])),
    containers: {},
    operationId: operationId ?? newId("op"),
    createdAt: new Date().toISOString(),
    ...(gpus && Object.keys(gpus).length ? { gpus } : {}),
    ...(egressPolicy ? { egressPolicy } : {}),
  };
  // Recorded before anything exists, so a crash at any later point is found and cleaned up.
  await ctx.store.putStack(stack);
  return stack;
}

/**
 * What denvd takes from the control plane is checked before anything is made: the spec's shape,
 * and every name against the rule all drivers and the engine accept. A spec that fails is refused
 * whole, leaving no record, dataset or object behind.
 */
export function checkSpec(spec: ResolvedSpec): void {
  const parsed = resolvedSpecSchema.safeParse(spec);
  if (!parsed.success)
    throw new DenvError(
      "invalid_argument",
      `the spec is not a resolved spec: ${parsed.error.issues[0]?.message ?? ""}`,
    );
  const names: [string, string][] = [
    ...Object.keys(spec.services).map((n): [string, string] => ["service", n]),
    ...Object.keys(spec.datasets).map((n): [string, string] => ["volume", n]),
    ...Object.keys(spec.networks).map((n): [string, string] => ["network", n]),
  ];
  for (const [kind, name] of names) {
    const problem = nameProblem(name);
    if (problem) throw new DenvError("invalid_argument", `${kind} name "${name}" ${problem}`);
  }
}
