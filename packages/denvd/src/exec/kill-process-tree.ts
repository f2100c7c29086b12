import { readdir, readFile } from "node:fs/promises";

/** Host PIDs of a process and all its descendants, from /proc (denvd runs on the host as root). */
export async function processTree(rootPid: number): Promise<number[]> {
  const out: number[] = [];
  const queue = [rootPid];
  while (queue.length) {
    const pid = queue.shift() as number;
    out.push(pid);
    const tasks = await readdir(`/proc/${pid}/task`).catch(() => [] as string[]);
    for (const tid of tasks) {
      const children = await readFile(`/proc/${pid}/task/${tid}/children`, "utf8").catch(() => "");
      for (const c of children.split(" ").filter(Boolean)) queue.push(Number(c));
    }
  }
  return out;
}

/**
 * SIGKILLs a process and every descendant. The tree is frozen first with SIGSTOP so that no process
 * can fork a child between our reading the tree and killing it.
 */
export async function killProcessTree(rootPid: number): Promise<void> {
  const seen = new Set<number>();
  for (let round = 0; round < 5; round++) {
    const pids = (await processTree(rootPid)).filter((p) => !seen.has(p));
    if (pids.length === 0) break;
    for (const p of pids) {
      seen.add(p);
      try {
        process.kill(p, "SIGSTOP");
      } catch {}
    }
  }
  for (const p of seen) {
    try {
      process.kill(p, "SIGKILL");
    } catch {}
  }
}
