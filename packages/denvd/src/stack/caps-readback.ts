/**
 * Caps as they really are: read back from the engine and from the container's cgroup, so the
 * evidence shows what the kernel enforces, not what was asked for. Handles cgroup v1 (these
 * machines) and v2.
 */
import { access, readFile } from "node:fs/promises";
import type { CapsEvidence, ResolvedService } from "@denv/protocol";
import { RESTORABLE_CAPS } from "@denv/spec/restorable-caps";
import type { ContainerState } from "../runtime/container-runtime.ts";

/**
 * Capabilities the engine grants by default that denv drops from every container: raw sockets,
 * device nodes, chroot, file capabilities and audit writes. A service may ask for them back
 * (cap_add, checked at resolve); the verifier never gets them.
 */
export const DROPPED_CAPS: string[] = [...RESTORABLE_CAPS];

/** Bits of the dropped capabilities in /proc/PID/status's CapBnd (linux/capability.h). */
const CAP_BIT: Record<string, number> = {
  NET_RAW: 13,
  MKNOD: 27,
  SYS_CHROOT: 18,
  SETFCAP: 31,
  AUDIT_WRITE: 29,
};

/** What a service's container drops: its own cap_drop, and denv's list less what it asked back. */
export function hardenedCapDrop(s: Pick<ResolvedService, "cap_drop" | "cap_add">): string[] {
  const back = new Set((s.cap_add ?? []).map((c) => c.toUpperCase().replace(/^CAP_/, "")));
  return [...new Set([...s.cap_drop, ...DROPPED_CAPS.filter((c) => !back.has(c))])];
}

async function readSecurity(pid: number): Promise<CapsEvidence["security"]> {
  const status = pid > 0 ? await read(`/proc/${pid}/status`) : null;
  const nnp = status ? /^NoNewPrivs:\s+(\d)/m.exec(status)?.[1] : undefined;
  const bnd = status ? (/^CapBnd:\s+([0-9a-f]+)/m.exec(status)?.[1] ?? null) : null;
  const bits = bnd ? BigInt(`0x${bnd}`) : null;
  return {
    no_new_privileges: nnp === undefined ? null : nnp === "1",
    dropped:
      bits === null ? [] : DROPPED_CAPS.filter((c) => ((bits >> BigInt(CAP_BIT[c] ?? 63)) & 1n) === 0n),
    cap_bnd: bnd,
  };
}

const read = (p: string) =>
  readFile(p, "utf8").then(
    (s) => s.trim(),
    () => null,
  );
const num = (s: string | null) => (s === null || s === "max" ? null : Number(s));

export type { CapsEvidence };

export async function readBackCaps(state: ContainerState): Promise<CapsEvidence> {
  const engine = { memory_bytes: state.memoryBytes, pids: state.pids, cpus: state.nanoCpus / 1e9 };
  const security = await readSecurity(state.pid);
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
      security,
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
      security,
      cgroup: {
        version: 2,
        memory_bytes: num(mem),
        pids: num(await read(`${dir}/pids.max`)),
        cpus: quota && quota !== "max" && period ? Number(quota) / Number(period) : null,
      },
    };
  }
  return { engine, security, cgroup: { version: null, memory_bytes: null, pids: null, cpus: null } };
}
