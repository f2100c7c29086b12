/** The README's main job, the seed's journey through the real `denv` command, as a test. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { test } from "node:test";
import { repoRoot } from "./denvd-helpers.ts";

test("the seed's journey runs green through the CLI", () => {
  const dir = join("/var/lib/denv-test", `journey-${randomBytes(4).toString("hex")}`);
  const r = spawnSync(process.execPath, [join(repoRoot, "scripts/journey.ts")], {
    encoding: "utf8",
    env: {
      ...process.env,
      DENV_JOURNEY_DIR: dir,
      DENV_JOURNEY_PORT: String(20000 + Math.floor(Math.random() * 20000)),
    },
    timeout: 10 * 60_000,
  });
  assert.equal(r.status, 0, `${r.stdout.slice(-3000)}\n${r.stderr.slice(-2000)}`);
  for (const step of [
    "deploy alpha",
    "fork rollout-017",
    "files put and get",
    "snapshot mid-episode",
    "rollback",
    "phase log",
  ]) {
    assert.match(r.stdout, new RegExp(step));
  }
  assert.match(r.stdout, /right answer earns reward 1/);
  assert.match(r.stdout, /wrong answer earns reward 0/);
  assert.doesNotMatch(r.stdout, / ✗ /);
  assert.match(r.stdout, /✓ resolve[\s\S]*- provision[\s\S]*✓ snapshot[\s\S]*✓ verdict/);
});
