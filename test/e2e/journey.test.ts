/** The README's main job, the seed's journey through the real `denv` command, as a test. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer } from "node:net";
import { join } from "node:path";
import { test } from "node:test";
import { repoRoot } from "../harness/test-host.ts";

/** Whether nothing holds this port on 127.0.0.1 now (a listener or a connection's local end). */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

/**
 * `denv up --port P` takes P and P + 1 (port URLs). Both are looked at first, and taken below
 * Linux's ephemeral range (32768 up), where no outgoing connection of the suite's can hold one.
 */
async function freePortPair(): Promise<number> {
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    if ((await portFree(port)) && (await portFree(port + 1))) return port;
  }
}

test("the seed's journey runs green through the CLI", async () => {
  const dir = join("/var/lib/denv-test", `journey-${randomBytes(4).toString("hex")}`);
  const port = await freePortPair();
  const r = spawnSync(process.execPath, [join(repoRoot, "scripts/journey.ts")], {
    encoding: "utf8",
    env: {
      ...process.env,
      DENV_JOURNEY_DIR: dir,
      DENV_JOURNEY_PORT: String(port),
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
