/**
 * Whether a starting service is still at work, read from its cgroup's CPU time. A health deadline
 * that counts wall-clock time alone fails a database replaying its log on a loaded host (twenty
 * forks starting at once on two cores, a CPU hog beside them) although it is a few seconds from
 * ready; one that waits for ever never fails a service whose healthcheck cannot pass. So the
 * deadline follows observed progress: past it, a service whose processes used CPU in the last
 * window is given another poll, up to a ceiling; one that sat idle fails there and then.
 */
import { readFile } from "node:fs/promises";

/** Where a container's CPU time may be, by cgroup version and driver (cgroupfs, systemd). */
function usageFiles(containerId: string): { path: string; unit: "ns" | "usec" }[] {
  return [
    { path: `/sys/fs/cgroup/cpuacct/docker/${containerId}/cpuacct.usage`, unit: "ns" },
    { path: `/sys/fs/cgroup/cpuacct/system.slice/docker-${containerId}.scope/cpuacct.usage`, unit: "ns" },
    { path: `/sys/fs/cgroup/system.slice/docker-${containerId}.scope/cpu.stat`, unit: "usec" },
    { path: `/sys/fs/cgroup/docker/${containerId}/cpu.stat`, unit: "usec" },
  ];
}

/** A container's CPU time in ms so far, or null where its cgroup cannot be read. */
export async function cpuUsageMs(containerId: string): Promise<number | null> {
  // The id comes from the engine; anything but hex would be a path of someone else's choosing.
  if (!/^[0-9a-f]{12,64}$/.test(containerId)) return null;
  for (const f of usageFiles(containerId)) {
    const text = await readFile(f.path, "utf8").catch(() => null);
    if (text === null) continue;
    if (f.unit === "ns") {
      const ns = Number(text.trim());
      return Number.isFinite(ns) ? ns / 1e6 : null;
    }
    const usec = /^usage_usec (\d+)$/m.exec(text)?.[1];
    return usec === undefined ? null : Number(usec) / 1000;
  }
  return null;
}

/** Where a container's thread ids are listed, by cgroup version and driver, as for usageFiles. */
function threadFiles(containerId: string): string[] {
  return [
    `/sys/fs/cgroup/cpuacct/docker/${containerId}/tasks`,
    `/sys/fs/cgroup/cpuacct/system.slice/docker-${containerId}.scope/tasks`,
    `/sys/fs/cgroup/system.slice/docker-${containerId}.scope/cgroup.threads`,
    `/sys/fs/cgroup/docker/${containerId}/cgroup.threads`,
  ];
}

/** The most threads read per sample: the pids cap bounds a container, this bounds the cost. */
const MAX_THREADS_READ = 2048;

/**
 * A container's CPU demand so far, in ms: the CPU time it used, the time its threads waited on a
 * run queue for a CPU (the second field of /proc/TID/schedstat), and, when one of its threads is
 * runnable (state R) at a reading, the whole time since the reading before. A service at work on a
 * host that starves it (two hogs beside twenty forks: the engine's whole cgroup then gets a sliver
 * of the cores) uses little CPU but wants it all the time; one sitting idle does neither. The
 * kernel counts a wait only when the thread next gets a CPU, which a thread weighed down enough
 * may not within a window: the runnable state says so at once. The waits of threads that ended
 * leave the sum, so each thread's wait is counted by its growth, and the reading only ever grows.
 * Null where the cgroup cannot be read.
 */
export function cpuDemandReader(
  containerId: string,
  now: () => number = () => performance.now(),
): () => Promise<number | null> {
  const waitedNs = new Map<number, number>();
  let waitedMs = 0;
  let lastReadMs: number | null = null;
  return async () => {
    const used = await cpuUsageMs(containerId);
    if (used === null) return null;
    let listed: string | null = null;
    for (const f of threadFiles(containerId)) {
      listed = await readFile(f, "utf8").catch(() => null);
      if (listed !== null) break;
    }
    const tids = (listed ?? "")
      .split("\n")
      .filter((t) => /^[1-9]\d{0,9}$/.test(t))
      .slice(0, MAX_THREADS_READ)
      .map(Number);
    const seen = new Set<number>();
    let runnable = false;
    for (const tid of tids) {
      const [sched, stat] = await Promise.all([
        readFile(`/proc/${tid}/schedstat`, "utf8").catch(() => ""),
        readFile(`/proc/${tid}/stat`, "utf8").catch(() => ""),
      ]);
      if (threadState(stat) === "R") runnable = true;
      const ns = Number(sched.split(" ")[1]);
      if (!Number.isFinite(ns) || ns < 0) continue;
      seen.add(tid);
      waitedMs += Math.max(0, ns - (waitedNs.get(tid) ?? 0)) / 1e6;
      waitedNs.set(tid, ns);
    }
    for (const tid of waitedNs.keys()) if (!seen.has(tid)) waitedNs.delete(tid);
    const atMs = now();
    if (runnable && lastReadMs !== null) waitedMs += Math.max(0, atMs - lastReadMs);
    lastReadMs = atMs;
    return used + waitedMs;
  };
}

/** A thread's state from /proc/TID/stat: the field after the command's closing parenthesis. */
export function threadState(stat: string): string {
  const close = stat.lastIndexOf(")");
  return close < 0
    ? ""
    : (stat
        .slice(close + 1)
        .trim()
        .split(/\s+/)[0] ?? "");
}

/** The share of one core a service must have used (or waited for) over the window to count as at work. */
export const BUSY_SHARE = 0.02;

/**
 * CPU samples of one service over a sliding window: `busy()` says whether it used at least
 * BUSY_SHARE of a core over the last `windowMs` (or since its first sample, when younger). What
 * denvd itself runs in the container (its healthcheck, through `excluding`) is left out, its CPU
 * time and its wall time both: a check run every 100 ms would otherwise make an idle service look
 * at work, and a check that takes seconds on a starved host would thin a busy one's share.
 */
export class CpuProgress {
  private readonly samples: { atMs: number; cpuMs: number }[] = [];
  private readonly read: () => Promise<number | null>;
  private readonly windowMs: number;
  private readonly now: () => number;
  private excludedMs = 0;
  private excludedWallMs = 0;

  constructor(
    read: () => Promise<number | null>,
    windowMs: number,
    now: () => number = () => performance.now(),
  ) {
    this.read = read;
    this.windowMs = windowMs;
    this.now = now;
  }

  async sample(): Promise<void> {
    const cpuMs = await this.read();
    if (cpuMs === null) return;
    const atMs = this.now() - this.excludedWallMs;
    this.samples.push({ atMs, cpuMs: cpuMs - this.excludedMs });
    // Keep the newest sample at least a window old, and nothing older.
    while (this.samples.length > 2 && (this.samples[1] as { atMs: number }).atMs <= atMs - this.windowMs)
      this.samples.shift();
  }

  /** Runs fn, leaving the container's CPU time while it ran out of the progress. */
  async excluding<T>(fn: () => Promise<T>): Promise<T> {
    const before = await this.read();
    const fromMs = this.now();
    try {
      return await fn();
    } finally {
      const after = await this.read();
      if (before !== null && after !== null) {
        this.excludedMs += Math.max(0, after - before);
        this.excludedWallMs += Math.max(0, this.now() - fromMs);
      }
    }
  }

  /**
   * busy: it used at least BUSY_SHARE of a core over the window; idle: it did not, or its CPU time
   * cannot be read; unknown: it has been watched for less than a window (on a starved host the
   * deadline can pass before the first check has even run).
   */
  verdict(): "busy" | "idle" | "unknown" {
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    if (!first || !last) return "idle";
    if (last.atMs - first.atMs < this.windowMs) {
      // Younger than a window: busy as soon as it shows it, else not known yet.
      if (last.atMs > first.atMs && (last.cpuMs - first.cpuMs) / (last.atMs - first.atMs) >= BUSY_SHARE)
        return "busy";
      return "unknown";
    }
    return (last.cpuMs - first.cpuMs) / (last.atMs - first.atMs) >= BUSY_SHARE ? "busy" : "idle";
  }

  busy(): boolean {
    return this.verdict() === "busy";
  }
}
