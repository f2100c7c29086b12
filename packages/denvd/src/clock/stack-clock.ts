/**
 * A stack's clock through its life: set up before its containers exist (a deploy's runs from now,
 * a fork's and a rollback's are held at their version's time), read back per service once the
 * services are healthy (the start evidence), released when the stack is handed over, read at a
 * snapshot (the version's time), removed with the stack.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { type ClockEvidence, DenvError } from "@denv/protocol";
import type { StackRecord } from "../host/state-store.ts";
import type { StackContext } from "../stack/stack-context.ts";
import { serviceClockReach } from "./clock-reach.ts";
import {
  CLOCK_TICK_MS,
  clockDirOf,
  clockReadingMs,
  holdClock,
  isFrozen,
  readClock,
  releaseClock,
  removeClock,
  writeClock,
} from "./clock-state.ts";

/** Makes the stack's clock when its spec freezes it and this host has the clock library. */
export async function setUpClock(
  ctx: StackContext,
  stack: StackRecord,
  options: { baseMs: number; held: boolean },
): Promise<void> {
  await removeClock(ctx.options.stateDir, stack.id);
  const library = ctx.options.clockLibrary;
  if (!isFrozen(stack.spec) || !library) return;
  await writeClock(ctx.options.stateDir, stack.id, library, options);
}

/** The directory containers mount, when the stack has a frozen clock. */
export function clockDirFor(ctx: StackContext, stack: StackRecord): string | null {
  const dir = clockDirOf(ctx.options.stateDir, stack.id);
  return isFrozen(stack.spec) && existsSync(join(dir, "state")) ? dir : null;
}

/** What the stack's clock reads now (the real clock when it has none). */
export async function stackClockMs(ctx: StackContext, stack: StackRecord): Promise<number> {
  const s = isFrozen(stack.spec) ? await readClock(ctx.options.stateDir, stack.id) : null;
  return s ? clockReadingMs(s) : Date.now();
}

export async function releaseStackClock(
  ctx: StackContext,
  stackId: string,
  tickMs?: number,
): Promise<string | null> {
  const stack = ctx.stack(stackId);
  const s = isFrozen(stack.spec) ? await releaseClock(ctx.options.stateDir, stack.id, tickMs) : null;
  return s ? new Date(clockReadingMs(s)).toISOString() : null;
}

/**
 * Stops a stack's clock at what it reads now plus `advanceMs`; its reading, or null when it has no
 * frozen clock.
 */
export async function holdStackClock(
  ctx: StackContext,
  stackId: string,
  advanceMs?: number,
): Promise<string | null> {
  const stack = ctx.stack(stackId);
  const s = isFrozen(stack.spec) ? await holdClock(ctx.options.stateDir, stack.id, advanceMs) : null;
  return s ? new Date(s.baseMs).toISOString() : null;
}

export const dropClock = (ctx: StackContext, stackId: string) => removeClock(ctx.options.stateDir, stackId);

/**
 * Each service's clock, read from its running program. A frozen stack whose service reads the
 * real clock is a warning, and a failure with frozen-strict: never silently real.
 */
export async function clockStartEvidence(ctx: StackContext, stack: StackRecord): Promise<ClockEvidence> {
  const mode = stack.spec.clock;
  const state = isFrozen(stack.spec) ? await readClock(ctx.options.stateDir, stack.id) : null;
  const services: ClockEvidence["services"] = {};
  const warnings: string[] = [];
  if (mode !== "real") {
    await Promise.all(
      Object.entries(stack.containers).map(async ([svc, id]) => {
        if (!state) {
          services[svc] = {
            frozen: false,
            program: null,
            linkage: "unknown",
            reason: "this host has no clock library (denv-clock): the stack runs on the real clock",
          };
          return;
        }
        const st = await ctx.runtime.inspectContainer(id);
        services[svc] = await serviceClockReach(st.running ? st.pid : 0);
      }),
    );
    for (const [svc, r] of Object.entries(services).sort(([a], [b]) => a.localeCompare(b)))
      if (!r.frozen) warnings.push(`service ${svc} reads the real clock: ${r.reason}`);
  }
  const evidence: ClockEvidence = {
    mode,
    base: state ? new Date(state.baseMs).toISOString() : null,
    tick_ms: state ? CLOCK_TICK_MS : null,
    held: state ? state.epochNs === null : false,
    services,
    warnings,
  };
  if (mode === "frozen-strict" && warnings.length > 0)
    throw new DenvError(
      "invalid_argument",
      `x-denv.clock is frozen-strict but ${warnings.join("; ")}. Use a dynamically linked program, or clock: frozen to accept it with a warning`,
      { details: { clock: evidence } },
    );
  return evidence;
}
