/**
 * The suite's own rules, checked on its source: no fixed sleep where a condition can be waited for
 * (test/harness/wait-for.ts: `waitFor` on observed state, `elapse` when time passing is the
 * subject), and every runner loads preload.ts, which fails a test that asserted nothing. The
 * sleeps still in the suite are listed below, file by file: a new one fails here, and one taken out
 * must come off the list (so the list only shrinks).
 */
import assert from "node:assert/strict";
import { glob, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { test } from "node:test";

const ROOT = resolve(import.meta.dirname, "../..");

/** Test code: every file under test/, and the unit tests beside the code. */
const TEST_CODE = ["test/**/*.ts", "packages/*/src/**/*.test.ts", "bench/*.test.ts"];

/**
 * A fixed sleep: a promise resolved by a timer (`new Promise((r) => setTimeout(r, 100))`), or a
 * timer from node:timers/promises. Timers that bound something else (a deadline, a watchdog) are
 * not sleeps and are not matched.
 */
const SLEEP = [
  /new Promise(?:<[^>]*>)?\(\s*\(?\s*(\w+)\s*\)?\s*=>\s*setTimeout\(\s*\1\s*,/g,
  /import\s*\{[^}]*\bsetTimeout\b[^}]*\}\s*from\s*["']node:timers\/promises["']/g,
];

/**
 * Sleeps not yet replaced by waitFor, by file. Most poll inside a loop on a condition, with a fixed
 * interval, or wait on a machine (dind, a fresh host) the harness has no probe of yet.
 */
const STILL_SLEEPING: Record<string, number> = {
  "test/e2e/chaos-run.ts": 1,
  "test/e2e/denvd-crash.test.ts": 1,
  "test/e2e/denvd-integrity.test.ts": 1,
  "test/e2e/failure-modes.test.ts": 1,
  "test/e2e/fixtures/ingress-client.ts": 2,
  "test/e2e/ingress-acme.test.ts": 1,
  "test/e2e/ingress.test.ts": 1,
  "test/e2e/lab/fleet-hosts.test.ts": 2,
  "test/e2e/lab/host-install.test.ts": 1,
  "test/e2e/mcp.test.ts": 1,
  "test/harness/fresh-host.ts": 1,
  "test/security/container-to-host.test.ts": 2,
  "test/security/egress-ipv6.test.ts": 1,
  "test/security/hostile-host.test.ts": 1,
  "test/security/ingress-name-hold.test.ts": 1,
};

/** Where sleeping is the point: the harness's own primitives. */
const SLEEPS_ALLOWED_IN = new Set(["test/harness/wait-for.ts", "test/harness/suite-rules.test.ts"]);

async function sleepsByFile(): Promise<Record<string, number>> {
  const found: Record<string, number> = {};
  const seen = new Set<string>();
  for (const pattern of TEST_CODE)
    for await (const f of glob(pattern, { cwd: ROOT, exclude: (p) => p.includes("node_modules") })) {
      if (seen.has(f) || SLEEPS_ALLOWED_IN.has(f)) continue;
      seen.add(f);
      const text = await readFile(join(ROOT, f), "utf8");
      const n = SLEEP.reduce((sum, re) => sum + (text.match(re)?.length ?? 0), 0);
      if (n > 0) found[f] = n;
    }
  return found;
}

test("no new fixed sleeps: each file sleeps no more than the list says, and the list names no file that stopped", async () => {
  const found = await sleepsByFile();
  const grown = Object.entries(found)
    .filter(([f, n]) => n > (STILL_SLEEPING[f] ?? 0))
    .map(([f, n]) => `${f}: ${n} sleeps (listed: ${STILL_SLEEPING[f] ?? 0}); wait with waitFor or elapse`);
  assert.deepEqual(grown, [], "fixed sleeps the list does not allow");
  const shrunk = Object.entries(STILL_SLEEPING)
    .filter(([f, n]) => (found[f] ?? 0) < n)
    .map(([f, n]) => `${f}: listed ${n}, has ${found[f] ?? 0}: take it down in STILL_SLEEPING`);
  assert.deepEqual(shrunk, [], "the list must shrink with the sleeps");
});

test("the scanner finds the sleeps it is meant to, and not a deadline's timer", () => {
  const count = (text: string) => SLEEP.reduce((sum, re) => sum + (text.match(re)?.length ?? 0), 0);
  assert.equal(count("await new Promise((r) => setTimeout(r, 100));"), 1);
  assert.equal(count("await new Promise((resolve) => setTimeout(resolve, 5));"), 1);
  assert.equal(count("await new Promise<void>((r) => setTimeout(r, killAtMs));"), 1);
  assert.equal(count('import { setTimeout as sleep } from "node:timers/promises";'), 1);
  assert.equal(count("const t = setTimeout(() => controller.abort(), 5000);"), 0);
  assert.equal(
    count("new Promise((resolve, reject) => { setTimeout(() => reject(new Error('x')), 9); })"),
    0,
  );
});

test("every runner of the suite loads the preload that fails a test asserting nothing", async () => {
  const runner = await readFile(join(ROOT, "test/harness/run-suite.ts"), "utf8");
  assert.match(runner, /NODE_OPTIONS[^\n]*--import=\$\{preload\}/);
  assert.match(runner, /join\(import\.meta\.dirname, "preload\.ts"\)/);
  const pkg = JSON.parse(await readFile(join(ROOT, "package.json"), "utf8")) as {
    scripts: Record<string, string>;
  };
  for (const [name, script] of Object.entries(pkg.scripts))
    if (/node --test\b/.test(script))
      assert.match(script, /--import[= ]\.\/test\/harness\/preload\.ts/, name);
  const tests = await readFile(join(ROOT, "scripts/test.sh"), "utf8");
  assert.match(tests, /run-suite\.ts/, "scripts/test.sh runs the suite through run-suite.ts");
});
