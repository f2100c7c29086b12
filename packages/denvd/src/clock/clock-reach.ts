/**
 * Whether a service's program is on the frozen clock, read from the host: its main process (past
 * denv-agent and docker-init, which start it) has the clock library mapped, or it does not and the
 * program's ELF header says why — statically linked (it reads the kernel's clock itself), another
 * loader, or a program that came up without the preload. What the container wrote (its binaries)
 * is read bounded and parsed defensively: a hostile file yields "unknown", never an error.
 */
import { open, readFile, readlink } from "node:fs/promises";
import type { ClockServiceEvidence } from "@denv/protocol";
import { processChildren } from "../services/process-children.ts";
import { isRuntimeInit } from "../services/service-starter.ts";
import { AGENT_BIN } from "../stack/container-spec.ts";
import { CLOCK_LIBRARY } from "./clock-state.ts";

const STARTERS = new Set([AGENT_BIN, "/sbin/docker-init", "/dev/init"]);
const ELF_HEAD_BYTES = 4096;
const PT_INTERP = 3;

export type Linkage = ClockServiceEvidence["linkage"];

/** The program loader an ELF file names (PT_INTERP), null when it has none (static), or "unknown". */
export function elfInterpreter(head: Buffer): string | null | "unknown" {
  if (head.length < 64 || head.readUInt32BE(0) !== 0x7f454c46) return "unknown";
  if (head[4] !== 2 || head[5] !== 1) return "unknown"; // 64-bit little-endian only (x86_64, aarch64)
  const phoff = Number(head.readBigUInt64LE(32));
  const phentsize = head.readUInt16LE(54);
  const phnum = head.readUInt16LE(56);
  if (phentsize < 56 || phnum > 256) return "unknown";
  for (let i = 0; i < phnum; i++) {
    const at = phoff + i * phentsize;
    if (at + 56 > head.length) return "unknown";
    if (head.readUInt32LE(at) !== PT_INTERP) continue;
    const off = Number(head.readBigUInt64LE(at + 8));
    const size = Number(head.readBigUInt64LE(at + 32));
    if (size < 2 || size > 256 || off + size > head.length) return "unknown";
    return head.subarray(off, off + size - 1).toString("latin1");
  }
  return null;
}

export function linkageOf(interp: string | null | "unknown"): Linkage {
  if (interp === "unknown") return "unknown";
  if (interp === null) return "static";
  if (/ld-musl/.test(interp)) return "musl";
  if (/ld-linux/.test(interp)) return "glibc";
  return "other";
}

/** The service's own program: the first process that is not one of denv's or the engine's starters. */
async function mainProcess(pid: number): Promise<{ pid: number; exe: string } | null> {
  let current = pid;
  for (let depth = 0; depth < 4; depth++) {
    const exe = await readlink(`/proc/${current}/exe`).catch(() => null);
    if (exe === null) return null;
    if (!STARTERS.has(exe)) return { pid: current, exe };
    const [first] = await processChildren(current);
    if (first === undefined) return null;
    current = first;
  }
  return null;
}

async function readHead(pid: number): Promise<Buffer> {
  const fh = await open(`/proc/${pid}/exe`, "r");
  try {
    const b = Buffer.alloc(ELF_HEAD_BYTES);
    const { bytesRead } = await fh.read(b, 0, b.length, 0);
    return b.subarray(0, bytesRead);
  } finally {
    await fh.close();
  }
}

/** A service's clock, given its container's first process (its host pid; 0 when not running). */
export async function serviceClockReach(
  hostPid: number,
  options: { settleMs?: number } = {},
): Promise<ClockServiceEvidence> {
  let main = hostPid > 0 ? await mainProcess(hostPid) : null;
  // A moment after the engine says running, the program may not have been exec'd yet.
  for (
    let waited = 0;
    hostPid > 0 && (!main || isRuntimeInit(main.exe)) && waited < (options.settleMs ?? 3000);
    waited += 100
  ) {
    await new Promise((r) => setTimeout(r, 100));
    main = await mainProcess(hostPid);
  }
  if (main && isRuntimeInit(main.exe))
    return {
      frozen: false,
      program: null,
      linkage: "unknown",
      reason: "its program had not started when it was read",
    };
  if (!main)
    return { frozen: false, program: null, linkage: "unknown", reason: "its program is not running" };
  const program = main.exe.replace(/ \(deleted\)$/, "");
  const mapsOf = () => readFile(`/proc/${main.pid}/maps`, "utf8").catch(() => "");
  let maps = await mapsOf();
  // A program exec'd a moment ago may still be in its loader, which maps the preload next: a
  // dynamic program is looked at again for a while before it is called real.
  for (let waited = 0; !maps.includes(CLOCK_LIBRARY) && waited < (options.settleMs ?? 3000); waited += 100) {
    const interpNow = await readHead(main.pid)
      .then(elfInterpreter)
      .catch(() => "unknown" as const);
    if (interpNow === null || interpNow === "unknown") break;
    await new Promise((r) => setTimeout(r, 100));
    maps = await mapsOf();
  }
  const interp = await readHead(main.pid)
    .then(elfInterpreter)
    .catch(() => "unknown" as const);
  const linkage = linkageOf(interp);
  if (maps.includes(CLOCK_LIBRARY)) return { frozen: true, program, linkage, reason: null };
  const reason =
    linkage === "static"
      ? `${program} is statically linked: it reads the kernel's clock itself`
      : linkage === "unknown"
        ? `${program} is not an ELF program denv can read`
        : linkage === "other"
          ? `${program} uses a program loader denv does not preload (${String(interp)})`
          : `${program} did not load the clock library`;
  return { frozen: false, program, linkage, reason };
}
