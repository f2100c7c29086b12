/**
 * A container's cgroup freezer, written directly. The engine's pause goes dockerd → containerd →
 * a runc process before the freezer is written, and its unpause the same way back: 70–190 ms and
 * 75–105 ms on this machine, against 15 ms and 8 ms for the file itself. A snapshot's frozen
 * window is those two plus the captures, so the window a running service sees is mostly the
 * engine's round trips. The engine does not record a freeze made here (it still reports the
 * container running), so this is only for windows denvd itself opens and closes, and a restart
 * thaws what a kill left frozen (reconcile). The engine's pause stays for what must survive a
 * restart (a service verify froze).
 */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";

/** Where a container's freezer is: cgroup v1's freezer.state or v2's cgroup.freeze. */
export interface FreezerFiles {
  version: 1 | 2;
  /** The cgroup's directory. */
  dir: string;
}

export interface FreezerRoots {
  /** Default /proc. */
  proc: string;
  /** Default /sys/fs/cgroup. */
  cgroup: string;
}

const DEFAULT_ROOTS: FreezerRoots = { proc: "/proc", cgroup: "/sys/fs/cgroup" };

/**
 * The freezer directory of a process from its /proc/PID/cgroup text: v1's freezer hierarchy when
 * there is one (a hybrid host keeps its containers there), else the v2 unified path. Only a path
 * that names the container is taken: anything else (another cgroup namespace, a runtime that
 * names cgroups otherwise, a pid reused by another process) is not this container's to freeze.
 */
export function freezerFromProcCgroup(
  text: string,
  containerId: string,
  cgroupRoot: string,
): FreezerFiles | null {
  let unified: string | null = null;
  for (const line of text.split("\n")) {
    const first = line.indexOf(":");
    const second = line.indexOf(":", first + 1);
    if (first < 0 || second < 0) continue;
    const controllers = line.slice(first + 1, second).split(",");
    const path = line.slice(second + 1);
    if (!path.startsWith("/") || path.split("/").includes("..")) continue;
    if (controllers.includes("freezer"))
      return path.includes(containerId) ? { version: 1, dir: join(cgroupRoot, "freezer", path) } : null;
    if (line.slice(0, first) === "0" && controllers.length === 1 && controllers[0] === "") unified = path;
  }
  if (unified?.includes(containerId)) return { version: 2, dir: join(cgroupRoot, unified) };
  return null;
}

/** The container's freezer, when this process can see and write it; null otherwise. */
export async function findFreezer(
  pid: number,
  containerId: string,
  roots: FreezerRoots = DEFAULT_ROOTS,
): Promise<FreezerFiles | null> {
  if (!Number.isInteger(pid) || pid <= 0 || containerId.length < 12) return null;
  try {
    const f = freezerFromProcCgroup(
      await readFile(join(roots.proc, String(pid), "cgroup"), "utf8"),
      containerId,
      roots.cgroup,
    );
    if (!f) return null;
    // The container's first process is in that cgroup (this process sees the same cgroup tree).
    const procs = (await readFile(join(f.dir, "cgroup.procs"), "utf8")).split("\n");
    return procs.includes(String(pid)) ? f : null;
  } catch {
    return null;
  }
}

const stateFile = (f: FreezerFiles) => join(f.dir, f.version === 1 ? "freezer.state" : "cgroup.freeze");

/** Whether the cgroup is frozen or freezing. */
export async function isFrozen(f: FreezerFiles): Promise<boolean> {
  const s = (await readFile(stateFile(f), "utf8")).trim();
  return f.version === 1 ? s !== "THAWED" : s === "1";
}

async function frozenNow(f: FreezerFiles): Promise<boolean> {
  if (f.version === 1) return (await readFile(stateFile(f), "utf8")).trim() === "FROZEN";
  return /^frozen 1$/m.test(await readFile(join(f.dir, "cgroup.events"), "utf8"));
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Freezes the cgroup and waits until every process in it is frozen. A cgroup that will not freeze
 * (a process forking as fast as it is frozen, or asleep in the kernel) is thawed again and this
 * rejects; the caller then has the engine's pause, which retries by itself. As runc does, v1's
 * freezer is kicked (thawed and frozen again) every 50 tries.
 */
export async function freeze(f: FreezerFiles, tries = 1000): Promise<void> {
  const file = stateFile(f);
  const on = f.version === 1 ? "FROZEN" : "1";
  const off = f.version === 1 ? "THAWED" : "0";
  await writeFile(file, on);
  for (let i = 0; i < tries; i++) {
    if (await frozenNow(f)) return;
    if (f.version === 1 && i % 50 === 49) {
      await writeFile(file, off);
      await writeFile(file, on);
    }
    await sleep(1);
  }
  await writeFile(file, off);
  throw new Error(`the cgroup ${f.dir} did not freeze`);
}

export async function thaw(f: FreezerFiles): Promise<void> {
  await writeFile(stateFile(f), f.version === 1 ? "THAWED" : "0");
}
