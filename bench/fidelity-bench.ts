/**
 * What the frozen clock and replays cost, each beside its peer in the same run:
 *   a wall-clock read (Python's time.time(), a million calls) in a fork of ops-world with
 *     x-denv.clock: frozen vs the same fork of ops-world with clock: real (the kernel's vDSO);
 *   a fork of ops-world, frozen vs real (the clock directory, the held start, reading each
 *     service's reach);
 *   a replay of 20 forks running the acceptance episode vs making and destroying the same 20 forks
 *     without it (what the steps, the digests and the comparison add).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Metric } from "./api-bench.ts";
import { log, ms, openBenchRig } from "./bench-rig.ts";
import { metricOf, shuffled } from "./bench-stats.ts";

const root = join(import.meta.dirname, "..");

const EPISODE = [
  {
    service: "opsbox",
    command:
      "psql -qc \"create table if not exists episode(at timestamptz, note text); insert into episode values (now(), 'start')\"",
  },
  { service: "opsbox", command: "date -Ins > /home/ubuntu/stamp.txt" },
  { service: "opsbox", command: ["sleep", "1"] },
  {
    service: "opsbox",
    command: "date -Ins >> /home/ubuntu/stamp.txt; psql -qc \"insert into episode values (now(), 'end')\"",
  },
];

export async function fidelityBench(quick: boolean): Promise<Record<string, Metric>> {
  const rig = await openBenchRig("fidelity");
  const { api } = rig;
  const results: Record<string, Metric> = {};
  try {
    const compose = readFileSync(join(root, "examples/ops-world/docker-compose.yaml"), "utf8");
    const versions: Record<"frozen" | "real", string> = { frozen: "", real: "" };
    for (const mode of ["frozen", "real"] as const) {
      const name = `ops-${mode}`;
      await api("POST", "/v1/projects", { name, kind: "rl-environment", source: `./${name}` });
      await api("PUT", `/v1/projects/${name}/source`, {
        compose: compose.replace("clock: frozen", `clock: ${mode}`),
      });
      versions[mode] = (
        await api("POST", `/v1/projects/${name}/deploy?wait=true`, { env: "alpha" })
      ).version_id;
    }
    // --- a wall-clock read, frozen vs the kernel's ---
    const reads: Record<"frozen" | "real", number[]> = { frozen: [], real: [] };
    const forkMs: Record<"frozen" | "real", number[]> = { frozen: [], real: [] };
    // One untimed warm-up fork of each, then rounds in a shuffled order; every read is checked.
    const samples = quick ? 3 : 20;
    const sample = async (mode: "frozen" | "real", i: number) => {
      const t = performance.now();
      const f = await api("POST", "/v1/sandboxes", { from_version: versions[mode], name: `${mode}-${i}` });
      const elapsed = performance.now() - t;
      const r = await api("POST", `/v1/envs/${f.id}/exec`, {
        service: "opsbox",
        command: [
          "python3",
          "-c",
          "import time\nn=10**6\nt=time.perf_counter()\nfor _ in range(n): time.time()\nprint((time.perf_counter()-t)/n*1e9)",
        ],
      });
      await api("DELETE", `/v1/envs/${f.id}`);
      const ns = Number(r.stdout);
      if (r.exit_code !== 0 || !Number.isFinite(ns) || ns <= 0)
        throw new Error(`clock read in a ${mode} fork: ${JSON.stringify(r)}`);
      if (i < 0) return;
      forkMs[mode].push(elapsed);
      reads[mode].push(ns);
    };
    await sample("frozen", -1);
    await sample("real", -1);
    for (let i = 0; i < samples; i++)
      for (const mode of shuffled(["frozen", "real"] as const, 5000 + i)) await sample(mode, i);
    results.clock_read_ns_frozen = metricOf(
      reads.frozen,
      "ns per time.time()",
      "a million calls in a fork",
      2,
    );
    results.clock_read_ns_real = metricOf(reads.real, "ns per time.time()", "a million calls in a fork", 2);
    results.fork_p50_ms_frozen = metricOf(
      forkMs.frozen,
      "ms",
      "POST /v1/sandboxes of ops-world, clock: frozen",
      0,
    );
    results.fork_p50_ms_real = metricOf(forkMs.real, "ms", "POST /v1/sandboxes of ops-world, clock: real", 0);
    log(
      `clock read ${ms(reads.frozen)} ns frozen vs ${ms(reads.real)} ns real; fork ${ms(forkMs.frozen)} vs ${ms(forkMs.real)} ms`,
    );

    // --- a replay of 20 forks vs the same 20 forks made and destroyed, rounds in a shuffled order ---
    const n = quick ? 6 : 20;
    const replayRounds = quick ? 2 : 3;
    const replayMs: number[] = [];
    const plainMs: number[] = [];
    const replay = async () => {
      const t = performance.now();
      const rep = await api("POST", `/v1/versions/${versions.frozen}/replays?wait=true`, {
        forks: n,
        parallel: 4,
        steps: EPISODE,
      });
      // A replay that diverged measured something else: the sample fails the run.
      if (rep.status !== "identical")
        throw new Error(`the replay was ${rep.status}: ${JSON.stringify(rep.report?.first_divergence)}`);
      replayMs.push(performance.now() - t);
    };
    const plain = async (round: number) => {
      const t = performance.now();
      const made = await api("POST", `/v1/versions/${versions.frozen}/forks`, {
        count: n,
        name_prefix: `plain${round}`,
        sandbox: true,
      });
      const forks = made.forks as { environment?: { id: string } }[];
      await Promise.all(
        forks.map((f) => (f.environment ? api("DELETE", `/v1/envs/${f.environment.id}`) : null)),
      );
      if (made.created !== n) throw new Error(`made ${made.created} of ${n} forks`);
      plainMs.push(performance.now() - t);
    };
    for (let round = 0; round < replayRounds; round++)
      for (const run of shuffled([replay, plain], 4000 + round)) await run(round);
    results[`replay_${n}_ms`] = metricOf(
      replayMs,
      "ms",
      `identical each round (${replayRounds}); 4 forks at a time, each: fork, 4 steps (one sleeps 1 s), digest, destroy`,
      0,
    );
    results[`replay_${n}_peer_ms`] = metricOf(
      plainMs,
      "ms",
      "the same forks made (a fan-out, 8 at a time) and destroyed, no episode",
      0,
    );
    log(
      `replay of ${n}: ${ms(replayMs)} ms vs ${ms(plainMs)} ms for the forks alone (${replayRounds} rounds)`,
    );
  } finally {
    await rig.close();
  }
  return results;
}
