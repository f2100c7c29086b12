import { readFile } from "node:fs/promises";

/**
 * A host process's children (its main thread's), from /proc; none when it is gone or unreadable.
 * Only positive integers come back: the list is turned into /proc paths by its callers.
 */
export async function processChildren(pid: number): Promise<number[]> {
  if (!Number.isInteger(pid) || pid <= 0) return [];
  const text = await readFile(`/proc/${pid}/task/${pid}/children`, "utf8").catch(() => "");
  return text
    .split(/\s+/)
    .filter(Boolean)
    .map(Number)
    .filter((n) => Number.isInteger(n) && n > 0);
}
