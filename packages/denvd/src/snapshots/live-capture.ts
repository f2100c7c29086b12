/**
 * Live versions: each service's processes (a CRIU checkpoint) and its container's own layer,
 * taken in the snapshot's frozen window beside the volumes, and restored by a fork in place of a
 * fresh start. What CRIU cannot take is found before anything is frozen and refused naming the
 * service, the process and why (or, best-effort, that service is kept disk-only).
 *
 * A process may hold no connection to denvd while it is dumped (its agent's channel would be a
 * socket to outside the container): the agents are let go first and taken back after the thaw;
 * each one redials by itself, and a fork's restored agent dials the fork's own socket.
 */
import { readdir, readFile, readlink, rm } from "node:fs/promises";
import { join } from "node:path";
import { DenvError, type SnapshotEvidence } from "@denv/protocol";
import type { LiveRecord, StackRecord } from "../host/state-store.ts";
import { findFreezer } from "../runtime/cgroup-freezer.ts";
import type { CheckpointPort, ContainerState } from "../runtime/container-runtime.ts";
import { ADDRESS_LIST, listedSubnets } from "../runtime/restored-addresses.ts";
import type { StackContext } from "../stack/stack-context.ts";
import { hostCpuFlags } from "./cpu-flags.ts";
import { fibLocalAddresses, isLoopback, tcpPeers } from "./proc-sockets.ts";
import { digestTree } from "./volume-digest.ts";

export type LiveMode = "on" | "best-effort";

/** Where a version's process images and layers are: root's alone, removed with the version. */
export const liveDir = (ctx: StackContext, versionId: string) =>
  join(ctx.options.stateDir, "live", versionId);

const LAYER_FILE = "layer.tar";

/** One process as /proc shows it, for the checks below. */
export interface ProcessFacts {
  pid: number;
  comm: string;
  /** TracerPid from its status: 0 when nothing traces it. */
  tracerPid: number;
  /** Where its open descriptors lead (readlink of /proc/PID/fd/N). */
  fds: string[];
  /** Its real, effective and saved user and group ids (absent: not read). */
  ids?: { uids: number[]; gids: number[] };
}

/**
 * What the dumping side may do: whether root here holds CAP_SYS_RESOURCE, and whether its CRIU
 * reads limits from /proc where it does not.
 */
export interface DumperFacts {
  sysResource: boolean;
  limitsFromProc?: boolean;
}

/** CAP_SYS_RESOURCE's bit in /proc/PID/status's capability masks. */
const CAP_SYS_RESOURCE = 24n;

/** Whether this process's effective capabilities (its status text) hold CAP_SYS_RESOURCE. */
export function holdsSysResource(statusText: string): boolean {
  const hex = /^CapEff:\s*([0-9a-f]+)/m.exec(statusText)?.[1];
  return hex ? ((BigInt(`0x${hex}`) >> CAP_SYS_RESOURCE) & 1n) === 1n : false;
}

/** A process's name as a container set it, fit to quote in a message: printable ASCII, 64 at most. */
export function printableComm(comm: string): string {
  return comm.replace(/[^ -~]/g, "?").slice(0, 64);
}

/**
 * Why CRIU cannot take this process (null: nothing found that it cannot). `outside`: its
 * namespace's TCP sockets whose peer is not one of the stack's own (inode → peer).
 */
export function processRefusal(
  p: ProcessFacts,
  dumper: DumperFacts = { sysResource: true },
  outside: ReadonlyMap<string, string> = new Map(),
): string | null {
  if (p.tracerPid) return `it is traced by process ${p.tracerPid} (a debugger or strace)`;
  // CRIU reads each process's limits with prlimit, which the kernel allows on another user's
  // process only with CAP_SYS_RESOURCE (some hosts' root lacks it: a VM or container's bounds);
  // denv's CRIU wrapper reads them from /proc instead, where it was built.
  const other = p.ids && [...p.ids.uids, ...p.ids.gids].find((id) => id !== 0);
  if (!dumper.sysResource && !dumper.limitsFromProc && other !== undefined && p.ids)
    return `it runs as uid ${p.ids.uids[0]}, and this host's root lacks CAP_SYS_RESOURCE, without which CRIU cannot read another user's process limits (scripts/ensure-criu.sh builds denv-criu-limits.so, which reads them from /proc, where gcc is installed)`;
  for (const fd of p.fds) {
    if (/^\/dev\/(nvidia|dri\/|kfd|accel\/)/.test(fd)) return `it holds a GPU device (${fd})`;
    if (fd === "anon_inode:[io_uring]") return "it uses io_uring";
    if (/^\/dev\/(kvm|vhost-|vfio)/.test(fd)) return `it holds a device CRIU cannot restore (${fd})`;
    const peer = outside.get(/^socket:\[(\d+)\]$/.exec(fd)?.[1] ?? "");
    if (peer)
      return `it holds a TCP connection to ${peer}, outside the stack (a fork would restore it with nothing there to answer)`;
  }
  return null;
}

async function processFacts(pid: number): Promise<ProcessFacts | null> {
  try {
    const comm = printableComm((await readFile(`/proc/${pid}/comm`, "utf8")).trim());
    const status = await readFile(`/proc/${pid}/status`, "utf8");
    const tracerPid = Number(/^TracerPid:\s*(\d+)/m.exec(status)?.[1] ?? 0);
    const idsOf = (key: string) =>
      (new RegExp(`^${key}:\\s*([\\d\\s]+)$`, "m").exec(status)?.[1] ?? "")
        .trim()
        .split(/\s+/)
        .slice(0, 3)
        .map(Number);
    const fdDir = `/proc/${pid}/fd`;
    const fds = await Promise.all(
      (await readdir(fdDir)).map((fd) => readlink(join(fdDir, fd)).catch(() => "")),
    );
    return { pid, comm, tracerPid, fds, ids: { uids: idsOf("Uid"), gids: idsOf("Gid") } };
  } catch {
    return null; // gone meanwhile: nothing to take
  }
}

/**
 * Each service whose processes CRIU cannot take, with the process and why: read from /proc before
 * anything is frozen. A service with no running container (a one-shot that finished) has no
 * processes, and is not listed; nor are those in leftOut (whose addresses still count as the stack's).
 */
async function liveRefusals(
  cp: CheckpointPort | undefined,
  states: [string, ContainerState][],
  leftOut: ReadonlySet<string>,
  keepOutside: boolean,
): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const dumper = {
    sysResource: holdsSysResource(await readFile("/proc/self/status", "utf8")),
    limitsFromProc: cp?.readsLimitsFromProc() ?? false,
  };
  const running = states.filter(([, st]) => st.running);
  const net = await Promise.all(running.map(([, st]) => netFacts(st.pid)));
  // The stack's own addresses: every container's (those left out too), secondaries (a restored
  // fork's) included.
  const inside = new Set(net.flatMap((n) => n.local));
  await Promise.all(
    running.map(async ([svc, st], i) => {
      if (leftOut.has(svc)) return;
      const outside = new Map(
        (keepOutside ? [] : (net[i]?.peers ?? []))
          .filter((t) => !inside.has(t.address) && !isLoopback(t.address))
          .map((t) => [t.inode, t.peer]),
      );
      const f = await findFreezer(st.pid, st.id);
      const pids = f
        ? (await readFile(join(f.dir, "cgroup.procs"), "utf8")).split("\n").filter(Boolean).map(Number)
        : [st.pid];
      // The container's own process first, then the rest by pid (cgroup.procs keeps no order): a
      // refusal names the same process every time.
      pids.sort((a, b) => (a === st.pid ? -1 : b === st.pid ? 1 : a - b));
      for (const pid of pids) {
        const facts = await processFacts(pid);
        const why = facts && processRefusal(facts, dumper, outside);
        if (why && facts) {
          out[svc] = `process ${facts.comm} (pid ${pid}): ${why}`;
          return;
        }
      }
    }),
  );
  return out;
}

/** A container's network namespace, through its first process: its addresses and TCP peers. */
async function netFacts(pid: number): Promise<{ local: string[]; peers: ReturnType<typeof tcpPeers> }> {
  const read = (name: string) => readFile(`/proc/${pid}/net/${name}`, "utf8").catch(() => "");
  const [fib, tcp, tcp6] = await Promise.all([read("fib_trie"), read("tcp"), read("tcp6")]);
  return { local: fibLocalAddresses(fib), peers: [...tcpPeers(tcp), ...tcpPeers(tcp6)] };
}

/** The checkpoint port, or not_supported saying why this host has none. */
export async function checkpointsOf(ctx: StackContext): Promise<CheckpointPort> {
  const cp = ctx.runtime.checkpoints;
  const why = cp ? await cp.unavailable() : "this engine has no process checkpoints";
  if (!cp || why) throw new DenvError("not_supported", `this host cannot keep processes: ${why}`);
  return cp;
}

/**
 * Which services a live snapshot takes: every running one, or not_supported naming what CRIU
 * cannot take; best-effort leaves those out (said in the evidence) and takes the rest. A pause
 * (`keepOutside`) keeps connections to outside the stack: its processes come back in the same
 * container, where the other end may still be.
 */
export async function planLive(
  ctx: StackContext,
  stack: StackRecord,
  mode: LiveMode,
  options: { keepOutside?: boolean } = {},
): Promise<{ services: string[]; skipped: Record<string, string> }> {
  const states = await Promise.all(
    Object.entries(stack.containers).map(
      async ([svc, id]): Promise<[string, ContainerState]> => [svc, await ctx.runtime.inspectContainer(id)],
    ),
  );
  // A service a verify froze (the agent's) keeps its processes out of the version: a grading fork
  // starts it afresh, where none of the agent's processes runs beside the grader.
  const frozen = Object.fromEntries(
    states
      .filter(([, st]) => st.running && st.paused)
      .map(([svc]) => [
        svc,
        "its processes are frozen for a verify (the agent's service): its forks start it afresh",
      ]),
  );
  const refused = await liveRefusals(
    ctx.runtime.checkpoints,
    states,
    new Set(Object.keys(frozen)),
    options.keepOutside ?? false,
  );
  if (mode === "on" && Object.keys(refused).length)
    throw new DenvError(
      "not_supported",
      `a live snapshot cannot take ${Object.entries(refused)
        .map(([svc, why]) => `service ${svc}'s ${why}`)
        .join("; ")} (--live=best-effort keeps those services disk-only)`,
      { details: { refused } },
    );
  const services = states
    .filter(([svc, st]) => st.running && !refused[svc] && !frozen[svc])
    .map(([svc]) => svc);
  return { services, skipped: { ...frozen, ...refused } };
}

/** Lets go of the services' agents (see the header); returns how to take them back. */
export async function detachAgents(
  ctx: StackContext,
  stack: StackRecord,
  services: string[],
): Promise<() => Promise<void>> {
  if (!ctx.options.agentBinary) return async () => {};
  await Promise.all(services.map((svc) => ctx.agents.detach(stack.id, svc)));
  return async () => {
    await Promise.all(services.map((svc) => ctx.agents.listen(stack.id, svc)));
  };
}

/** Inside the frozen window: each service's processes and layer, into the version's directory. */
export async function captureLive(
  ctx: StackContext,
  cp: CheckpointPort,
  stack: StackRecord,
  versionId: string,
  plan: { services: string[]; skipped: Record<string, string> },
): Promise<LiveRecord> {
  const dir = liveDir(ctx, versionId);
  const services: LiveRecord["services"] = {};
  const taken = await Promise.allSettled(
    plan.services.map(async (svc) => {
      const id = stack.containers[svc] as string;
      const svcDir = join(dir, svc);
      const dump = await cp.checkpoint(id, svcDir).catch((err: unknown) => {
        if (!(err instanceof DenvError)) throw err;
        throw new DenvError(err.code, `service ${svc}: ${err.message}`, { cause: err });
      });
      const layer = await cp.saveLayer(id, join(svcDir, LAYER_FILE));
      services[svc] = { checkpointBytes: dump.bytes, layerBytes: layer.bytes, dumpMs: dump.ms };
    }),
  );
  const failed = taken.find((t) => t.status === "rejected");
  if (failed) {
    await removeLive(ctx, versionId);
    throw failed.reason;
  }
  return { services, skipped: plan.skipped };
}

/**
 * One digest of what a service's restore reads: CRIU's images and the layer's tar, every file's
 * content, mode and owner (digestTree's lines).
 */
export async function liveDigest(ctx: StackContext, versionId: string, service: string): Promise<string> {
  return `sha256:${(await digestTree(join(liveDir(ctx, versionId), service))).digest}`;
}

/**
 * Each service's digest, taken after the thaw (the images no longer change: the frozen window
 * does not wait on hashing them) and kept in the version's record, which a restore checks; and
 * this host's CPU flags, which a restore elsewhere checks.
 */
export async function sealLive(ctx: StackContext, versionId: string, live: LiveRecord): Promise<void> {
  live.cpuFlags = await hostCpuFlags();
  await Promise.all(
    Object.entries(live.services).map(async ([svc, s]) => {
      s.digest = await liveDigest(ctx, versionId, svc);
    }),
  );
}

/** A fork's start of one service from the version's checkpoint (its layer first). */
export async function restoreService(
  ctx: StackContext,
  cp: CheckpointPort,
  versionId: string,
  service: string,
  containerId: string,
  digest: string | undefined,
): Promise<void> {
  const svcDir = join(liveDir(ctx, versionId), service);
  // Images changed or cut short since the snapshot (a full disk, a hand) are never restored: CRIU
  // would run whatever they say with the container's privileges. Versions from before digests
  // were kept have none to check.
  if (digest) {
    const found = await liveDigest(ctx, versionId, service).catch(
      (err: Error) => `unreadable (${err.message})`,
    );
    if (found !== digest)
      throw new DenvError(
        "storage_error",
        `service ${service}'s process images do not match their digest (${digest} recorded, ${found} found): changed or cut short since the snapshot; a cold fork starts it afresh`,
      );
  }
  await cp.loadLayer(containerId, join(svcDir, LAYER_FILE));
  await cp.startFrom(containerId, svcDir).catch((err: unknown) => {
    if (!(err instanceof DenvError)) throw err;
    throw new DenvError(err.code, `service ${service} did not restore: ${err.message}`, { cause: err });
  });
}

/** The subnets the version's process images bring back with them (restored-addresses.ts). */
export async function liveSubnets(ctx: StackContext, versionId: string, live: LiveRecord): Promise<string[]> {
  const lists = await Promise.all(
    Object.keys(live.services).map((svc) =>
      readFile(join(liveDir(ctx, versionId), svc, "images", ADDRESS_LIST), "utf8").catch(() => ""),
    ),
  );
  return [...new Set(lists.flatMap(listedSubnets))];
}

export async function removeLive(ctx: StackContext, versionId: string): Promise<void> {
  await rm(liveDir(ctx, versionId), { recursive: true, force: true });
}

/** The snapshot evidence's part for a live version. */
export function liveEvidence(live: LiveRecord): NonNullable<SnapshotEvidence["live"]> {
  return {
    services: Object.fromEntries(
      Object.entries(live.services).map(([svc, s]) => [
        svc,
        {
          checkpoint_bytes: s.checkpointBytes,
          layer_bytes: s.layerBytes,
          dump_ms: s.dumpMs,
          ...(s.digest ? { digest: s.digest } : {}),
        },
      ]),
    ),
    skipped: live.skipped,
  };
}
