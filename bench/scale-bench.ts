/**
 * Rollouts at scale, each figure beside its peer in the same run:
 *   pool acquisition (POST /v1/sandboxes {from_version} served by a warm pool of ops-world forks)
 *     vs a cold fork of the same version;
 *   fan-out of 32 ops-world forks served by a pool of 32 vs 32 `docker-compose up` of copies of
 *     the same data (8 at a time), and the CPU a cold fork costs this host;
 *   create throughput: 100 single-container sandboxes from an image at concurrency 10 and 50
 *     vs `docker run` (create + start, no network) of the same image at the same concurrency;
 *   where a sandbox create's time goes (each phase's p50, from the deployments' own records);
 *   the most live sandboxes the host holds (created at concurrency 10 until a create is refused
 *     or the search's cap);
 *   exec throughput and p99 at 20 and 100 concurrent callers, with the server and denvd in their
 *     own processes as in production, vs Engine API exec against the same containers.
 */
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import Docker from "dockerode";
import { composeDown, composeUp, engineExec, type Metric } from "./api-bench.ts";
import { type BenchRig, busyCpuS, log, ms, openBenchRig } from "./bench-rig.ts";
import { metricOf, shuffled } from "./bench-stats.ts";
import { openTransferRig } from "./transfer-rig.ts";

const root = join(import.meta.dirname, "..");
const docker = new Docker();
const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
const sandboxBody = (name: string) => ({ image: OPSBOX, cmd: ["sleep", "infinity"], user: "1000", name });

/** Runs `count` jobs with at most `width` at once; how long all took. */
async function atConcurrency(
  count: number,
  width: number,
  job: (i: number) => Promise<void>,
): Promise<number> {
  let next = 0;
  const t = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(width, count) }, async () => {
      for (let i = next++; i < count; i = next++) await job(i);
    }),
  );
  return performance.now() - t;
}

/**
 * Calls per second and latencies of `call` from `callers` loops for `durationMs`, with the calls
 * that ended in each whole second as that second's sample of the rate (its spread over the run).
 */
async function load(callers: number, durationMs: number, call: (i: number) => Promise<void>) {
  const latencies: number[] = [];
  const endedAt: number[] = [];
  const t = performance.now();
  const deadline = t + durationMs;
  await Promise.all(
    Array.from({ length: callers }, async (_c, c) => {
      for (let i = c; performance.now() < deadline; i += callers) {
        const s = performance.now();
        await call(i);
        latencies.push(performance.now() - s);
        endedAt.push(performance.now() - t);
      }
    }),
  );
  const elapsed = performance.now() - t;
  const perSecond = Array.from({ length: Math.floor(durationMs / 1000) }, () => 0);
  for (const at of endedAt) {
    const second = Math.floor(at / 1000);
    if (second < perSecond.length) perSecond[second] = (perSecond[second] ?? 0) + 1;
  }
  return { perS: Math.round((latencies.length / elapsed) * 1000 * 10) / 10, latencies, perSecond };
}

/** An Engine API exec of echo, checked: a failed one fails the run rather than counting as fast. */
async function engineExecEcho(id: string): Promise<void> {
  const r = await engineExec(docker.getContainer(id), ["echo", "hi"]);
  if (r.exitCode !== 0 || r.stdout !== "hi\n") throw new Error(`Engine API exec: ${JSON.stringify(r)}`);
}

/** Every sandbox answers an exec of `echo <its id>`: a create that did not give a live one fails the run. */
async function checkExec(rig: BenchRig, ids: string[], service?: string): Promise<void> {
  await atConcurrency(ids.length, 8, async (i) => {
    const id = ids[i] as string;
    const r = await rig.api("POST", `/v1/envs/${id}/exec`, {
      ...(service ? { service } : {}),
      command: ["echo", id],
    });
    if (r.exit_code !== 0 || r.stdout !== `${id}\n`)
      throw new Error(`sandbox ${id} exec: ${JSON.stringify(r)}`);
  });
}

async function destroyAll(rig: BenchRig, ids: string[]): Promise<void> {
  await atConcurrency(ids.length, 8, async (i) => {
    await rig.api("DELETE", `/v1/envs/${ids[i]}`);
  });
}

export async function scaleBench(quick: boolean): Promise<Record<string, Metric>> {
  const rig = await openBenchRig("scale", { serverOptions: { pools: { intervalMs: 200 } } });
  const { api } = rig;
  const results: Record<string, Metric> = {};
  try {
    // --- pool acquisition vs a cold fork ---
    const compose = readFileSync(join(root, "examples/ops-world/docker-compose.yaml"), "utf8");
    await api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
    await api("PUT", "/v1/projects/ops-world/source", { compose });
    const base = await api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
    const version = base.version_id as string;
    // The cold forks first, then the pool's acquisitions: a pool refills behind each acquisition,
    // and a refill running beside a cold fork would slow it. One untimed warm-up of each.
    const samples = quick ? 5 : 20;
    const cold: number[] = [];
    const made: string[] = [];
    for (let i = 0; i <= samples; i++) {
      const t = performance.now();
      made.push((await api("POST", "/v1/sandboxes", { from_version: version, name: `cold-${i}` })).id);
      if (i > 0) cold.push(performance.now() - t);
    }
    await checkExec(rig, made, "opsbox");
    await destroyAll(rig, made.splice(0));
    await api("PUT", `/v1/pools/${version}`, { size: 4 });
    const ready = async () => {
      for (;;) {
        const p = await api("GET", `/v1/pools/${version}`);
        if (p.ready === p.size) return;
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    const warm: number[] = [];
    for (let i = 0; i <= samples; i++) {
      await ready();
      const t = performance.now();
      made.push((await api("POST", "/v1/sandboxes", { from_version: version, name: `warm-${i}` })).id);
      if (i > 0) warm.push(performance.now() - t);
    }
    const pool = await api("GET", `/v1/pools/${version}`);
    await api("DELETE", `/v1/pools/${version}`);
    await checkExec(rig, made, "opsbox");
    await destroyAll(rig, made.splice(0));
    await fanOutFromPool(rig, version, compose, quick, results);
    results.pool_acquire_p50_ms = metricOf(
      warm,
      "ms",
      `POST /v1/sandboxes {from_version} of ops-world, served by a warm pool of 4 (${pool.hits} hits, ${pool.misses} misses; each answered an exec)`,
    );
    results.pool_acquire_p95_ms = { value: ms(warm, 0.95), unit: "ms" };
    results.pool_acquire_peer_p50_ms = metricOf(
      cold,
      "ms",
      "the same create with no pool: a cold fork (clone, start, health, egress probe)",
      0,
    );
    log(`  pool acquisition p50 ${ms(warm)} ms; cold fork p50 ${ms(cold)} ms`);

    await createThroughput(rig, quick, results);

    // --- the most live sandboxes, and exec under load across them ---
    const cap = quick ? 40 : 250;
    const live: string[] = [];
    let stoppedBy = `the search's cap (${cap})`;
    await atConcurrency(cap, 10, async (i) => {
      if (stoppedBy !== `the search's cap (${cap})`) return;
      const r = await rig.raw("POST", "/v1/sandboxes", sandboxBody(`live-${i}`));
      if (r.status !== 201) {
        stoppedBy = `${r.data.error?.code}: ${r.data.error?.message}`;
        return;
      }
      live.push(r.data.id as string);
    });
    // Measured, not read back: the sandboxes held at once that each answer an exec, all of them
    // live at the same moment (none is destroyed before every one was asked).
    let answering = 0;
    await atConcurrency(live.length, 10, async (i) => {
      const r = await rig.raw("POST", `/v1/envs/${live[i]}/exec`, { command: ["echo", "hi"] });
      if (r.status === 200 && r.data.exit_code === 0 && r.data.stdout === "hi\n") answering++;
    });
    const running = answering;
    results.max_live_sandboxes = {
      value: running,
      unit: "sandboxes",
      note: `image sandboxes live at once that each answered an exec of echo (${live.length} made at concurrency 10; the search stopped at ${stoppedBy})`,
    };
    log(`  live sandboxes: ${running} (stopped at ${stoppedBy})`);
    await destroyAll(rig, live);
  } finally {
    await rig.close();
  }
  await execUnderLoad(quick, results);
  return results;
}

/** Create throughput alone (`--only creates`): the scale part's creates at concurrency 10 and 50, in a rig of its own. */
export async function createsBench(quick: boolean): Promise<Record<string, Metric>> {
  const rig = await openBenchRig("creates");
  const results: Record<string, Metric> = {};
  try {
    await createThroughput(rig, quick, results);
  } finally {
    await rig.close();
  }
  return results;
}

/** Image sandboxes vs docker run, at concurrency 10 and 50, the two taking turns to go first each round. */
async function createThroughput(
  rig: BenchRig,
  quick: boolean,
  results: Record<string, Metric>,
): Promise<void> {
  const { api } = rig;
  const count = quick ? 30 : 100;
  // Five rounds a width, three until 2026-12-05: more rounds for each median to rest on (a median's
  // bootstrap interval over five still reaches the extremes; bench/README.md).
  const tpRounds = quick ? 2 : 5;
  for (const width of [10, 50]) {
    const denvRates: number[] = [];
    const peerRates: number[] = [];
    const denvRound = async (round: number) => {
      const ids: string[] = [];
      const elapsed = await atConcurrency(count, width, async (i) => {
        ids.push((await api("POST", "/v1/sandboxes", sandboxBody(`tp${width}-${round}-${i}`))).id);
      });
      await checkExec(rig, ids);
      if (width === 10 && round === 0) await phaseBreakdown(rig, ids, results);
      await destroyAll(rig, ids);
      denvRates.push((count / elapsed) * 1000);
    };
    const peerRound = async () => {
      const containers: Docker.Container[] = [];
      const elapsed = await atConcurrency(count, width, async () => {
        const c = await docker.createContainer({
          Image: OPSBOX,
          Cmd: ["sleep", "infinity"],
          User: "1000",
          Labels: rig.labels,
          HostConfig: { NetworkMode: "none" },
        });
        await c.start();
        containers.push(c);
      });
      for (const c of containers) await engineExecEcho(c.id);
      await Promise.all(containers.map((c) => c.remove({ force: true })));
      peerRates.push((count / elapsed) * 1000);
    };
    // Who goes first alternates round by round: a paired ratio wants the order balanced, and a
    // shuffle of two left the peer first in all five rounds at concurrency 10 on 2026-12-05.
    for (let round = 0; round < tpRounds; round++)
      for (const run of round % 2 ? [peerRound, denvRound] : [denvRound, peerRound]) await run(round);
    const suffix = width === 10 ? "" : `_${width}`;
    results[`create_throughput_per_s${suffix}`] = metricOf(
      denvRates,
      "sandboxes/s",
      `${count} image sandboxes (egress denied, no ports) at concurrency ${width}, ${tpRounds} rounds; each answered an exec`,
      2,
    );
    results[`create_throughput_peer_per_s${suffix}`] = metricOf(
      peerRates,
      "containers/s",
      `docker run -d --network none (create + start) of the same image at concurrency ${width}, ${tpRounds} rounds`,
      2,
    );
    log(`  ${count} creates at ${width}: ${ms(denvRates)}/s; docker run ${ms(peerRates)}/s`);
  }
}

/**
 * Exec under load as it runs in production: `denv server` and `denvd run` each in its own process
 * (transfer-rig.ts), the callers in this one; `echo` round-robin over N sandboxes at 20 and 100
 * concurrent callers, beside Engine API exec against the same containers at the same concurrency.
 */
export async function execUnderLoad(
  quick: boolean,
  results: Record<string, Metric> = {},
): Promise<Record<string, Metric>> {
  const rig = await openTransferRig();
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${rig.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${rig.key}`,
        ...(body ? { "content-type": "application/json" } : {}),
      },
      body: body ? JSON.stringify(body) : undefined,
    });
    const data = (await res.json()) as Record<string, any>;
    if (!res.ok) throw new Error(`${method} ${path}: ${JSON.stringify(data)}`);
    return data;
  };
  const sandboxes: string[] = [rig.sandboxId];
  try {
    const n = quick ? 20 : 100;
    await atConcurrency(n - 1, 10, async (i) => {
      sandboxes.push((await api("POST", "/v1/sandboxes", sandboxBody(`load-${i}`))).id);
    });
    const listed = await promisify(execFile)("docker", [
      "ps",
      "-q",
      "--filter",
      `label=dev.denv.test=${rig.runId}`,
    ]);
    const containerIds = listed.stdout.trim().split("\n");
    const loadMs = quick ? 4000 : 10_000;
    for (const callers of [20, 100]) {
      const denv = await load(callers, loadMs, async (i) => {
        const r = await api("POST", `/v1/envs/${sandboxes[i % sandboxes.length]}/exec`, {
          command: ["echo", "hi"],
        });
        if (r.exit_code !== 0 || r.stdout !== "hi\n") throw new Error(`exec: ${JSON.stringify(r)}`);
      });
      const peer = await load(callers, loadMs, async (i) => {
        await engineExecEcho(containerIds[i % containerIds.length] as string);
      });
      const suffix = callers === 20 ? "" : `_${callers}`;
      // The rate's samples are its whole seconds; the headline value is calls over the whole run.
      results[`exec_per_s${suffix}`] = {
        ...metricOf(
          denv.perSecond,
          "exec/s",
          `${callers} callers round-robin over ${sandboxes.length} sandboxes for ${loadMs / 1000} s (POST /v1/envs/{id}/exec of echo, each checked; denv server and denvd run each in its own process); samples: the execs ended in each second`,
        ),
        value: denv.perS,
      };
      results[`exec_load_p99_ms${suffix}`] = {
        value: ms(denv.latencies, 0.99),
        unit: "ms",
        note: `over ${denv.latencies.length} execs (p50 ${ms(denv.latencies)} ms)`,
      };
      results[`exec_peer_per_s${suffix}`] = {
        ...metricOf(
          peer.perSecond,
          "exec/s",
          `Engine API exec (create + start) of echo, each checked, ${callers} callers over the same ${containerIds.length} containers; samples: per second`,
        ),
        value: peer.perS,
      };
      results[`exec_peer_load_p99_ms${suffix}`] = {
        value: ms(peer.latencies, 0.99),
        unit: "ms",
        note: `over ${peer.latencies.length} execs (p50 ${ms(peer.latencies)} ms)`,
      };
      log(
        `  exec at ${callers} callers: ${denv.perS}/s p99 ${ms(denv.latencies, 0.99)} ms; Engine API ${peer.perS}/s p99 ${ms(peer.latencies, 0.99)} ms`,
      );
    }
  } finally {
    await atConcurrency(sandboxes.length - 1, 8, async (i) => {
      await api("DELETE", `/v1/envs/${sandboxes[i + 1]}`).catch(() => {});
    });
    await rig.close();
  }
  return results;
}

/**
 * N forks of ops-world in one call, served by a pool of N made beforehand, beside the peer: N
 * `docker-compose up` of copies of the same data (cp -a of the stopped stack's volumes), 8 at a
 * time. And what a cold fork costs: the host's busy CPU seconds over N cold forks, per fork.
 * Rounds, the three in a shuffled order each round; every fork made must answer an exec.
 */
async function fanOutFromPool(
  rig: BenchRig,
  version: string,
  compose: string,
  quick: boolean,
  results: Record<string, Metric>,
): Promise<void> {
  const { api } = rig;
  const n = quick ? 8 : 32;
  const rounds = quick ? 2 : 3;
  const pooledMs: number[] = [];
  const fillMs: number[] = [];
  const coldMs: number[] = [];
  const cpuPerFork: number[] = [];
  const peerMs: number[] = [];
  /** The forks of one fan-out, all made, each answering an exec; then destroyed. */
  const madeAndRemoved = async (fan: Record<string, any>) => {
    const ids = (fan.forks as { ok: boolean; environment?: { id: string } }[])
      .filter((f) => f.ok)
      .map((f) => f.environment?.id as string);
    try {
      if (fan.created !== n || ids.length !== n)
        throw new Error(`fan-out made ${fan.created} of ${n}: ${JSON.stringify(fan.forks).slice(0, 400)}`);
      await checkExec(rig, ids, "opsbox");
    } finally {
      await destroyAll(rig, ids);
    }
  };

  const pooled = async (round: number) => {
    await api("PUT", `/v1/pools/${version}`, { size: n });
    const filling = performance.now();
    for (;;) {
      const p = await api("GET", `/v1/pools/${version}`);
      if (p.ready === n) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    fillMs.push(performance.now() - filling);
    const t = performance.now();
    const fan = await api("POST", `/v1/versions/${version}/forks`, {
      count: n,
      name_prefix: `pooled${round}`,
    });
    pooledMs.push(performance.now() - t);
    await api("DELETE", `/v1/pools/${version}`);
    await madeAndRemoved(fan);
  };

  // What a cold fork costs the host: busy CPU over N cold forks, 8 at a time (fan-out, no pool).
  const cold = async (round: number) => {
    const cpu0 = busyCpuS();
    const t = performance.now();
    const fan = await api("POST", `/v1/versions/${version}/forks`, { count: n, name_prefix: `cold${round}` });
    coldMs.push(performance.now() - t);
    cpuPerFork.push((busyCpuS() - cpu0) / n);
    await madeAndRemoved(fan);
  };

  // The peer: copies of the same data, each brought up by docker-compose, 8 at a time.
  const envs = (await api("GET", "/v1/envs")).environments as { id: string; name: string }[];
  const alpha = envs.find((e) => e.name === "alpha") as { id: string };
  const row = await rig.server.store
    .selectFrom("environments")
    .select("stack_id")
    .where("id", "=", alpha.id)
    .executeTakeFirstOrThrow();
  const stack = rig.denvd.stack(row.stack_id as string);
  let peerError = "";
  const peer = async (round: number) => {
    // The data at rest: the stack stopped (postgres shut down cleanly), as a copy would be taken.
    for (const id of Object.values(stack.containers))
      await docker
        .getContainer(id)
        .stop()
        .catch(() => {});
    const peerRoot = join(rig.stateDir, "fan-peer");
    const copies = Array.from({ length: n }, (_, i) => ({
      dir: join(peerRoot, String(i)),
      project: `${rig.runId}f${round}x${i}`.replace(/[^a-z0-9]/g, ""),
    }));
    const t = performance.now();
    await atConcurrency(n, 8, async (i) => {
      const c = copies[i] as (typeof copies)[number];
      const dirs: Record<string, string> = {};
      for (const [vol, ds] of Object.entries(stack.datasets)) {
        const to = join(c.dir, "data", vol);
        mkdirSync(join(c.dir, "data"), { recursive: true });
        await promisify(execFile)("cp", ["-a", rig.storage.datasetPath(ds), to]);
        dirs[vol] = to;
      }
      // Each copy on a subnet of its own (198.18.0.0/15, the benchmarking range): past about 31
      // projects the engine's default address pools are spent.
      await composeUp(compose, c.dir, c.project, rig.labels, dirs, {
        keep: true,
        subnet: `198.18.${i}.0/24`,
      });
    })
      .then(() => peerMs.push(performance.now() - t))
      // The peer failing is a finding, not the end of the run.
      .catch((err: Error) => {
        peerError = err.message.split("\n").slice(-2).join(" ").slice(0, 300);
      })
      // Whatever happened, every copy is taken down and the stack started again.
      .finally(async () => {
        for (const c of copies) composeDown(c.dir, c.project);
        rmSync(peerRoot, { recursive: true, force: true });
        for (const id of Object.values(stack.containers))
          await docker
            .getContainer(id)
            .start()
            .catch(() => {});
      });
  };

  for (let round = 0; round < rounds; round++)
    for (const run of shuffled([pooled, cold, peer], 9000 + round)) await run(round);

  results[`fanout_${n}_pooled_ms`] = metricOf(
    pooledMs,
    "ms",
    `${n} ops-world forks in one POST /v1/versions/{id}/forks, served by a warm pool of ${n}, ${rounds} rounds; filling the pool took ${ms(fillMs)} ms (median)`,
    0,
  );
  results.fanout_cold_ms = metricOf(coldMs, "ms", `${n} cold ops-world forks in one fan-out, no pool`, 0);
  results.fork_cpu_s = metricOf(
    cpuPerFork,
    "cpu-s",
    `busy CPU of the whole host per cold ops-world fork, over ${n} cold forks in one fan-out`,
    2,
  );
  results[`fanout_${n}_peer_ms`] = peerMs.length
    ? metricOf(
        peerMs,
        "ms",
        `${n} docker-compose up of copies of the same data (cp -a of each volume, then up until the same healthchecks pass), 8 at a time, ${peerMs.length} rounds${peerError ? `; a round failed: ${peerError}` : ""}`,
        0,
      )
    : { value: Number.NaN, unit: "ms", note: `every round of the peer failed: ${peerError}` };
  log(
    `  fan-out of ${n}: from a pool ${ms(pooledMs)} ms (filling it ${ms(fillMs)} ms); cold ${ms(coldMs)} ms at ${ms(cpuPerFork)} cpu-s a fork; docker-compose up of copies ${ms(peerMs)} ms`,
  );
}

/** Where an image sandbox's create goes: each phase's p50 over the sandboxes made. */
async function phaseBreakdown(rig: BenchRig, ids: string[], results: Record<string, Metric>): Promise<void> {
  const byPhase = new Map<string, number[]>();
  for (const id of ids) {
    const { deployments } = await rig.api("GET", `/v1/envs/${id}/deployments`);
    for (const p of deployments[0].phases as { name: string; status: string; duration_ms: number | null }[])
      if (p.status === "succeeded" && p.duration_ms !== null)
        byPhase.set(p.name, [...(byPhase.get(p.name) ?? []), p.duration_ms]);
  }
  for (const [name, xs] of byPhase)
    results[`create_phase_${name}_p50_ms`] = {
      value: ms(xs),
      unit: "ms",
      note: `the ${name} phase of an image sandbox's create, at concurrency 10 (its p95 ${ms(xs, 0.95)} ms)`,
    };
}
