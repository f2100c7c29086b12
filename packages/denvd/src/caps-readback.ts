/**
 * Caps as they really are: read back from the engine and from the container's cgroup, so the
 * evidence shows what the kernel enforces, not what was asked for. Handles cgroup v1 (these
 * machines) and v2.
 */
import { access, readFile } from "node:fs/promises";
import type { ContainerState } from "./runtime/container-runtime.ts";

export interface CapsEvidence {
  engine: { memory_bytes: number; pids: number; cpus: number };
  cgroup: { memory_bytes: number | null; pids: number | null; cpus: number | null; version: 1 | 2 | null };
}

const read = (p: string) =>
  readFile(p, "utf8").then(
    (s) => s.trim(),
    () => null,
  );
const num = (s: string | null) => (s === null || s === "max" ? null : Number(s));

export async function readBackCaps(state: ContainerState): Promise<CapsEvidence> {
  const engine = { memory_bytes: state.memoryBytes, pids: state.pids, cpus: state.nanoCpus / 1e9 };
  const v1 = await access("/sys/fs/cgroup/memory").then(
    () => true,
    () => false,
  );
  if (v1) {
    const base = (ctrl: string) => `/sys/fs/cgroup/${ctrl}/docker/${state.id}`;
    const quota = num(await read(`${base("cpu")}/cpu.cfs_quota_us`));
    const period = num(await read(`${base("cpu")}/cpu.cfs_period_us`));
    return {
      engine,
      cgroup: {
        version: 1,
        memory_bytes: num(await read(`${base("memory")}/memory.limit_in_bytes`)),
        pids: num(await read(`${base("pids")}/pids.max`)),
        cpus: quota !== null && period ? quota / period : null,
      },
    };
  }
  for (const dir of [
    `/sys/fs/cgroup/system.slice/docker-${state.id}.scope`,
    `/sys/fs/cgroup/docker/${state.id}`,
  ]) {
    const mem = await read(`${dir}/memory.max`);
    if (mem === null) continue;
    const [quota, period] = ((await read(`${dir}/cpu.max`)) ?? "max").split(" ");
    return {
      engine,
      cgroup: {
        version: 2,
        memory_bytes: num(mem),
        pids: num(await read(`${dir}/pids.max`)),
        cpus: quota && quota !== "max" && period ? Number(quota) / Number(period) : null,
      },
    };
  }
  return { engine, cgroup: { version: null, memory_bytes: null, pids: null, cpus: null } };
}
