/**
 * Waiting in tests: on what the test can observe, never for a fixed time. `waitFor` polls a probe
 * until it answers (anything but undefined, null or false) and hands that answer back; it gives up
 * only at a deadline far past any machine's slowness (the suite must pass on a busy machine), and
 * then says what it waited for and what it last saw. `elapse` is the one fixed wait, for the tests
 * whose point is that time passes (a frozen clock, a process that must not be woken): it names why.
 * test/harness/suite-rules.test.ts refuses any other sleep in the suite.
 */
import { setTimeout as sleep } from "node:timers/promises";

export interface WaitOptions {
  /** Between probes (default 50 ms). */
  intervalMs?: number;
  /** When to give up (default 10 minutes: a deadline for a hung test, not a budget). */
  timeoutMs?: number;
}

const DEFAULT_TIMEOUT_MS = 600_000;

/** Polls `probe` until it answers; its answer. Throws, naming `what` and the last answer or error. */
export async function waitFor<T>(
  what: string,
  probe: () => T | Promise<T>,
  options: WaitOptions = {},
): Promise<Exclude<T, undefined | null | false>> {
  const intervalMs = options.intervalMs ?? 50;
  const deadline = Date.now() + (options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  let last: unknown;
  for (;;) {
    try {
      const answer = await probe();
      if (answer !== undefined && answer !== null && answer !== false)
        return answer as Exclude<T, undefined | null | false>;
      last = answer;
    } catch (err) {
      last = err;
    }
    if (Date.now() >= deadline) {
      const seen = last instanceof Error ? `${last.name}: ${last.message}` : JSON.stringify(last);
      throw new Error(`waited ${options.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms for ${what}; last seen: ${seen}`);
    }
    await sleep(intervalMs);
  }
}

/**
 * Lets `ms` pass, for a test whose subject is time passing (what must not happen in it, a clock
 * that must not move). `why` is required: it is what a reader needs to accept a fixed wait.
 */
export async function elapse(ms: number, why: string): Promise<void> {
  if (!why.trim()) throw new Error("elapse: say why a fixed wait is the test's subject");
  await sleep(ms);
}
