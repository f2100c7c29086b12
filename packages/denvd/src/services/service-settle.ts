/**
 * The settle of a deployed service that has no healthcheck: it counts as up once it has stayed
 * running through the settle window after its start (a command that fails straight away must not
 * be frozen into a version as if it ran), or sooner once it is plainly waiting: its cgroup used no
 * CPU for SETTLE_IDLE_MS and its process sleeps on something other than a child it started. A
 * command that fails straight away is busy until it exits, so it never looks idle; a shell waiting
 * on the command it ran (`sh -c 'sleep 0.3; exit 3'`) waits on a child, so it gets the whole
 * window. What this buys: an image sandbox (`sleep infinity`, a server in `accept`) is up in
 * about a tenth of a second instead of a whole one.
 */
import { readFile } from "node:fs/promises";
import { sleep } from "../stack/stack-context.ts";
import { processChildren } from "./process-children.ts";
import { cpuDemandReader, threadState } from "./service-progress.ts";

/** How long a service must use no CPU at all to count as waiting. */
export const SETTLE_IDLE_MS = 100;
/** How often the cgroup is read during a settle. */
const SETTLE_POLL_MS = 25;

/** What a settle saw: the service sat idle waiting, or the window ran out first. */
export type SettleEnd = "idle" | "window";

export interface SettleProbe {
  /** The container's CPU time so far, in ms; null where its cgroup cannot be read. */
  cpuMs(): Promise<number | null>;
  /** Whether the service's process sleeps waiting on something other than a child of its own. */
  waiting(): Promise<boolean>;
  now(): number;
  sleep(ms: number): Promise<void>;
}

/** Waits out a settle window, ending it early when the service sits idle and waiting. */
export async function settleService(probe: SettleProbe, settleMs: number): Promise<SettleEnd> {
  const until = probe.now() + settleMs;
  let cpu = await probe.cpuMs();
  let quietSince = probe.now();
  while (probe.now() < until) {
    await probe.sleep(Math.min(SETTLE_POLL_MS, Math.max(0, until - probe.now())));
    const now = probe.now();
    const next = await probe.cpuMs();
    // A cgroup that cannot be read proves nothing: the whole window is waited out.
    if (next === null || cpu === null) {
      await probe.sleep(Math.max(0, until - probe.now()));
      return "window";
    }
    if (next !== cpu) {
      cpu = next;
      quietSince = now;
      continue;
    }
    if (now - quietSince >= SETTLE_IDLE_MS && (await probe.waiting())) return "idle";
  }
  return "window";
}

/**
 * The settle probe of a running container: its cgroup's CPU demand (time used, and time its
 * threads waited for a CPU: a starved service is still at work), and its service process (the
 * first process, or under docker's init that init's first child) read from /proc. Waiting means
 * asleep (state S, not D: a read from disk is work in progress) in a kernel wait that is not
 * `do_wait` (a parent waiting on its child, whose outcome is still to come).
 */
export function containerSettleProbe(containerId: string, pid: number, init: boolean): SettleProbe {
  return {
    cpuMs: cpuDemandReader(containerId),
    waiting: async () => {
      const service = init ? ((await processChildren(pid))[0] ?? 0) : pid;
      if (!service) return false;
      return processWaiting(service);
    },
    now: () => performance.now(),
    sleep: async (ms) => {
      await sleep(ms);
    },
  };
}

/** Whether a process sleeps (state S) in a kernel wait other than for its children. */
export async function processWaiting(pid: number): Promise<boolean> {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  const [stat, wchan] = await Promise.all([
    readFile(`/proc/${pid}/stat`, "utf8").catch(() => ""),
    readFile(`/proc/${pid}/wchan`, "utf8").catch(() => ""),
  ]);
  return waitingFrom(stat, wchan);
}

/**
 * The reading itself, from `/proc/PID/stat` and `/proc/PID/wchan`. The state is the field after
 * the command's closing parenthesis (a command may hold spaces and parentheses itself). A wchan
 * of "0" or nothing (a kernel that does not say) is not taken as waiting.
 */
export function waitingFrom(stat: string, wchan: string): boolean {
  const state = threadState(stat);
  const where = wchan.trim();
  return (
    state === "S" && where !== "" && where !== "0" && !/^(do_wait|kernel_wait4|__do_sys_wait)/.test(where)
  );
}
