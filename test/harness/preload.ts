/**
 * Preloaded into every test file's process (`node --import ./test/harness/preload.ts --test`, as
 * test/harness/run-suite.ts gives it to every test file). Two things no reporter gives:
 *
 * - A file's wall time, from its process's start to its exit (its hooks, its server's start, its
 *   clean-up), appended to $DENV_TEST_TIMES when that is set, with the time it ended (epoch
 *   seconds: which files a run waited on at its end); a file is what the runner schedules, and
 *   .ci/run lists the slowest.
 * - Every test asserts something: each call of node:assert (and t.assert) is counted, and a test
 *   that ends having made none fails ("asserted nothing"). A test whose checks are elsewhere (a
 *   helper that throws) asserts through assert too, so this holds for them as well.
 */
import assert from "node:assert";
import { appendFileSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { relative } from "node:path";

// The runner passes this file to test files through NODE_OPTIONS, which every process a test starts
// inherits (the CLI, a server, denvd): only a test file's own process is timed and counted.
const file = process.argv[1] ?? "";
if (/\.test\.[cm]?[jt]s$/.test(file)) {
  const timesLog = process.env.DENV_TEST_TIMES;
  if (timesLog) {
    const startedMs = Date.now() - Math.round(performance.now());
    process.once("exit", () => {
      try {
        appendFileSync(
          timesLog,
          `${(Date.now() - startedMs) / 1000} ${relative(process.cwd(), file)} ${Math.round(Date.now() / 1000)}\n`,
        );
      } catch {
        // A clock that cannot write must not fail the file it timed.
      }
    });
  }

  let asserted = 0;
  const NOT_CHECKS = new Set(["AssertionError", "CallTracker", "Assert", "strict"]);
  for (const target of [assert, assert.strict] as unknown as Record<string, unknown>[]) {
    for (const [name, f] of Object.entries(target)) {
      if (typeof f !== "function" || NOT_CHECKS.has(name)) continue;
      target[name] = function counted(this: unknown, ...args: unknown[]) {
        asserted++;
        return (f as (...a: unknown[]) => unknown).apply(this, args);
      };
    }
  }
  // Named imports (`import { equal } from "node:assert/strict"`) see the counted functions too.
  syncBuiltinESMExports();

  const { afterEach, beforeEach } = await import("node:test");
  beforeEach(() => {
    asserted = 0;
  });
  afterEach((t) => {
    if (asserted === 0)
      throw new Error(`"${t.name}" asserted nothing: a test must check something that can fail`);
  });
}
