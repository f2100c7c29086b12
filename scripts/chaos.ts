/**
 * The long form of the chaos test (test/e2e/chaos.test.ts runs a bounded one): a server and a denvd
 * as separate processes, ops-world deployed to alpha, then denvd SIGKILLed at random moments of
 * fork, snapshot, rollback, verify and destroy, and the server at random moments of deploy, fork,
 * snapshot, verify and rollback; after each round the server, denvd and the engine must agree and
 * nothing may be left paused that is not recorded frozen. Ends by destroying everything and
 * counting what is left. Prints one line per round and a JSON summary; exits 1 on any problem.
 *
 *   node scripts/chaos.ts [--per-op 20] [--seed N] [--only denvd|server] [--json FILE]
 *
 * Needs the test host set up (bash scripts/setup-host.sh: engine, images, registry, btrfs pool).
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { type ChaosReport, chaos, destroyAll } from "../test/e2e/chaos-run.ts";
import { processWorld } from "../test/e2e/process-world.ts";

const { values } = parseArgs({
  options: {
    "per-op": { type: "string", default: "20" },
    seed: { type: "string" },
    only: { type: "string" },
    json: { type: "string" },
  },
});
const perOp = Number(values["per-op"]);
const seed = values.seed ? Number(values.seed) : Math.floor(Math.random() * 2 ** 31);
const started = Date.now();
const w = await processWorld();
let failed = false;
try {
  const dep = await w.api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
  if (dep.data.status !== "succeeded") throw new Error(`alpha did not deploy: ${JSON.stringify(dep.data)}`);
  const reports: ChaosReport[] = [];
  for (const proc of ["denvd", "server"] as const) {
    if (values.only && values.only !== proc) continue;
    console.log(`# ${proc}: ${perOp} kills per operation, seed ${seed}`);
    reports.push(await chaos(w, { seed, perOp, process: proc, log: (l) => console.log(l) }));
  }
  const end = await destroyAll(w);
  const summary = {
    seed,
    duration_s: Math.round((Date.now() - started) / 1000),
    runs: reports.map((r) => ({
      process: r.rounds[0]?.process,
      kills: r.rounds.length,
      kills_mid_operation: r.rounds.filter((x) => x.landed).length,
      left_frozen: r.frozen,
      held_past_deadline: r.held,
      orphans: r.orphans,
      rounds_with_problems: r.rounds.filter((x) => x.problems.length).length,
      slowest_answer_ms: Math.max(...r.rounds.map((x) => x.answerMs)),
      answers: Object.entries(
        r.rounds.reduce<Record<string, number>>((m, x) => {
          const k = `${x.op}: ${x.answer.replace(/:.*$/, "")}`;
          m[k] = (m[k] ?? 0) + 1;
          return m;
        }, {}),
      ),
    })),
    leftovers: end.leftovers,
    problems: [...reports.flatMap((r) => r.problems), ...end.problems],
  };
  console.log(JSON.stringify(summary, null, 2));
  if (values.json) writeFileSync(values.json, `${JSON.stringify({ summary, reports }, null, 2)}\n`);
  failed = summary.problems.length > 0;
} finally {
  await w.close();
}
process.exit(failed ? 1 : 0);
