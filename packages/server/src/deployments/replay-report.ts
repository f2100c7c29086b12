/**
 * A replay report from its runs: every fork ran the same steps; the first fork is the reference,
 * and the report says identical or shows the first divergence (which fork, which step or volume,
 * a diff) and names the sources it recognises in what differs: the clock, randomness (ids,
 * hostnames, MAC and network addresses, PIDs), ordering. Pure: the runs come in, the report goes out.
 */
import { createHash } from "node:crypto";
import type { DiffEvidence } from "@denv/protocol";

export interface StepRun {
  exit_code: number | null;
  stdout: string;
  stderr: string;
  timed_out: boolean;
  ms: number;
}

export interface ForkRun {
  index: number;
  environment_id: string | null;
  /** Why the fork could not run its episode (it is then not compared). */
  error: string | null;
  steps: StepRun[];
  volumes: Record<
    string,
    { digest: string; files: number; bytes: number; entries: [string, string][]; left_out?: string[] }
  >;
  /** What the episode changed (read before the digest's checkpoint); null when it could not be read. */
  diff?: DiffEvidence | null;
}

/**
 * What of a diff two runs of one episode must agree on: every change listed and counted, and the
 * rows each database counted. Left out: the stack it was read from, its time, and the count of an
 * engine's bookkeeping files, which are not the episode's.
 */
export function diffKey(d: DiffEvidence): string {
  return sha(
    JSON.stringify({
      summary: d.summary,
      volumes: Object.fromEntries(
        Object.entries(d.volumes)
          .sort(([a], [b]) => a.localeCompare(b))
          .map(([v, c]) => [v, [c.created, c.deleted, c.modified, c.bytes_added, c.bytes_removed]]),
      ),
      entries: d.entries,
      truncated: d.truncated,
      databases: d.databases.map((x) => ({ service: x.service, tables: x.tables, error: x.error ?? null })),
    }),
  );
}

/** Whether the runs' diffs agree (null when fewer than two could be read), and the forks that differ. */
export function compareDiffs(runs: ForkRun[]): { identical: boolean | null; divergent_forks: number[] } {
  const read = runs.filter((r) => r.error === null && r.diff);
  if (read.length < 2) return { identical: null, divergent_forks: [] };
  const ref = diffKey(read[0]?.diff as DiffEvidence);
  const divergent = read.filter((r) => diffKey(r.diff as DiffEvidence) !== ref).map((r) => r.index);
  return { identical: divergent.length === 0, divergent_forks: divergent };
}

export type DivergenceSource = "clock" | "randomness" | "network" | "ordering" | "state";

export interface Divergence {
  fork: number;
  /** The step (0-based) whose result differs; null when the steps agree and a volume differs. */
  step: number | null;
  volume: string | null;
  what: "exit_code" | "stdout" | "stderr" | "volume" | "error";
  /** Reference line → this fork's line, the first differing lines; for a volume, its files. */
  diff: string[];
  sources: DivergenceSource[];
}

export interface ReplayOutcome {
  identical: boolean;
  compared: number;
  failed: number;
  /** Each fork's digest of everything compared (steps and volumes): equal digests, equal runs. */
  digests: string[];
  first_divergence: Divergence | null;
  /** Every source named across all divergent forks. */
  sources: DivergenceSource[];
  divergent_forks: number[];
}

const sha = (s: string) => createHash("sha256").update(s).digest("hex");

/** The digest of one run: every step's exit code and output, every volume's digest. */
export function runDigest(run: ForkRun): string {
  const steps = run.steps.map((s) => `${s.exit_code}\u0000${sha(s.stdout)}\u0000${sha(s.stderr)}`);
  const vols = Object.keys(run.volumes)
    .sort()
    .map((v) => `${v}=${run.volumes[v]?.digest}`);
  return sha(JSON.stringify({ steps, vols }));
}

const CLOCK_PATTERNS = [
  /\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?/,
  /\b1[5-9]\d{8}(\.\d+)?\b/, // seconds since 1970, 2017…2033
  /\b1[5-9]\d{11}\b/, // milliseconds since 1970
  /\b1[5-9]\d{14}\b/, // microseconds since 1970
  /\b1[5-9]\d{17}\b/, // nanoseconds since 1970 (date +%s%N)
  /\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) /,
];
const RANDOM_PATTERNS = [
  /\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/i, // UUIDs
  // Hex with at least one letter: an all-digit run is a number (a time, a count), not an id.
  /\b(?=[0-9]*[a-f])[0-9a-f]{64}\b/, // container ids
  /\b(?=[0-9]*[a-f])[0-9a-f]{12}\b/, // short container ids, default hostnames
  /\b(?=[0-9]*[a-f])[0-9a-f]{16,}\b/, // random hex
  /\bpid[ =:]+\d+|\b\d+ pts\/|\[\d+\]/i, // process ids
];
const NETWORK_PATTERNS = [
  /\b([0-9a-f]{2}:){5}[0-9a-f]{2}\b/i, // MAC addresses
  /\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b/, // IPv4 addresses
];

/** What the changed text looks like: the sources recognised in the lines that differ. */
export function sourcesOf(before: string[], after: string[]): DivergenceSource[] {
  const found = new Set<DivergenceSource>();
  const sorted = (l: string[]) => [...l].sort().join("\n");
  if (
    before.length === after.length &&
    before.join("\n") !== after.join("\n") &&
    sorted(before) === sorted(after)
  )
    found.add("ordering");
  const changed = [...before, ...after];
  const hits = (patterns: RegExp[]) => changed.some((line) => patterns.some((p) => p.test(line)));
  if (hits(CLOCK_PATTERNS)) found.add("clock");
  if (hits(NETWORK_PATTERNS)) found.add("network");
  if (hits(RANDOM_PATTERNS)) found.add("randomness");
  return [...found];
}

/** The lines that differ, in order, as "- reference" / "+ this fork" pairs (at most maxLines). */
export function lineDiff(
  a: string,
  b: string,
  maxLines = 20,
): { diff: string[]; before: string[]; after: string[] } {
  const la = a.split("\n");
  const lb = b.split("\n");
  const before: string[] = [];
  const after: string[] = [];
  const diff: string[] = [];
  const n = Math.max(la.length, lb.length);
  for (let i = 0; i < n; i++) {
    const x = la[i];
    const y = lb[i];
    if (x === y) continue;
    if (x !== undefined) before.push(x);
    if (y !== undefined) after.push(y);
    if (diff.length < maxLines) {
      diff.push(`line ${i + 1}:`);
      if (x !== undefined) diff.push(`- ${x.slice(0, 400)}`);
      if (y !== undefined) diff.push(`+ ${y.slice(0, 400)}`);
    }
  }
  return { diff, before, after };
}

function volumeDiff(
  ref: ForkRun["volumes"][string] | undefined,
  other: ForkRun["volumes"][string] | undefined,
  maxFiles = 20,
): string[] {
  if (!ref || !other)
    return [ref ? "the volume is missing from this fork" : "the volume is new in this fork"];
  const a = new Map(ref.entries);
  const b = new Map(other.entries);
  const out: string[] = [];
  for (const [path, d] of a) {
    if (out.length >= maxFiles) break;
    if (!b.has(path)) out.push(`- ${path} (only in the reference)`);
    else if (b.get(path) !== d) out.push(`~ ${path} (differs)`);
  }
  for (const path of b.keys()) {
    if (out.length >= maxFiles) break;
    if (!a.has(path)) out.push(`+ ${path} (only in this fork)`);
  }
  if (out.length === 0)
    out.push("the same files list, beyond the entries listed; the content digest differs");
  return out;
}

/** Where run differs from ref first, or null when they agree. */
export function firstDifference(ref: ForkRun, run: ForkRun): Divergence | null {
  for (let i = 0; i < ref.steps.length; i++) {
    const a = ref.steps[i] as StepRun;
    const b = run.steps[i];
    if (!b)
      return {
        fork: run.index,
        step: i,
        volume: null,
        what: "error",
        diff: ["the step did not run"],
        sources: [],
      };
    for (const what of ["stdout", "stderr"] as const) {
      if (a[what] === b[what]) continue;
      const d = lineDiff(a[what], b[what]);
      return {
        fork: run.index,
        step: i,
        volume: null,
        what,
        diff: d.diff,
        sources: sourcesOf(d.before, d.after),
      };
    }
    if (a.exit_code !== b.exit_code)
      return {
        fork: run.index,
        step: i,
        volume: null,
        what: "exit_code",
        diff: [`- exit ${a.exit_code}`, `+ exit ${b.exit_code}`],
        sources: [],
      };
  }
  const names = [...new Set([...Object.keys(ref.volumes), ...Object.keys(run.volumes)])].sort();
  for (const v of names) {
    if (ref.volumes[v]?.digest === run.volumes[v]?.digest) continue;
    return {
      fork: run.index,
      step: null,
      volume: v,
      what: "volume",
      diff: volumeDiff(ref.volumes[v], run.volumes[v]),
      sources: ["state"],
    };
  }
  return null;
}

export function compareRuns(runs: ForkRun[]): ReplayOutcome {
  const ran = runs.filter((r) => r.error === null);
  const failed = runs.length - ran.length;
  const digests = runs.map((r) => (r.error === null ? runDigest(r) : ""));
  const ref = ran[0];
  const divergences: Divergence[] = [];
  if (ref)
    for (const r of ran.slice(1)) {
      const d = firstDifference(ref, r);
      if (d) divergences.push(d);
    }
  const failure = runs.find((r) => r.error !== null);
  const first =
    divergences[0] ??
    (failure
      ? {
          fork: failure.index,
          step: null,
          volume: null,
          what: "error" as const,
          diff: [failure.error as string],
          sources: [],
        }
      : null);
  const sources = new Set<DivergenceSource>();
  for (const d of divergences) for (const s of d.sources) sources.add(s);
  return {
    identical: divergences.length === 0 && failed === 0 && ran.length > 0,
    compared: ran.length,
    failed,
    digests,
    first_divergence: first,
    sources: [...sources],
    divergent_forks: divergences.map((d) => d.fork),
  };
}
