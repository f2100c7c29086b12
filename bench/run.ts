/**
 * `npm run bench [-- --quick] [-- --json] [-- --save] [-- --only fork,api,scale,exec,transfer,fidelity]`: every
 * figure beside its peer, measured in the same run on this machine. Prints a table for people;
 * with --json, one JSON object on the last line ({machine, metrics, ratios}); with --save, also
 * writes bench/results/<date>.json. --only runs some parts (goals of the others read "not met").
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, release, totalmem } from "node:os";
import { join } from "node:path";
import { apiBench, type Metric } from "./api-bench.ts";
import { fidelityBench } from "./fidelity-bench.ts";
import { forkBench } from "./fork-bench.ts";
import { execUnderLoad, scaleBench } from "./scale-bench.ts";
import { transferBench } from "./transfer-bench.ts";

const quick = process.argv.includes("--quick");
const json = process.argv.includes("--json");
const save = process.argv.includes("--save");
const onlyAt = process.argv.indexOf("--only");
const only = onlyAt > 0 ? new Set((process.argv[onlyAt + 1] ?? "").split(",")) : null;
const part = (name: string) => !only || only.has(name);
const started = Date.now();

function machine() {
  const dockerVersion = (() => {
    try {
      return execFileSync("docker", ["version", "-f", "{{.Server.Version}}"], { encoding: "utf8" }).trim();
    } catch {
      return null;
    }
  })();
  return {
    cpus: cpus().length,
    cpu_model: cpus()[0]?.model ?? null,
    memory_bytes: totalmem(),
    kernel: release(),
    node: process.version,
    docker: dockerVersion,
    mode: quick ? "quick" : "full",
    date: new Date().toISOString(),
  };
}

const metrics: Record<string, Metric> = {
  ...(part("fork") ? await forkBench() : {}),
  ...(part("api") ? await apiBench(quick) : {}),
  // "exec" alone: the exec-under-load figures of the scale part.
  ...(part("scale") ? await scaleBench(quick) : part("exec") ? await execUnderLoad(quick) : {}),
  ...(part("transfer") ? await transferBench(quick) : {}),
  ...(part("fidelity") ? await fidelityBench(quick) : {}),
};
const v = (n: string) => metrics[n]?.value ?? Number.NaN;
const r2 = (x: number) => Math.round(x * 100) / 100;
const ratios = {
  fork_1gib_vs_floor: r2(v("fork_p50_ms_btrfs_1gib") / v("fork_floor_p50_ms_1gib")),
  fork_1gib_vs_10mib: r2(v("fork_p50_ms_btrfs_1gib") / v("fork_p50_ms_btrfs_10mib")),
  peer_fork_vs_denv_fork_1gib: r2(v("fork_p50_ms_peer_1gib") / v("fork_p50_ms_btrfs_1gib")),
  dir_fork_vs_btrfs_fork_1gib: r2(v("fork_p50_ms_dir_1gib") / v("fork_p50_ms_btrfs_1gib")),
  sandbox_create_vs_docker_run: r2(v("sandbox_create_p50_ms") / v("sandbox_create_peer_p50_ms")),
  exec_vs_engine_api: r2(v("exec_p50_ms") / v("exec_direct_p50_ms")),
  exec_vs_docker_exec: r2(v("exec_p50_ms") / v("exec_cli_p50_ms")),
  deploy_vs_docker_compose: r2(v("deploy_ms") / v("deploy_peer_ms")),
  fanout_vs_sequential: quick
    ? r2(v("fanout_8_ms") / v("fanout_8_sequential_ms"))
    : r2(v("fanout_32_ms") / v("fanout_32_sequential_ms")),
  fanout_pooled_vs_compose_copies: quick
    ? r2(v("fanout_8_pooled_ms") / v("fanout_8_peer_ms"))
    : r2(v("fanout_32_pooled_ms") / v("fanout_32_peer_ms")),
  pool_acquire_vs_cold_fork: r2(v("pool_acquire_p50_ms") / v("pool_acquire_peer_p50_ms")),
  create_throughput_vs_docker_run: r2(v("create_throughput_per_s") / v("create_throughput_peer_per_s")),
  create_throughput_vs_docker_run_50: r2(
    v("create_throughput_per_s_50") / v("create_throughput_peer_per_s_50"),
  ),
  exec_load_vs_engine_api: r2(v("exec_per_s") / v("exec_peer_per_s")),
  exec_load_vs_engine_api_100: r2(v("exec_per_s_100") / v("exec_peer_per_s_100")),
  files_put_vs_docker_cp: r2(v("files_put_mib_per_s") / v("files_put_peer_mib_per_s")),
  files_get_vs_docker_cp: r2(v("files_get_mib_per_s") / v("files_get_peer_mib_per_s")),
  clock_read_frozen_vs_real: r2(v("clock_read_ns_frozen") / v("clock_read_ns_real")),
  fork_frozen_vs_real: r2(v("fork_p50_ms_frozen") / v("fork_p50_ms_real")),
};
const goals: [string, boolean][] = [
  ["fork of 1 GiB ≤ 1.2× the floor", ratios.fork_1gib_vs_floor <= 1.2],
  ["fork of 1 GiB ≤ 1.2× the 10 MiB fork", ratios.fork_1gib_vs_10mib <= 1.2],
  ["fork ≥ 10× faster than the peer", ratios.peer_fork_vs_denv_fork_1gib >= 10],
  ["exec ≤ 25 ms p50", v("exec_p50_ms") <= 25],
  ["frozen window ≤ 100 ms", v("frozen_window_p50_ms") <= 100],
  ["sandbox create ≤ 500 ms p50", v("sandbox_create_p50_ms") <= 500],
  ["deploy no slower than docker-compose", ratios.deploy_vs_docker_compose <= 1],
  ...(quick
    ? []
    : ([
        ["32 ops-world forks ready ≤ 10 s (fan-out from a warm pool)", v("fanout_32_pooled_ms") <= 10_000],
        ["32 ops-world forks ready ≤ 10 s (fan-out, cold)", v("fanout_32_ms") <= 10_000],
      ] as [string, boolean][])),
  ["pool acquisition ≤ 50 ms p50", v("pool_acquire_p50_ms") <= 50],
  ["100 single-container sandboxes at concurrency 10 in ≤ 30 s", v("create_throughput_per_s") >= 100 / 30],
  ["200 live sandboxes", v("max_live_sandboxes") >= 200],
  ["500 exec/s with p99 ≤ 200 ms (20 callers)", v("exec_per_s") >= 500 && v("exec_load_p99_ms") <= 200],
  ["files put ≥ 200 MiB/s", v("files_put_mib_per_s") >= 200],
  ["files get ≥ 200 MiB/s", v("files_get_mib_per_s") >= 200],
  [
    "peak RSS of server and denvd under 256 MiB over the transfers",
    v("files_peak_rss_mib_server") < 256 && v("files_peak_rss_mib_denvd") < 256,
  ],
  ["a frozen fork ≤ 1.1× a real-clock fork", ratios.fork_frozen_vs_real <= 1.1],
];

const out = process.stdout;
out.write(
  `\ndenv benchmark (${quick ? "quick" : "full"}), ${Math.round((Date.now() - started) / 1000)} s\n\n`,
);
out.write(`${"metric".padEnd(32)}${"value".padStart(10)}  unit\n`);
for (const [name, m] of Object.entries(metrics))
  out.write(`${name.padEnd(32)}${String(m.value).padStart(10)}  ${m.unit}\n`);
out.write(`\n${"ratio".padEnd(32)}${"x".padStart(10)}\n`);
for (const [name, x] of Object.entries(ratios)) out.write(`${name.padEnd(32)}${String(x).padStart(10)}\n`);
out.write("\ngoals\n");
for (const [goal, met] of goals) out.write(`  ${met ? "met    " : "not met"}  ${goal}\n`);
const result = { machine: machine(), metrics, ratios, goals: Object.fromEntries(goals) };
if (save) {
  const dir = join(import.meta.dirname, "results");
  mkdirSync(dir, { recursive: true });
  // A run of some parts is saved beside the full run of the day, never over it.
  const parts = only ? `-${[...only].sort().join("-")}` : "";
  const file = join(dir, `${result.machine.date.slice(0, 10)}-${result.machine.mode}${parts}.json`);
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  out.write(`\nsaved ${file}\n`);
}
if (json) out.write(`${JSON.stringify(result)}\n`);
