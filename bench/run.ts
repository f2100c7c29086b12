/**
 * `npm run bench [-- --quick] [-- --json] [-- --save] [-- --only fork,api,scale,exec,creates,transfer,fidelity,fleet,e2b,ingress,diff,live]`: every
 * figure beside its peer, measured in the same run on this machine. Prints a table for people
 * (each median with its p5–p95 spread and the 95% interval of the median); with --json, one JSON
 * object on the last line ({commit, machine, duration_s, metrics with every sample, ratios,
 * goals}); with --save, also writes bench/results/<date>.json. --only runs some parts (goals of
 * the others read "not run", null in the JSON). A goal is met only when the median's whole interval clears it; a
 * ratio of two figures measured in the same rounds, when the interval of the rounds' own ratios does.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, release, totalmem } from "node:os";
import { join } from "node:path";
import { apiBench } from "./api-bench.ts";
import {
  atLeast,
  atMost,
  interval,
  type Metric,
  pairedRatioInterval,
  ratioInterval,
  withSpread,
} from "./bench-stats.ts";
import { diffBench } from "./diff-bench.ts";
import { e2bBench } from "./e2b-bench.ts";
import { fidelityBench } from "./fidelity-bench.ts";
import { fleetBench } from "./fleet-bench.ts";
import { forkBench } from "./fork-bench.ts";
import { ingressBench } from "./ingress-bench.ts";
import { liveBench } from "./live-bench.ts";
import { createsBench, execUnderLoad, scaleBench } from "./scale-bench.ts";
import { transferBench } from "./transfer-bench.ts";

const quick = process.argv.includes("--quick");
const json = process.argv.includes("--json");
const save = process.argv.includes("--save");
const onlyAt = process.argv.indexOf("--only");
const only = onlyAt > 0 ? new Set((process.argv[onlyAt + 1] ?? "").split(",")) : null;
const part = (name: string) => !only || only.has(name);
const started = Date.now();

/** The commit measured, and whether the tree had changes beside it. */
function commit(): { commit: string | null; dirty: boolean } {
  try {
    const head = execFileSync("git", ["rev-parse", "HEAD"], {
      cwd: import.meta.dirname,
      encoding: "utf8",
    }).trim();
    const status = execFileSync("git", ["status", "--porcelain", "--untracked-files=no"], {
      cwd: import.meta.dirname,
      encoding: "utf8",
    });
    return { commit: head, dirty: status.trim() !== "" };
  } catch {
    return { commit: null, dirty: false };
  }
}

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

// Read before measuring: the code measured is the code at the start.
const { commit: sha, dirty } = commit();
const measured: Record<string, Metric> = {
  ...(part("fork") ? await forkBench(quick) : {}),
  ...(part("api") ? await apiBench(quick) : {}),
  // "exec" and "creates" alone: the exec-under-load and create-throughput figures of the scale part.
  ...(part("scale") ? await scaleBench(quick) : part("exec") ? await execUnderLoad(quick) : {}),
  ...(!part("scale") && part("creates") ? await createsBench(quick) : {}),
  ...(part("transfer") ? await transferBench(quick) : {}),
  ...(part("fidelity") ? await fidelityBench(quick) : {}),
  ...(part("fleet") ? await fleetBench(quick) : {}),
  ...(part("e2b") ? await e2bBench(quick) : {}),
  ...(part("ingress") ? await ingressBench(quick) : {}),
  ...(part("diff") ? await diffBench(quick) : {}),
  ...(part("live") ? await liveBench(quick) : {}),
};
// Every metric with samples carries its spread and the interval of its median.
const metrics = Object.fromEntries(Object.entries(measured).map(([k, m]) => [k, withSpread(m)]));
const m = (n: string) => metrics[n];
const r2 = (x: number) => Math.round(x * 100) / 100;
/**
 * name → [metric a, metric b]: a / b, its median ratio and its interval. "paired" where the part
 * measures the two in the same rounds, sample for sample (each checked in its bench file): the
 * interval is then the one of the rounds' own ratios, and the extremes of the two intervals stay
 * beside it as `unpaired_interval`. A part whose samples do not pair up (a round lost) falls back.
 */
const ratioOf: Record<string, [string, string] | [string, string, "paired"]> = {
  fork_1gib_vs_floor: ["fork_p50_ms_btrfs_1gib", "fork_floor_p50_ms_1gib", "paired"],
  fork_1gib_vs_10mib: ["fork_p50_ms_btrfs_1gib", "fork_p50_ms_btrfs_10mib", "paired"],
  peer_fork_vs_denv_fork_1gib: ["fork_p50_ms_peer_1gib", "fork_p50_ms_btrfs_1gib", "paired"],
  peer_snapshot_fork_vs_denv_fork_1gib: [
    "fork_p50_ms_peer_snapshot_1gib",
    "fork_p50_ms_btrfs_1gib",
    "paired",
  ],
  dir_fork_vs_btrfs_fork_1gib: ["fork_p50_ms_dir_1gib", "fork_p50_ms_btrfs_1gib"],
  sandbox_create_vs_docker_run: ["sandbox_create_p50_ms", "sandbox_create_peer_p50_ms", "paired"],
  exec_vs_engine_api: ["exec_p50_ms", "exec_direct_p50_ms"],
  exec_vs_docker_exec: ["exec_p50_ms", "exec_cli_p50_ms"],
  deploy_vs_docker_compose: ["deploy_ms", "deploy_peer_ms", "paired"],
  deploy_ready_vs_docker_compose_warm: ["deploy_ready_ms", "deploy_ready_peer_ms", "paired"],
  fanout_vs_sequential: quick
    ? ["fanout_8_ms", "fanout_8_sequential_ms"]
    : ["fanout_32_ms", "fanout_32_sequential_ms"],
  fanout_pooled_vs_compose_copies: quick
    ? ["fanout_8_pooled_ms", "fanout_8_peer_ms"]
    : ["fanout_32_pooled_ms", "fanout_32_peer_ms"],
  pool_acquire_vs_cold_fork: ["pool_acquire_p50_ms", "pool_acquire_peer_p50_ms"],
  create_throughput_vs_docker_run: ["create_throughput_per_s", "create_throughput_peer_per_s", "paired"],
  create_throughput_vs_docker_run_50: [
    "create_throughput_per_s_50",
    "create_throughput_peer_per_s_50",
    "paired",
  ],
  exec_load_vs_engine_api: ["exec_per_s", "exec_peer_per_s"],
  exec_load_vs_engine_api_100: ["exec_per_s_100", "exec_peer_per_s_100"],
  files_put_vs_docker_cp: ["files_put_mib_per_s", "files_put_peer_mib_per_s", "paired"],
  files_get_vs_docker_cp: ["files_get_mib_per_s", "files_get_peer_mib_per_s", "paired"],
  clock_read_frozen_vs_real: ["clock_read_ns_frozen", "clock_read_ns_real"],
  fork_frozen_vs_real: ["fork_p50_ms_frozen", "fork_p50_ms_real"],
  fork_cpu_vs_floor: ["fork_cycle_cpu_s_1gib", "fork_floor_cycle_cpu_s_1gib", "paired"],
  replication_vs_direct_pipe: ["replication_mib_per_s", "replication_peer_mib_per_s"],
  e2b_exec_vs_v1_exec: ["e2b_exec_p50_ms", "e2b_exec_v1_p50_ms"],
  e2b_exec_vs_v1_login_shell: ["e2b_exec_p50_ms", "e2b_exec_v1_login_p50_ms"],
  e2b_exec_vs_engine_exec: ["e2b_exec_p50_ms", "e2b_exec_engine_p50_ms"],
  e2b_create_vs_v1_create: ["e2b_create_p50_ms", "e2b_create_v1_p50_ms"],
  ingress_vs_direct: ["ingress_https_p50_ms", "ingress_direct_p50_ms"],
  rsync_vs_diff: ["diff_rsync_p50_ms", "diff_p50_ms"],
  diff_r_vs_diff: ["diff_diffr_p50_ms", "diff_p50_ms"],
  rsync_vs_diff_cold: ["diff_cold_rsync_p50_ms", "diff_cold_p50_ms"],
  diff_r_vs_diff_cold: ["diff_cold_diffr_p50_ms", "diff_cold_p50_ms"],
  live_fork_vs_cold_fork: ["live_fork_ready_p50_ms", "live_cold_fork_ready_p50_ms", "paired"],
  live_fork_vs_docker_by_hand: ["live_fork_ready_p50_ms", "live_peer_restore_p50_ms", "paired"],
  ops_world_live_fork_vs_cold_fork: [
    "ops_world_live_fork_query_p50_ms",
    "ops_world_cold_fork_query_p50_ms",
    "paired",
  ],
  first_fork_elsewhere_vs_holder: ["first_fork_elsewhere_ms", "first_fork_holder_ms"],
  forks_three_hosts_vs_one: quick
    ? ["fleet_8_forks_three_hosts_ms", "fleet_8_forks_one_host_ms"]
    : ["fleet_32_forks_three_hosts_ms", "fleet_32_forks_one_host_ms"],
};
interface Ratio {
  /** The ratio of the two medians. */
  value: number;
  /** The interval a goal is judged on. */
  interval: [number, number];
  /** Paired: the median of the rounds' own ratios, and the extremes of the two intervals. */
  round_median?: number;
  unpaired_interval?: [number, number];
}
// Goals are judged on the intervals before they are rounded for the table.
const judged: Record<string, [number, number]> = {};
const ratios = Object.fromEntries(
  Object.entries(ratioOf)
    .filter(([, [a, b]]) => m(a) && m(b))
    .map(([name, [a, b, how]]) => {
      const [lo, hi] = ratioInterval(m(a), m(b));
      const value = r2((m(a) as Metric).value / (m(b) as Metric).value);
      const paired = how === "paired" ? pairedRatioInterval(m(a), m(b)) : undefined;
      judged[name] = paired?.interval ?? [lo, hi];
      const ratio: Ratio = paired
        ? {
            value,
            interval: [r2(paired.interval[0]), r2(paired.interval[1])],
            round_median: r2(paired.median),
            unpaired_interval: [r2(lo), r2(hi)],
          }
        : { value, interval: [r2(lo), r2(hi)] };
      return [name, ratio];
    }),
) as Record<string, Ratio>;
// A goal whose figures this run did not measure (a part left out by --only) is not run, not
// failed: each goal is judged with `unmeasured` cleared, and the readers below set it.
let unmeasured = false;
const ratioIv = (name: string): [number, number] => {
  if (!judged[name]) unmeasured = true;
  return judged[name] ?? [Number.NaN, Number.NaN];
};
const iv = (name: string) => {
  if (!m(name)) unmeasured = true;
  return interval(m(name));
};
const goalChecks: [string, () => boolean][] = [
  ["fork of 1 GiB ≤ 1.2× the floor", () => atMost(ratioIv("fork_1gib_vs_floor"), 1.2)],
  ["fork of 1 GiB ≤ 1.2× the 10 MiB fork", () => atMost(ratioIv("fork_1gib_vs_10mib"), 1.2)],
  ["fork ≥ 10× faster than the peer", () => atLeast(ratioIv("peer_fork_vs_denv_fork_1gib"), 10)],
  ["exec ≤ 25 ms p50", () => atMost(iv("exec_p50_ms"), 25)],
  [
    "frozen window p50 ≤ 80 ms, p95 ≤ 120 ms",
    () =>
      atMost(iv("frozen_window_p50_ms"), 80) &&
      (m("frozen_window_p50_ms")?.p95 ?? Number.POSITIVE_INFINITY) <= 120,
  ],
  ["sandbox create ≤ 500 ms p50", () => atMost(iv("sandbox_create_p50_ms"), 500)],
  ["deploy no slower than docker-compose", () => atMost(ratioIv("deploy_vs_docker_compose"), 1)],
  ...(quick
    ? []
    : ([
        [
          "32 ops-world forks ready ≤ 10 s (fan-out from a warm pool)",
          () => atMost(iv("fanout_32_pooled_ms"), 10_000),
        ],
        ["32 ops-world forks ready ≤ 10 s (fan-out, cold)", () => atMost(iv("fanout_32_ms"), 10_000)],
      ] as [string, () => boolean][])),
  ["pool acquisition ≤ 50 ms p50", () => atMost(iv("pool_acquire_p50_ms"), 50)],
  [
    "100 single-container sandboxes at concurrency 10 in ≤ 30 s",
    () => atLeast(iv("create_throughput_per_s"), 100 / 30),
  ],
  ["200 live sandboxes", () => atLeast(iv("max_live_sandboxes"), 200)],
  [
    "500 exec/s with p99 ≤ 200 ms (20 callers)",
    () => atLeast(iv("exec_per_s"), 500) && atMost(iv("exec_load_p99_ms"), 200),
  ],
  ["files put ≥ 200 MiB/s", () => atLeast(iv("files_put_mib_per_s"), 200)],
  ["files get ≥ 200 MiB/s", () => atLeast(iv("files_get_mib_per_s"), 200)],
  [
    "peak RSS of server and denvd under 256 MiB over the transfers",
    () => atMost(iv("files_peak_rss_mib_server"), 255.9) && atMost(iv("files_peak_rss_mib_denvd"), 255.9),
  ],
  ["a frozen fork ≤ 1.1× a real-clock fork", () => atMost(ratioIv("fork_frozen_vs_real"), 1.1)],
  ["busy CPU per fork ≤ 1.1× the floor's", () => atMost(ratioIv("fork_cpu_vs_floor"), 1.1)],
  // Issue 42's targets where denv trailed the engine it drives.
  [
    "image sandboxes created ≥ 0.8× docker run's rate (concurrency 10)",
    () => atLeast(ratioIv("create_throughput_vs_docker_run"), 0.8),
  ],
  [
    "image sandboxes created ≥ 0.8× docker run's rate (concurrency 50)",
    () => atLeast(ratioIv("create_throughput_vs_docker_run_50"), 0.8),
  ],
  ["files put ≥ 1.0× docker cp", () => atLeast(ratioIv("files_put_vs_docker_cp"), 1)],
  ["deploy to healthy ≤ 0.7× docker-compose up", () => atMost(ratioIv("deploy_vs_docker_compose"), 0.7)],
  ["exec p99 ≤ 300 ms at 100 callers", () => atMost(iv("exec_load_p99_ms_100"), 300)],
  ["an episode's diff (ops-world + 1 GiB, 100 files changed) ≤ 1 s", () => atMost(iv("diff_p50_ms"), 1000)],
  [
    "an episode's diff ≥ 10× faster than rsync -rcn (page cache hot)",
    () => atLeast(ratioIv("rsync_vs_diff"), 10),
  ],
  [
    "an episode's diff ≥ 10× faster than rsync -rcn (page cache dropped)",
    () => atLeast(ratioIv("rsync_vs_diff_cold"), 10),
  ],
  ["E2B-surface exec ≤ 1.5× /v1 exec", () => atMost(ratioIv("e2b_exec_vs_v1_exec"), 1.5)],
  [
    "ingress adds ≤ 2 ms p50 to a request",
    () =>
      atMost(
        [
          iv("ingress_https_p50_ms")[0] - iv("ingress_direct_p50_ms")[1],
          iv("ingress_https_p50_ms")[1] - iv("ingress_direct_p50_ms")[0],
        ],
        2,
      ),
  ],
  [
    "replication ≥ 0.8× the direct btrfs send | receive pipe",
    () => atLeast(ratioIv("replication_vs_direct_pipe"), 0.8),
  ],
  ...(quick
    ? []
    : ([
        [
          "32 forks over three hosts ≤ 0.45× the one-host time",
          () => atMost(ratioIv("forks_three_hosts_vs_one"), 0.45),
        ],
      ] as [string, () => boolean][])),
];
const goals: [string, boolean | null][] = goalChecks.map(([goal, check]) => {
  unmeasured = false;
  const met = check();
  return [goal, unmeasured ? null : met];
});

const durationS = Math.round((Date.now() - started) / 1000);
const out = process.stdout;
out.write(
  `\ndenv benchmark (${quick ? "quick: fewer samples, see n" : "full"}), ${durationS} s, commit ${sha?.slice(0, 12) ?? "unknown"}${dirty ? " (with local changes)" : ""}\n\n`,
);
const fmt = (x: number | undefined) => (x === undefined ? "" : String(x));
out.write(
  `${"metric".padEnd(36)}${"median".padStart(10)}${"p5–p95".padStart(22)}${"95% interval".padStart(22)}${"n".padStart(5)}  unit\n`,
);
for (const [name, x] of Object.entries(metrics)) {
  const spread = x.p5 !== undefined ? `${fmt(x.p5)}–${fmt(x.p95)}` : "";
  const ci = x.ci ? `${x.ci[0]}–${x.ci[1]}` : "";
  out.write(
    `${name.padEnd(36)}${String(x.value).padStart(10)}${spread.padStart(22)}${ci.padStart(22)}${String(x.samples?.length ?? 1).padStart(5)}  ${x.unit}\n`,
  );
}
out.write(
  `\n${"ratio".padEnd(36)}${"x".padStart(10)}${"interval".padStart(22)}${"rounds' median".padStart(16)}${"unpaired".padStart(16)}\n`,
);
for (const [name, x] of Object.entries(ratios)) {
  const unpaired = x.unpaired_interval ? `${x.unpaired_interval[0]}–${x.unpaired_interval[1]}` : "";
  out.write(
    `${name.padEnd(36)}${String(x.value).padStart(10)}${`${x.interval[0]}–${x.interval[1]}`.padStart(22)}${fmt(x.round_median).padStart(16)}${unpaired.padStart(16)}\n`,
  );
}
out.write("\ngoals (met only when the whole interval clears the goal)\n");
for (const [goal, met] of goals)
  out.write(`  ${met === null ? "not run" : met ? "met    " : "not met"}  ${goal}\n`);
const result = {
  commit: sha,
  dirty,
  machine: machine(),
  duration_s: durationS,
  metrics,
  ratios,
  goals: Object.fromEntries(goals),
};
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
