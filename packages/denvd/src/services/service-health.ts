/**
 * Starting a stack's services in dependency order, and judging their health. Each service starts
 * as soon as its depends_on conditions hold; health is judged by running each healthcheck's test
 * ourselves every healthPollMs (as the service's user): the engine's own first check comes only
 * after `interval`, which would put seconds into every fork.
 */

import { DenvError, type HealthEvidence, type ResolvedService } from "@denv/protocol";
import type { StackRecord } from "../host/state-store.ts";
import { dropDefaultRoute } from "../stack/egress-probe.ts";
import { type StackContext, sleep } from "../stack/stack-context.ts";
import { lastOutputLines, outputEnding } from "./last-output.ts";
import { CpuProgress, cpuDemandReader } from "./service-progress.ts";
import { containerSettleProbe, type SettleEnd, settleService } from "./service-settle.ts";

/** The least a service is given to become healthy, whatever its healthcheck's timings. */
const HEALTH_DEADLINE_FLOOR_MS = 60_000;
/** A service still at work past its deadline is given up to this many times the deadline. */
const HEALTH_CEILING_FACTOR = 4;
/**
 * At a deploy, a service without a healthcheck counts as up once it has stayed running this long
 * after its start, or sooner once it sits idle waiting (service-settle.ts). Judged at once, a
 * command that exits straight away (`echo going; exit 3`) was still running on a busy host when it
 * was looked at, and a version was frozen with it dead.
 */
export const DEPLOY_SETTLE_MS = 1000;
/** How far back a service's CPU time is looked at to judge whether it is at work. */
const PROGRESS_WINDOW_MS = 5000;
/** How often a service given time past its deadline is checked. */
const PAST_DEADLINE_POLL_MS = 1000;

type ServiceHealth = HealthEvidence["services"][string];

export async function startInOrder(
  ctx: StackContext,
  stack: StackRecord,
  onStarted?: (service: string) => void,
  settleMs = 0,
  startOne: (service: string, containerId: string) => Promise<void> = (_svc, id) =>
    ctx.runtime.startContainer(id),
): Promise<HealthEvidence> {
  const spec = stack.spec;
  const pollMs = ctx.options.healthPollMs ?? 100;
  const begun = performance.now();
  const startedP = new Map<string, Promise<number>>();
  const healthyP = new Map<string, Promise<ServiceHealth>>();
  const exitedP = new Map<string, Promise<void>>();
  const memo = <T>(map: Map<string, Promise<T>>, svc: string, make: () => Promise<T>): Promise<T> => {
    let p = map.get(svc);
    if (!p) {
      p = make();
      map.set(svc, p);
    }
    return p;
  };
  const getStarted = (svc: string): Promise<number> =>
    memo(startedP, svc, async () => {
      const s = spec.services[svc] as ResolvedService;
      await Promise.all(
        Object.entries(s.depends_on).map(([dep, cond]) =>
          cond.condition === "service_healthy"
            ? getHealthy(dep)
            : cond.condition === "service_completed_successfully"
              ? getExited(dep)
              : getStarted(dep),
        ),
      );
      const t = performance.now();
      await startOne(svc, stack.containers[svc] as string).catch((err: unknown) => {
        if (!(err instanceof DenvError)) throw err;
        throw new DenvError(err.code, `service ${svc} did not start: ${err.message}`, { cause: err });
      });
      ctx.log("Started container", { stack: stack.id, service: svc });
      if (spec.egress === "deny" && s.network_mode !== "none" && !s.network_mode?.startsWith("service:")) {
        const st = await ctx.runtime.inspectContainer(stack.containers[svc] as string);
        if (st.running && st.pid) await dropDefaultRoute(st.pid);
      }
      onStarted?.(svc);
      return t;
    });
  const getHealthy = (svc: string) =>
    memo(healthyP, svc, () => getStarted(svc).then((t) => waitServiceHealthy(ctx, stack, svc, t, settleMs)));
  const getExited = (svc: string) =>
    memo(exitedP, svc, () =>
      getStarted(svc).then(async () => {
        for (;;) {
          const st = await ctx.runtime.inspectContainer(stack.containers[svc] as string);
          if (!st.running) {
            if (st.exitCode !== 0)
              throw await exitedError(
                ctx,
                svc,
                stack.containers[svc] as string,
                st.exitCode,
                "before it completed",
              );
            return;
          }
          await sleep(pollMs);
        }
      }),
    );
  const results = await Promise.all(
    spec.start_order.map(async (svc) => {
      // A one-shot service that others wait on to complete is not expected to stay up.
      const oneShot = Object.values(spec.services).some(
        (o) => o.depends_on[svc]?.condition === "service_completed_successfully",
      );
      if (oneShot) {
        const t = await getStarted(svc);
        await getExited(svc);
        return [
          svc,
          { healthy_ms: Math.round(performance.now() - t), method: "running" as const, checks: 0 },
        ] as const;
      }
      return [svc, await getHealthy(svc)] as const;
    }),
  );
  return { services: Object.fromEntries(results), ms: Math.round(performance.now() - begun) };
}

/**
 * Healthy by its healthcheck (run as the service's user), or running when it declares none (still
 * running `settleMs` after it is asked, when given: its start has returned by then).
 */
export async function waitServiceHealthy(
  ctx: StackContext,
  stack: StackRecord,
  svc: string,
  startedAt: number,
  settleMs = 0,
): Promise<ServiceHealth> {
  const s = stack.spec.services[svc] as ResolvedService;
  const id = stack.containers[svc] as string;
  const hc = s.healthcheck;
  const pollMs = ctx.options.healthPollMs ?? 100;
  if (!hc || s.healthcheck_disabled) {
    // From now, not from startedAt: on a busy host the engine's start itself can take a second.
    let settled: SettleEnd | undefined;
    if (settleMs > 0) {
      const first = await ctx.runtime.inspectContainer(id);
      if (first.running && first.pid > 0)
        settled = await settleService(containerSettleProbe(id, first.pid, Boolean(s.init)), settleMs);
    }
    const st = await ctx.runtime.inspectContainer(id);
    if (!st.running) throw await exitedError(ctx, svc, id, st.exitCode, "right after it started");
    return {
      healthy_ms: Math.round(performance.now() - startedAt),
      method: "running",
      checks: 0,
      ...(settled ? { settled } : {}),
    };
  }
  const limits = ctx.options.healthDeadline ?? {};
  const deadlineMs = Math.max(
    limits.floorMs ?? HEALTH_DEADLINE_FLOOR_MS,
    hc.start_period_ms + hc.interval_ms * (hc.retries + 1),
  );
  const ceilingMs = limits.ceilingMs ?? deadlineMs * HEALTH_CEILING_FACTOR;
  const progress = new CpuProgress(cpuDemandReader(id), limits.progressWindowMs ?? PROGRESS_WINDOW_MS);
  await progress.sample();
  const [kind, ...rest] = hc.test;
  const cmd = kind === "CMD-SHELL" ? ["sh", "-c", rest[0] ?? "true"] : rest;
  let checks = 0;
  let last = "";
  let extended = false;
  let wasBusy = false;
  const healthyNow = async (): Promise<boolean> => {
    checks++;
    const r = await progress
      .excluding(() =>
        ctx.runIn(id, { command: cmd, timeoutMs: Math.min(hc.timeout_ms, 10_000), maxOutputBytes: 4096 }),
      )
      .catch((e: unknown) => ({ exitCode: -1, stdout: Buffer.alloc(0), stderr: Buffer.from(String(e)) }));
    if (r.exitCode === 0) return true;
    last = `${r.stdout.toString()}${r.stderr.toString()}`.trim().slice(-300);
    return false;
  };
  const healthy = () =>
    ({ healthy_ms: Math.round(performance.now() - startedAt), method: "healthcheck", checks }) as const;
  for (;;) {
    const elapsedMs = performance.now() - startedAt;
    if (elapsedMs >= deadlineMs) {
      // Past the deadline only a service still at work (its CPU time growing) waits on, or one not
      // watched for a whole window yet.
      const verdict = progress.verdict();
      if (elapsedMs >= ceilingMs) break;
      if (verdict === "idle") {
        // A service goes idle the moment its work is done, which is often the moment it turns
        // healthy: the check before the pause may have come just before that. One more decides.
        if (await healthyNow()) return healthy();
        break;
      }
      extended = true;
      if (verdict === "busy") wasBusy = true;
    }
    if (await healthyNow()) return healthy();
    const st = await ctx.runtime.inspectContainer(id);
    if (!st.running) throw await exitedError(ctx, svc, id, st.exitCode, "before it was healthy");
    // Past the deadline, checks come less often: the window then sees mostly the service's own work.
    await sleep(extended ? Math.max(pollMs, PAST_DEADLINE_POLL_MS) : pollMs);
    await progress.sample();
  }
  // A service that ended meanwhile is reported as ended, whichever check saw the deadline pass
  // first (on a slow machine the first check can outlast the deadline).
  const ended = await ctx.runtime.inspectContainer(id);
  if (!ended.running) throw await exitedError(ctx, svc, id, ended.exitCode, "before it was healthy");
  const elapsedMs = Math.round(performance.now() - startedAt);
  const why =
    elapsedMs >= ceilingMs
      ? `within ${Math.round(ceilingMs)} ms (the most a service still at work is given)`
      : wasBusy
        ? `within ${elapsedMs} ms (given past its ${deadlineMs} ms deadline while it was at work, then it went idle)`
        : `within ${elapsedMs} ms (its deadline ${deadlineMs} ms), and it was idle at the end`;
  const lines = await lastOutputLines(ctx.runtime, id);
  throw new DenvError(
    "timeout",
    `service ${svc} was not healthy ${why} (last check: ${last || "no output"})${outputEnding(lines)}`,
    { details: { service: svc, last_lines: lines } },
  );
}

/**
 * A service's container that ended: its exit code and last lines of output, in the message and in
 * the details a failed phase's evidence keeps, read at once rather than at a health deadline.
 */
async function exitedError(
  ctx: StackContext,
  svc: string,
  containerId: string,
  exitCode: number,
  when: string,
): Promise<DenvError> {
  const lines = await lastOutputLines(ctx.runtime, containerId);
  return new DenvError(
    "service_failed",
    `service ${svc} exited with code ${exitCode} ${when}${outputEnding(lines)}`,
    {
      details: { service: svc, exit_code: exitCode, last_lines: lines },
    },
  );
}
