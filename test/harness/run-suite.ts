/**
 * The suite's runner: which files run, in what order and beside what. Node's `--test` sorts the
 * files it is given by name, so a long file named late starts late and the run waits on it alone;
 * here files start longest first (by file-times.json, measured on this kind of machine), to the
 * machine's measure, and the tiers that do not disturb each other run side by side:
 *
 * - unit: unit tests beside the code, the in-process route tests, the docs and the suite's rules
 *   (`npm test`, the edit loop);
 * - e2e: the end-to-end and security tests on the real engine, several at once, in one run with the
 *   unit tier when both are asked for;
 * - lab: fresh Debian machines with their own engines, one at a time, beside e2e;
 * - heavy: 10 GiB each way through the API, after lab (one disk-bound run at a time).
 *
 *     node test/harness/run-suite.ts [unit] [e2e] [lab] [heavy]      (none named: all)
 *
 * Unit and e2e report live; lab and heavy's report is printed whole after it, each run with its own
 * `ℹ pass N` / `ℹ fail N` (CI adds them up). Every test file is loaded with preload.ts (its wall
 * time, and a test that asserted nothing fails). Exit code 1 when any failed.
 */
import { spawn } from "node:child_process";
import { openSync, readFileSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { availableParallelism, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pipeline } from "node:stream/promises";
import { run } from "node:test";
import { spec } from "node:test/reporters";

const ROOT = resolve(import.meta.dirname, "../..");
const TIERS = ["unit", "e2e", "lab", "heavy"] as const;
type Tier = (typeof TIERS)[number];

/** Each tier's files (globs from the repository's root). */
const FILES: Record<Tier, string[]> = {
  unit: ["packages/*/src/**/*.test.ts", "bench/*.test.ts", "test/docs/*.test.ts", "test/harness/*.test.ts"],
  e2e: ["test/e2e/*.test.ts", "test/security/*.test.ts"],
  lab: ["test/e2e/lab/*.test.ts"],
  heavy: ["test/heavy/*.test.ts"],
};

/** A file not yet measured is taken as this long: new end-to-end files are rarely short. */
const UNMEASURED_S = 30;

async function filesOf(tiers: Tier[]): Promise<string[]> {
  const { glob } = await import("node:fs/promises");
  const times = JSON.parse(readFileSync(join(import.meta.dirname, "file-times.json"), "utf8")) as Record<
    string,
    number
  >;
  const estimate = new Map<string, number>();
  for (const tier of tiers)
    for (const pattern of FILES[tier])
      for await (const f of glob(pattern, { cwd: ROOT }))
        estimate.set(f, times[f] ?? (tier === "unit" ? 1 : UNMEASURED_S));
  return [...estimate.keys()].sort(
    (a, b) => (estimate.get(b) ?? 0) - (estimate.get(a) ?? 0) || a.localeCompare(b),
  );
}

/** One run of the tiers' files together; its report goes to `out`. Resolves to whether all passed. */
async function runTiers(tiers: Tier[], concurrency: number, out: NodeJS.WritableStream): Promise<boolean> {
  const files = await filesOf(tiers);
  if (files.length === 0) return true;
  let failed = false;
  const stream = run({
    files: files.map((f) => join(ROOT, f)),
    concurrency,
    isolation: "process",
    cwd: ROOT,
  });
  stream.on("test:fail", (e) => {
    // A todo's failure is not one; anything else (a test, a hook, a file that would not load) is.
    if (!e.todo) failed = true;
  });
  await pipeline(stream.compose(spec), out, { end: false });
  return !failed;
}

/** Runs the named tiers: unit and e2e in one run, reported live; lab and heavy beside it. */
async function main(): Promise<number> {
  const named = process.argv.slice(2);
  for (const n of named)
    if (!TIERS.includes(n as Tier)) {
      console.error(`run-suite: no tier named '${n}' (${TIERS.join(", ")})`);
      return 2;
    }
  const want = (t: Tier) => named.length === 0 || named.includes(t);
  // Every test file's process loads the preload (run()'s own execArgv is not passed on here).
  const preload = join(import.meta.dirname, "preload.ts");
  process.env.NODE_OPTIONS = `${process.env.NODE_OPTIONS ?? ""} --import=${preload}`.trim();
  // Every server a test starts checks each JSON answer against its route's schema (api-route.ts).
  process.env.DENV_CHECK_ANSWERS ??= "1";
  const cores = availableParallelism();
  // End-to-end files mostly wait on the engine, the disk and each other's containers: one more
  // than the cores keeps both busy (two more was slower: 4 files at once beside the lab, heavy
  // and Python runs overloaded the disk and the cores, and every file took longer).
  const e2eConcurrency = Number(process.env.DENV_E2E_CONCURRENCY) || cores + 1;
  // Unit and end-to-end files in one run, longest first, so the short unit files fill the turns
  // the long ones leave; beside it, in a runner of its own, lab then heavy, one file at a time
  // (each loads the disk). Niced, the second lane was slower and the first no faster (1362 s
  // against 1241 s for the whole CI run): the cores are busy throughout either way.
  const first = (["unit", "e2e"] as Tier[]).filter(want);
  const side = (["lab", "heavy"] as Tier[]).filter(want);
  if (first.length === 0) {
    let ok = true;
    for (const t of side) ok = (await runTimed([t], 1)) && ok;
    return ok ? 0 : 1;
  }
  const dir = await mkdtemp(join(tmpdir(), "denv-suite-"));
  try {
    const sideLog = join(dir, "side.log");
    const sideRun = side.length
      ? new Promise<number>((resolve) => {
          const out = openSync(sideLog, "w");
          const child = spawn(process.execPath, [import.meta.filename, ...side], {
            stdio: ["ignore", out, out],
          });
          child.on("error", () => resolve(1));
          child.on("exit", (code) => resolve(code ?? 1));
        })
      : Promise.resolve(0);
    const firstOk = await runTimed(first, first.includes("e2e") ? e2eConcurrency : cores);
    const sideCode = await sideRun;
    if (side.length)
      // Printed whole once both ended, so no report is cut into another.
      process.stdout.write(`\n── ${side.join(", ")} (run beside) ──\n${await readFile(sideLog, "utf8")}`);
    return firstOk && sideCode === 0 ? 0 : 1;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** One run of the tiers' files, reported live, then its time. */
async function runTimed(tiers: Tier[], concurrency: number): Promise<boolean> {
  const started = Date.now();
  const ok = await runTiers(tiers, concurrency, process.stdout);
  console.log(
    `ℹ ${tiers.join("+")}: ${Math.round((Date.now() - started) / 1000)} s (${concurrency} at a time)`,
  );
  return ok;
}

process.exitCode = await main();
