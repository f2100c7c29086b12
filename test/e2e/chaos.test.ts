/**
 * Crash safety, bounded for CI (scripts/chaos.ts is the long form): a server and a denvd as
 * separate processes, ops-world deployed to alpha (every other snapshot live: every service's
 * processes kept, and the forks after it restore them); denvd SIGKILLed at random moments of fork,
 * snapshot, rollback, verify and destroy, then the server at random moments of deploy, fork,
 * snapshot, verify and rollback. After every round the server, denvd and the engine agree, nothing
 * is paused that is not recorded frozen, and the request had its answer within its deadline; at the
 * end, destroying everything leaves nothing with the host's owner label.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { chaos, destroyAll } from "./chaos-run.ts";
import { type ProcessWorld, processWorld } from "./process-world.ts";

let w: ProcessWorld;
const seed = Number(process.env.DENV_CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));
const perOp = Number(process.env.DENV_CHAOS_PER_OP ?? 3);

before(async () => {
  w = await processWorld();
  const dep = await w.api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
  assert.equal(dep.data.status, "succeeded", JSON.stringify(dep.data.reason));
});

after(async () => {
  await w?.close();
});

for (const proc of ["denvd", "server"] as const) {
  test(`${proc} SIGKILLed at random moments of each operation: records agree, nothing frozen, nothing held (seed ${seed})`, async () => {
    const r = await chaos(w, { seed, perOp, process: proc, log: (l) => console.log(l) });
    assert.equal(r.rounds.length, perOp * 5);
    // The kills are meant to land while operations run: most of them must have.
    assert.ok(
      r.rounds.filter((x) => x.landed).length >= r.rounds.length / 3,
      `too few kills landed mid-operation: ${JSON.stringify(r.rounds.map((x) => [x.op, x.killAtMs, x.answerMs]))}`,
    );
    assert.deepEqual(r.problems, []);
    assert.equal(r.held, 0);
    assert.equal(r.orphans, 0);
  });
}

test("destroying everything after the chaos leaves nothing with the owner label", async () => {
  const end = await destroyAll(w);
  assert.deepEqual(end.problems, []);
  assert.equal(end.leftovers, 0);
});
