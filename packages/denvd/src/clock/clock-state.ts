/**
 * The frozen clock of a stack (x-denv.clock: frozen | frozen-strict): a directory per stack that
 * every container mounts read-only at /.denv/clock, holding the clock library (clock/denv-clock.c)
 * and its state, a 64-byte record the library maps and reads on every clock call:
 *
 *   magic "DENVCLK1" · base (wall ns) · epoch (CLOCK_MONOTONIC ns; 0 = held) · tick (ns) · seq · reserved
 *
 * Changes go through a sequence lock (seq odd while base and epoch are rewritten, each write its
 * own system call, in order): a process reading mid-change reads again, never half a change.
 *
 * A fork's clock is held at its version's clock while the fork starts and is health-checked, then
 * released: from then on it reads base + whole ticks of CLOCK_MONOTONIC since the release. The
 * host's CLOCK_MONOTONIC is every container's (Docker gives containers no time namespace), so one
 * record is one clock for every process of the stack. Time namespaces would not help: they shift
 * the monotonic and boot clocks only, never the wall clock.
 */
import { existsSync } from "node:fs";
import { copyFile, mkdir, open, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { ResolvedSpec } from "@denv/protocol";
import type { ContainerSpec } from "../runtime/container-runtime.ts";

type Mount = ContainerSpec["mounts"][number];

/** Where the directory is inside every container; the library's path is compiled in. */
export const CLOCK_DIR = "/.denv/clock";
export const CLOCK_LIBRARY = `${CLOCK_DIR}/libdenv-clock.so`;
/** The clock advances in whole seconds: jitter below that between forks does not show. */
export const CLOCK_TICK_MS = 1000;
/**
 * While a replay's step runs, the clock advances in ticks this long: what the step's command reads
 * in its first STEP_TICK_MS is the step's start, however slowly a starved host runs it (a psql
 * insert took over a second under a CPU hog and an I/O-heavy neighbour, and read a second later in
 * one fork of twenty).
 */
export const STEP_TICK_MS = 10_000;
/**
 * After a replay's step its clock stands this far past the last reading its command could have
 * seen: each step begins a second after the one before, whatever the host made of its run time.
 * Counting the seconds a step ran instead put a second into one fork of twenty when a psql insert
 * ran past one under load; a fixed step keeps the episode's time a function of its steps alone.
 */
export const STEP_ADVANCE_MS = 1000;

/** Where the set-up builds the library (scripts/setup-host.sh), beside denv-agent. */
export const DEFAULT_CLOCK_LIBRARY = "/var/lib/denv-host/agent/libdenv-clock.so";

/** DENVD_CLOCK_LIBRARY, else the set-up's build; null when there is none. */
export function defaultClockLibrary(): string | null {
  const path = process.env.DENVD_CLOCK_LIBRARY ?? DEFAULT_CLOCK_LIBRARY;
  return existsSync(path) ? path : null;
}

const MAGIC = 0x314b4c43564e4544n; // "DENVCLK1"
const RECORD_BYTES = 64;
const BASE_OFFSET = 8;
const EPOCH_OFFSET = 16;
const SEQ_OFFSET = 32;

export interface ClockState {
  baseMs: number;
  /** CLOCK_MONOTONIC (ns) at the release; null while held. */
  epochNs: bigint | null;
  tickMs: number;
}

export const isFrozen = (spec: Pick<ResolvedSpec, "clock">) => spec.clock !== "real";

export function clockDirOf(stateDir: string, stackId: string): string {
  return join(stateDir, "clock", stackId);
}

export function encodeClockState(s: ClockState): Buffer {
  const b = Buffer.alloc(RECORD_BYTES);
  b.writeBigUInt64LE(MAGIC, 0);
  b.writeBigInt64LE(BigInt(Math.round(s.baseMs)) * 1_000_000n, 8);
  b.writeBigInt64LE(s.epochNs ?? 0n, EPOCH_OFFSET);
  b.writeBigInt64LE(BigInt(s.tickMs) * 1_000_000n, 24);
  return b;
}

export function decodeClockState(b: Buffer): ClockState | null {
  if (b.length < RECORD_BYTES || b.readBigUInt64LE(0) !== MAGIC) return null;
  const epoch = b.readBigInt64LE(EPOCH_OFFSET);
  return {
    baseMs: Number(b.readBigInt64LE(8) / 1_000_000n),
    epochNs: epoch === 0n ? null : epoch,
    tickMs: Number(b.readBigInt64LE(24) / 1_000_000n),
  };
}

/** What the clock reads at monotonic time nowNs: the library's own arithmetic. */
export function clockReadingMs(s: ClockState, nowNs: bigint = process.hrtime.bigint()): number {
  if (s.epochNs === null) return s.baseMs;
  const tickNs = BigInt(s.tickMs) * 1_000_000n;
  let elapsed = nowNs - s.epochNs;
  if (elapsed < 0n) elapsed = 0n;
  return s.baseMs + Number((elapsed - (elapsed % tickNs)) / 1_000_000n);
}

/**
 * Makes a stack's clock directory: the library copied in (a stack never depends on the host's
 * copy changing under it), the state, and the preload list glibc reads. held: the clock stays at
 * baseMs until release.
 */
export async function writeClock(
  stateDir: string,
  stackId: string,
  library: string,
  options: { baseMs: number; held: boolean },
): Promise<void> {
  const dir = clockDirOf(stateDir, stackId);
  await mkdir(dir, { recursive: true, mode: 0o755 });
  await copyFile(library, join(dir, "libdenv-clock.so"));
  await writeFile(join(dir, "ld.so.preload"), `${CLOCK_LIBRARY}\n`, { mode: 0o644 });
  const state = encodeClockState({
    baseMs: options.baseMs,
    epochNs: options.held ? null : process.hrtime.bigint(),
    tickMs: CLOCK_TICK_MS,
  });
  // Written whole before any container exists; later only the epoch changes, in place, so the
  // mappings every process holds see it.
  await writeFile(join(dir, "state"), state, { mode: 0o644 });
}

export async function readClock(stateDir: string, stackId: string): Promise<ClockState | null> {
  const b = await readFile(join(clockDirOf(stateDir, stackId), "state")).catch(() => null);
  return b ? decodeClockState(b) : null;
}

/** Rewrites base, epoch and tick under the sequence lock, in the file every process maps. */
async function rewrite(stateDir: string, stackId: string, next: (s: ClockState) => ClockState | null) {
  const fh = await open(join(clockDirOf(stateDir, stackId), "state"), "r+");
  try {
    const b = Buffer.alloc(RECORD_BYTES);
    await fh.read(b, 0, RECORD_BYTES, 0);
    const s = decodeClockState(b);
    const to = s ? next(s) : null;
    if (!s || !to || to === s) return s;
    const seq = b.readBigUInt64LE(SEQ_OFFSET);
    const word = (v: bigint) => {
      const w = Buffer.alloc(8);
      w.writeBigUInt64LE(BigInt.asUintN(64, v));
      return w;
    };
    const fields = Buffer.alloc(24);
    fields.writeBigInt64LE(BigInt(Math.round(to.baseMs)) * 1_000_000n, 0);
    fields.writeBigInt64LE(to.epochNs ?? 0n, 8);
    fields.writeBigInt64LE(BigInt(to.tickMs) * 1_000_000n, 16);
    await fh.write(word(seq | 1n), 0, 8, SEQ_OFFSET);
    await fh.write(fields, 0, 24, BASE_OFFSET);
    await fh.write(word((seq | 1n) + 1n), 0, 8, SEQ_OFFSET);
    return to;
  } finally {
    await fh.close();
  }
}

/**
 * Starts a held clock: from now on it advances, in ticks of `tickMs` (a replay's step:
 * STEP_TICK_MS; else CLOCK_TICK_MS). A clock already running is left as it is; a stack with no
 * clock (a host without the clock library reports frozen as real) has nothing to release.
 */
export async function releaseClock(
  stateDir: string,
  stackId: string,
  tickMs: number = CLOCK_TICK_MS,
): Promise<ClockState | null> {
  if (!(await readClock(stateDir, stackId))) return null;
  return rewrite(stateDir, stackId, (s) =>
    s.epochNs !== null ? s : { ...s, epochNs: process.hrtime.bigint(), tickMs },
  );
}

/**
 * Holds a clock: it stands until released again (between a replay's steps, and for its digest:
 * what the stack records then must not depend on how long a fork took), at what it reads now plus
 * `advanceMs` when it was running (a replay's step: STEP_ADVANCE_MS). A clock already held stays.
 */
export async function holdClock(
  stateDir: string,
  stackId: string,
  advanceMs = 0,
): Promise<ClockState | null> {
  const exists = await readClock(stateDir, stackId);
  if (!exists) return null;
  return rewrite(stateDir, stackId, (s) => ({
    ...s,
    baseMs: heldReadingMs(s, advanceMs),
    epochNs: null,
    tickMs: CLOCK_TICK_MS,
  }));
}

/**
 * What a clock holds at: see holdClock. Never less than anything in the stack could have read
 * (the reading in the clock's own ticks), so the episode's time does not run backwards.
 */
export function heldReadingMs(s: ClockState, advanceMs = 0, nowNs: bigint = process.hrtime.bigint()): number {
  return s.epochNs === null ? s.baseMs : clockReadingMs(s, nowNs) + advanceMs;
}

export async function removeClock(stateDir: string, stackId: string): Promise<void> {
  await rm(clockDirOf(stateDir, stackId), { recursive: true, force: true });
}

/**
 * The mounts and environment that put a container on the stack's clock: the directory, glibc's
 * preload list (honoured for setuid programs and programs that clear their environment), and
 * LD_PRELOAD for musl, which reads no preload list.
 */
export function clockMounts(
  dir: string,
  env: Record<string, string>,
): { mounts: Mount[]; env: Record<string, string> } {
  const preload = env.LD_PRELOAD ? `${CLOCK_LIBRARY}:${env.LD_PRELOAD}` : CLOCK_LIBRARY;
  return {
    mounts: [
      { kind: "bind", source: dir, target: CLOCK_DIR, readOnly: true },
      { kind: "bind", source: join(dir, "ld.so.preload"), target: "/etc/ld.so.preload", readOnly: true },
    ],
    env: { ...env, LD_PRELOAD: preload },
  };
}
