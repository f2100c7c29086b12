/**
 * Pause that keeps memory: every running service's processes checkpointed (CRIU, through the
 * engine) and stopped, their memory freed, while the containers, their layers, volumes and network
 * stay; resume starts each from its checkpoint in start order, and the processes carry on where
 * they were. What CRIU cannot take is refused before anything stops (live-capture.ts's checks).
 * Established TCP connections come back closed, as in a fork of a live version (docs/live-versions.md).
 */
import { DenvError, type HealthEvidence } from "@denv/protocol";
import { startInOrder } from "../services/service-health.ts";
import { checkpointsOf, detachAgents, planLive } from "../snapshots/live-capture.ts";
import type { StackContext } from "./stack-context.ts";

export interface PauseEvidence {
  services: Record<string, { checkpoint_bytes: number; dump_ms: number }>;
  ms: number;
}

export async function pauseStack(ctx: StackContext, stackId: string): Promise<PauseEvidence> {
  const stack = ctx.stack(stackId);
  if (stack.status !== "running")
    throw new DenvError("conflict", `environment ${stack.name} is ${stack.status}, not running`);
  if (stack.frozen?.length)
    throw new DenvError("conflict", `environment ${stack.name} is frozen by verify: resume it first`);
  const cp = await checkpointsOf(ctx);
  const plan = await planLive(ctx, stack, "on", { keepOutside: true });
  const begun = performance.now();
  const reattach = await detachAgents(ctx, stack, plan.services);
  const services: PauseEvidence["services"] = {};
  try {
    // Dependents first: a service stops before those it depends on.
    for (const svc of [...stack.spec.start_order].reverse()) {
      if (!plan.services.includes(svc)) continue;
      const r = await cp.suspend(stack.containers[svc] as string).catch((err: unknown) => {
        if (!(err instanceof DenvError)) throw err;
        throw new DenvError(err.code, `service ${svc}: ${err.message}`, { cause: err });
      });
      services[svc] = { checkpoint_bytes: r.bytes, dump_ms: r.ms };
    }
  } catch (err) {
    // Those already stopped start again from their checkpoints: the environment runs as before.
    for (const svc of stack.spec.start_order.filter((s) => services[s]))
      await cp.unsuspend(stack.containers[svc] as string).catch(() => {});
    await reattach();
    throw err;
  }
  stack.status = "paused";
  stack.paused = Object.keys(services);
  await ctx.store.putStack(stack);
  // Listening again at once: each restored agent dials in when its service resumes.
  await reattach();
  ctx.log("Paused stack", { stack: stack.id, services: stack.paused });
  return { services, ms: Math.round(performance.now() - begun) };
}

export async function unpauseStack(
  ctx: StackContext,
  stackId: string,
): Promise<{ health: HealthEvidence; ms: number }> {
  const stack = ctx.stack(stackId);
  if (stack.status !== "paused")
    throw new DenvError("conflict", `environment ${stack.name} is ${stack.status}, not paused`);
  const cp = await checkpointsOf(ctx);
  const begun = performance.now();
  const paused = new Set(stack.paused ?? []);
  const health = await startInOrder(ctx, stack, undefined, 0, async (svc, id) => {
    // A service that was not running when paused (a one-shot that had finished) stays as it was.
    if (!paused.has(svc)) return;
    await cp.unsuspend(id);
    if (ctx.options.agentBinary) await ctx.agents.waitConnected(stack.id, svc, 5000);
  });
  stack.status = "running";
  delete stack.paused;
  await ctx.store.putStack(stack);
  return { health, ms: Math.round(performance.now() - begun) };
}
