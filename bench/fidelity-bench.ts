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
    const samples = quick ? 3 : 8;
    for (let i = 0; i < samples; i++) {
      for (const mode of ["frozen", "real"] as const) {
        const t = performance.now();
        const f = await api("POST", "/v1/sandboxes", { from_version: versions[mode], name: `${mode}-${i}` });
        forkMs[mode].push(performance.now() - t);
        const r = await api("POST", `/v1/envs/${f.id}/exec`, {
          service: "opsbox",
          command: [
            "python3",
            "-c",
            "import time\nn=10**6\nt=time.perf_counter()\nfor _ in range(n): time.time()\nprint((time.perf_counter()-t)/n*1e9)",
          ],
        });
        reads[mode].push(Number(r.stdout));
        await api("DELETE", `/v1/envs/${f.id}`);
      }
    }
    results.clock_read_ns_frozen = {
      value: ms(reads.frozen),
      unit: "ns per time.time()",
      samples: reads.frozen,
    };
    results.clock_read_ns_real = { value: ms(reads.real), unit: "ns per time.time()", samples: reads.real };
    results.fork_p50_ms_frozen = { value: ms(forkMs.frozen), unit: "ms", samples: forkMs.frozen };
    results.fork_p50_ms_real = { value: ms(forkMs.real), unit: "ms", samples: forkMs.real };
    log(
      `clock read ${ms(reads.frozen)} ns frozen vs ${ms(reads.real)} ns real; fork ${ms(forkMs.frozen)} vs ${ms(forkMs.real)} ms`,
    );

    // --- a replay of 20 forks vs the same 20 forks made and destroyed ---
    const n = quick ? 6 : 20;
    let t = performance.now();
    const rep = await api("POST", `/v1/versions/${versions.frozen}/replays?wait=true`, {
      forks: n,
      parallel: 4,
      steps: EPISODE,
    });
    const replayMs = performance.now() - t;
    if (rep.status !== "identical")
      log(`the replay was ${rep.status}: ${JSON.stringify(rep.report?.first_divergence)}`);
    t = performance.now();
    const made = await api("POST", `/v1/versions/${versions.frozen}/forks`, {
      count: n,
      name_prefix: "plain",
      sandbox: true,
    });
    await Promise.all(
      (made.forks as { environment?: { id: string } }[]).map((f) =>
        f.environment ? api("DELETE", `/v1/envs/${f.environment.id}`) : null,
      ),
    );
    const plainMs = performance.now() - t;
    results[`replay_${n}_ms`] = {
      value: Math.round(replayMs),
      unit: "ms",
      note: `${rep.status}; 4 forks at a time, each: fork, 4 steps (one sleeps 1 s), digest, destroy`,
    };
    results[`replay_${n}_peer_ms`] = {
      value: Math.round(plainMs),
      unit: "ms",
      note: "the same forks made (a fan-out, 8 at a time) and destroyed, no episode",
    };
    log(
      `replay of ${n}: ${Math.round(replayMs)} ms (${rep.status}) vs ${Math.round(plainMs)} ms for the forks alone`,
    );
  } finally {
    await rig.close();
  }
  return results;
}
