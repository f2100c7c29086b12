/**
 * Fork-to-healthy of ops-world as a user waits for it, side by side in one run, every sample's
 * result checked:
 *   - denv through the API (`POST /v1/envs/{id}/fork`, the seed's `denv fork`, timed by this
 *     client's clock until the 201 of a running fork), with 10 MiB and with 1 GiB of extra data in
 *     the db volume; and the same 1 GiB fork through the `denv` CLI (a process started per fork,
 *     as a user's shell does);
 *   - the floor: every step a fork physically does, with the cheapest engine calls — the volumes
 *     cloned (btrfs snapshots), the network and volumes created, the containers created and started
 *     in depends_on order, the same healthchecks polled;
 *   - two peers a good engineer would pick, each `docker-compose up` of the same stack to the same
 *     health: on a `cp -a` copy of the volumes (another filesystem's way), and on a reflink copy
 *     (`cp --reflink=always` on the same btrfs, the copy-on-write way). `docker compose` v2 is not
 *     the peer: Debian 12 ships docker-compose 1.29 only, and neither Debian's mirror nor the npm
 *     registry carries the v2 plugin, the only sources these machines have;
 *   - denv on the dir driver (copies), through the API;
 * then the snapshot's frozen window measured from outside: a writer in the agent's service
 * acknowledges each committed row, and the window is the largest gap between acknowledgements
 * around each snapshot, with the writer shown running before and after it.
 * One untimed warm-up of each contestant, then rounds in a shuffled order.
 */
import { execFile, spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import type { BtrfsDriver } from "@denv/denvd";
import { Denv } from "@denv/sdk";
import Docker from "dockerode";
import { parse } from "yaml";
import { composeDown, composeUp, engineExec } from "./api-bench.ts";
import { type BenchRig, busyCpuS, log, openBenchRig } from "./bench-rig.ts";
import { type Metric, metricOf, shuffled } from "./bench-stats.ts";

const MiB = 1024 ** 2;
const root = join(import.meta.dirname, "..");
const docker = new Docker();
const COMPOSE = readFileSync(join(root, "examples/ops-world/docker-compose.yaml"), "utf8");
const DENV_CLI = join(root, "packages/cli/bin/denv.js");
const run = promisify(execFile);

/** The ops-world project, its compose file uploaded. */
async function createOpsWorld(rig: BenchRig): Promise<void> {
  await rig.api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
  await rig.api("PUT", "/v1/projects/ops-world/source", { compose: COMPOSE });
}

/** The answers every ops-world fork must give: the seeded orders and the ballast's size. */
interface Expected {
  orders: string;
  ballastBytes: number;
}

/** Deploys ops-world as `env`, adds `ballastBytes` to its db volume, snapshots: a version to fork. */
async function prepare(rig: BenchRig, env: string, ballastBytes: number): Promise<Expected> {
  const d = await rig.api("POST", "/v1/projects/ops-world/deploy?wait=true", { env });
  if (d.status !== "succeeded") throw new Error(`deploy of ${env}: ${d.status} ${d.reason}`);
  const id = encodeURIComponent(`ops-world/${env}`);
  const fill = await rig.api("POST", `/v1/envs/${id}/exec`, {
    service: "db",
    user: "postgres",
    command: `head -c ${ballastBytes} /dev/urandom > /var/lib/postgresql/data/ballast && sync`,
    timeout_ms: 600_000,
  });
  if (fill.exit_code !== 0) throw new Error(`ballast: ${fill.stderr}`);
  const s = await rig.api("POST", `/v1/envs/${id}/snapshot`, {});
  if (s.status !== "succeeded") throw new Error(`snapshot of ${env}: ${s.status} ${s.reason}`);
  const orders = await rig.api("POST", `/v1/envs/${id}/exec`, {
    command: ["psql", "-tAc", "select count(*) from orders"],
  });
  return { orders: orders.stdout, ballastBytes };
}

/** A fork's answers checked through the API: running, the orders there, the ballast whole. */
async function checkFork(rig: BenchRig, envId: string, expected: Expected): Promise<void> {
  const e = await rig.api("GET", `/v1/envs/${envId}`);
  if (e.status !== "running") throw new Error(`fork ${envId} is ${e.status}`);
  const r = await rig.api("POST", `/v1/envs/${envId}/exec`, {
    command: ["psql", "-tAc", "select count(*) from orders"],
  });
  if (r.exit_code !== 0 || r.stdout !== expected.orders)
    throw new Error(
      `fork ${envId}: orders ${JSON.stringify(r.stdout)} (${r.stderr}), expected ${expected.orders}`,
    );
  const b = await rig.api("POST", `/v1/envs/${envId}/exec`, {
    service: "db",
    user: "postgres",
    command: ["stat", "-c", "%s", "/var/lib/postgresql/data/ballast"],
  });
  if (Number(b.stdout) !== expected.ballastBytes) throw new Error(`fork ${envId}: ballast ${b.stdout}`);
}

/** One fork through the API, timed from the request to the 201, then checked and removed. */
async function apiFork(rig: BenchRig, env: string, name: string, expected: Expected): Promise<number> {
  const t = performance.now();
  const f = await rig.api("POST", `/v1/envs/${encodeURIComponent(`ops-world/${env}`)}/fork`, { name });
  const elapsed = performance.now() - t;
  await checkFork(rig, f.id, expected);
  await rig.api("DELETE", `/v1/envs/${f.id}`);
  return elapsed;
}

/** One fork through the `denv` CLI, as a shell runs it: a process started, timed to its exit. */
async function cliFork(rig: BenchRig, env: string, name: string, expected: Expected): Promise<number> {
  const t = performance.now();
  const r = await run(process.execPath, [DENV_CLI, "fork", `ops-world/${env}`, "--name", name, "--json"], {
    env: {
      ...process.env,
      DENV_SERVER: rig.server.url,
      DENV_API_KEY: rig.key,
      DENV_CONFIG: "/nonexistent/denv-config.json",
    },
    encoding: "utf8",
  });
  const elapsed = performance.now() - t;
  const id = (JSON.parse(r.stdout) as { id: string }).id;
  await checkFork(rig, id, expected);
  await rig.api("DELETE", `/v1/envs/${id}`);
  return elapsed;
}

/** The ops-world services' healthchecks, polled through the Engine API's exec until they pass. */
async function pollHealthy(containers: Record<string, Docker.Container>): Promise<void> {
  const compose = parse(COMPOSE) as { services: Record<string, { healthcheck?: { test: string[] } }> };
  await Promise.all(
    Object.entries(compose.services).map(async ([name, svc]) => {
      if (!svc.healthcheck) return;
      const [kind, ...rest] = svc.healthcheck.test;
      const cmd = kind === "CMD-SHELL" ? ["sh", "-c", rest[0] as string] : rest;
      for (const deadline = Date.now() + 60_000; ; ) {
        if (Date.now() > deadline) throw new Error(`${name} never healthy`);
        const exec = await (containers[name] as Docker.Container).exec({
          Cmd: cmd,
          AttachStdout: true,
          AttachStderr: true,
        });
        const stream = await exec.start({ hijack: true, stdin: false });
        stream.resume();
        await new Promise((r) => stream.on("end", r).on("close", r));
        if ((await exec.inspect()).ExitCode === 0) return;
        await new Promise((r) => setTimeout(r, 50));
      }
    }),
  );
}

/** A count of orders through the Engine API, as a sample's check. */
async function engineOrders(c: Docker.Container): Promise<string> {
  const r = await engineExec(c, ["psql", "-tAc", "select count(*) from orders"]);
  if (r.exitCode !== 0) throw new Error(`psql: ${r.stderr}`);
  return r.stdout;
}

/**
 * The floor: the steps a fork must do, each with the cheapest engine call — clone every volume
 * (a btrfs snapshot), create the network (internal, no host address, as a deny fork's) and the
 * volumes, create and start the containers in depends_on order, poll the same health.
 */
async function floorFork(
  rig: BenchRig,
  snapshots: Record<string, string>,
  tag: string,
  expected: Expected,
): Promise<number> {
  const btrfs = rig.storage as BtrfsDriver;
  const spec = parse(COMPOSE) as {
    services: Record<
      string,
      {
        image: string;
        command?: string[];
        user?: string;
        environment?: Record<string, string>;
        volumes?: string[];
        depends_on?: string[];
      }
    >;
  };
  const t = performance.now();
  const datasets = await Promise.all(
    Object.entries(snapshots).map(async ([vol, snap]) => {
      const ds = `${tag}-${vol}`;
      await btrfs.clone(snap, ds);
      return [vol, ds] as const;
    }),
  );
  const [net] = await Promise.all([
    docker.createNetwork({
      Name: tag,
      Internal: true,
      Labels: rig.labels,
      Options: { "com.docker.network.bridge.inhibit_ipv4": "true" },
    }),
    ...datasets.map(([, ds]) =>
      docker.createVolume({
        Name: ds,
        Driver: "local",
        DriverOpts: { type: "none", o: "bind", device: btrfs.datasetPath(ds) },
        Labels: rig.labels,
      }),
    ),
  ]);
  const containers: Record<string, Docker.Container> = {};
  const startOne = async (name: string) => {
    const svc = spec.services[name] as (typeof spec.services)[string];
    const c = await docker.createContainer({
      name: `${tag}-${name}`,
      Image: svc.image,
      ...(svc.command ? { Cmd: svc.command } : {}),
      Env: Object.entries(svc.environment ?? {}).map(([k, v]) => `${k}=${v}`),
      ...(svc.user ? { User: svc.user } : {}),
      Labels: rig.labels,
      HostConfig: {
        NetworkMode: tag,
        Binds: (svc.volumes ?? []).map((v) => {
          const [vol, target] = v.split(":");
          return `${tag}-${vol}:${target}`;
        }),
      },
      NetworkingConfig: { EndpointsConfig: { [tag]: { Aliases: [name] } } },
    });
    await c.start();
    containers[name] = c;
  };
  // depends_on order: those that depend on nothing first, together; then the rest.
  const names = Object.keys(spec.services);
  const first = names.filter((n) => !spec.services[n]?.depends_on?.length);
  await Promise.all(first.map(startOne));
  await Promise.all(names.filter((n) => !first.includes(n)).map(startOne));
  await pollHealthy(containers);
  const elapsed = performance.now() - t;
  const orders = await engineOrders(containers.opsbox as Docker.Container);
  if (orders !== expected.orders) throw new Error(`floor: orders ${JSON.stringify(orders)}`);
  await Promise.all(Object.values(containers).map((c) => c.remove({ force: true })));
  for (const [, ds] of datasets) {
    await docker.getVolume(ds).remove();
    await btrfs.destroyDataset(ds);
  }
  await net.remove();
  return elapsed;
}

/** A peer: the volumes copied (`cp -a`, or a reflink copy on the same btrfs), then docker-compose up to health. */
async function peerFork(
  rig: BenchRig,
  snapshotDirs: Record<string, string>,
  tag: string,
  how: "cp" | "reflink",
  expected: Expected,
): Promise<number> {
  // The reflink copy must land on the same btrfs; `cp -a` lands on the state disk, as a user's would.
  const dir =
    how === "reflink"
      ? join((rig.storage as BtrfsDriver).poolPath, "peer", tag)
      : join(rig.stateDir, "peer", tag);
  mkdirSync(dir, { recursive: true });
  const project = tag.replace(/[^a-z0-9]/g, "");
  const t = performance.now();
  await Promise.all(
    Object.entries(snapshotDirs).map(([v, src]) =>
      run(
        "cp",
        how === "reflink" ? ["-a", "--reflink=always", src, join(dir, v)] : ["-a", src, join(dir, v)],
      ),
    ),
  );
  const volumeDirs = Object.fromEntries(Object.keys(snapshotDirs).map((v) => [v, join(dir, v)]));
  // composeUp times only its own part; this sample runs from before the copy.
  await composeUp(COMPOSE, join(dir, "compose"), project, rig.labels, volumeDirs, { keep: true });
  const elapsed = performance.now() - t;
  const [c] = await docker.listContainers({
    filters: JSON.stringify({
      label: [`com.docker.compose.project=${project}`, "com.docker.compose.service=opsbox"],
    }),
  });
  const orders = await engineOrders(docker.getContainer(c?.Id as string));
  composeDown(join(dir, "compose"), project);
  rmSync(dir, { recursive: true, force: true });
  if (orders !== expected.orders) throw new Error(`peer ${how}: orders ${JSON.stringify(orders)}`);
  return elapsed;
}

/**
 * Snapshots taken while a writer commits rows, the frozen window seen from outside: the largest
 * gap between acknowledged commits around each snapshot. A snapshot counts only when the writer
 * acknowledged commits within the second before it began and after it ended. The writer is one
 * psql session committing one row per statement (a commit every 1–2 ms here, each acknowledged
 * by its own line): a psql started per commit, as this was measured before 2026-12-04, commits
 * every 70 ms on this machine, and that cycle hid the window inside it.
 */
async function frozenWindows(rig: BenchRig, env: string, count: number): Promise<number[]> {
  const denv = new Denv({ baseUrl: rig.server.url, apiKey: rig.key });
  const sb = await denv.environment(`ops-world/${env}`);
  await sb.commands.run(["psql", "-qc", "create table if not exists w (id serial primary key)"]);
  await sb.commands.run(["rm", "-f", "/tmp/stop"]); // an earlier call's
  const acks: number[] = [];
  let pending = "";
  const writer = sb.commands.run(
    'while [ ! -e /tmp/stop ]; do echo "insert into w default values returning id;"; done | stdbuf -oL psql -qtA -v ON_ERROR_STOP=1',
    {
      onStdout: (b) => {
        pending += Buffer.from(b).toString();
        const lines = pending.split("\n");
        pending = lines.pop() ?? "";
        const now = performance.now();
        for (const l of lines) if (l.trim()) acks.push(now);
      },
    },
  );
  const out: number[] = [];
  let failed: unknown;
  try {
    const waitAcks = async (n: number) => {
      for (const deadline = Date.now() + 30_000; acks.length < n; ) {
        if (Date.now() > deadline) throw new Error(`the writer stalled at ${acks.length} commits`);
        await new Promise((r) => setTimeout(r, 10));
      }
    };
    await waitAcks(20);
    for (let i = 0; i < count; i++) {
      const start = performance.now();
      const s = await rig.api("POST", `/v1/envs/${encodeURIComponent(`ops-world/${env}`)}/snapshot`, {});
      const end = performance.now();
      if (s.status !== "succeeded") throw new Error(`snapshot: ${s.status} ${s.reason}`);
      const after = acks.length;
      await waitAcks(after + 10); // the writer runs on after the thaw
      const before = acks.filter((t) => t < start);
      if (!before.length || (before.at(-1) as number) < start - 1000)
        throw new Error("the writer was not committing before the snapshot");
      // The gaps between consecutive acknowledgements from the last one before the snapshot to
      // the first one after it ended.
      const from = acks.indexOf(before.at(-1) as number);
      const to = acks.findIndex((t) => t > end);
      let gap = 0;
      for (let k = from + 1; k <= to; k++) gap = Math.max(gap, (acks[k] as number) - (acks[k - 1] as number));
      out.push(gap);
    }
  } catch (err) {
    failed = err;
  }
  await sb.commands.run("touch /tmp/stop");
  const w = await writer;
  if (failed) throw failed;
  if (w.exitCode !== 0) throw new Error(`the writer failed: ${w.stderr}`);
  return out;
}

export async function forkBench(quick: boolean): Promise<Record<string, Metric>> {
  const ROUNDS = quick ? 5 : 20;
  const results: Record<string, Metric> = {};
  const rig = await openBenchRig("fork");
  try {
    await createOpsWorld(rig);
    log("fork: ops-world + 10 MiB and + 1 GiB, deployed and snapshotted through the API");
    const small = await prepare(rig, "small", 10 * MiB);
    const big = await prepare(rig, "big", 1024 * MiB);
    const bigEnv = await rig.api("GET", `/v1/envs/${encodeURIComponent("ops-world/big")}`);
    const version = await rig.api("GET", `/v1/versions/${bigEnv.current_version_id}`);
    const snapshots = await snapshotIds(rig, version.id as string);
    const snapshotDirs = Object.fromEntries(
      Object.entries(snapshots).map(([v, id]) => [
        v,
        join((rig.storage as BtrfsDriver).poolPath, "snapshots", id),
      ]),
    );
    let n = 0;
    const contestants: Record<string, () => Promise<number>> = {
      fork_p50_ms_btrfs_10mib: () => apiFork(rig, "small", `s${n++}`, small),
      fork_p50_ms_btrfs_1gib: () => apiFork(rig, "big", `b${n++}`, big),
      fork_cli_p50_ms_btrfs_1gib: () => cliFork(rig, "big", `c${n++}`, big),
      fork_floor_p50_ms_1gib: () => floorFork(rig, snapshots, `${rig.runId}-floor${n++}`, big),
      fork_p50_ms_peer_1gib: () => peerFork(rig, snapshotDirs, `${rig.runId}-cp${n++}`, "cp", big),
      fork_p50_ms_peer_snapshot_1gib: () =>
        peerFork(rig, snapshotDirs, `${rig.runId}-rl${n++}`, "reflink", big),
    };
    const samples: Record<string, number[]> = Object.fromEntries(
      Object.keys(contestants).map((k) => [k, []]),
    );
    log("fork: one warm-up of each, untimed");
    for (const f of Object.values(contestants)) await f();
    // What the machine spends on a whole cycle (fork to healthy, checked, removed), less what it
    // spends idle with the two environments running, for the API's fork and the floor's.
    const idleFrom = busyCpuS();
    await new Promise((r) => setTimeout(r, 5000));
    const idleCpuPerMs = (busyCpuS() - idleFrom) / 5000;
    const cycleCpu: Record<string, number[]> = { fork_p50_ms_btrfs_1gib: [], fork_floor_p50_ms_1gib: [] };
    for (let round = 0; round < ROUNDS; round++) {
      for (const name of shuffled(Object.keys(contestants), round + 1)) {
        const cpu0 = busyCpuS();
        const t0 = performance.now();
        samples[name]?.push(await (contestants[name] as () => Promise<number>)());
        cycleCpu[name]?.push(busyCpuS() - cpu0 - idleCpuPerMs * (performance.now() - t0));
      }
      log(`fork: round ${round + 1}/${ROUNDS}`);
    }
    const notes: Record<string, string> = {
      fork_p50_ms_btrfs_10mib: "POST /v1/envs/{id}/fork to its 201 (a running, healthy fork), client clock",
      fork_p50_ms_btrfs_1gib: "POST /v1/envs/{id}/fork to its 201 (a running, healthy fork), client clock",
      fork_cli_p50_ms_btrfs_1gib: "`denv fork ENV --name N`, a process started per fork, to its exit",
      fork_floor_p50_ms_1gib:
        "btrfs clones + network + volumes + containers in depends_on order + the same health, Engine API",
      fork_p50_ms_peer_1gib: "`cp -a` of the volumes + docker-compose up (1.29) to the same health",
      fork_p50_ms_peer_snapshot_1gib:
        "`cp --reflink=always` on the same btrfs + docker-compose up (1.29) to the same health",
    };
    for (const [name, xs] of Object.entries(samples)) {
      results[name] = metricOf(xs, "ms", notes[name], 0);
      log(`${name}: median ${results[name].value} ms (p5 ${results[name].p5}, p95 ${results[name].p95})`);
    }
    const cycleNote = (what: string) =>
      `the machine's busy CPU over a whole cycle of ${what} (to healthy, the orders read, removed), less its idle rate (${Math.round(idleCpuPerMs * 1e5) / 100} cpu-s a second)`;
    results.fork_cycle_cpu_s_1gib = metricOf(
      cycleCpu.fork_p50_ms_btrfs_1gib as number[],
      "cpu-s",
      cycleNote("a fork through the API"),
      2,
    );
    results.fork_floor_cycle_cpu_s_1gib = metricOf(
      cycleCpu.fork_floor_p50_ms_1gib as number[],
      "cpu-s",
      cycleNote("the floor's steps"),
      2,
    );
    log(
      `fork: busy CPU a cycle ${results.fork_cycle_cpu_s_1gib.value} cpu-s, the floor's ${results.fork_floor_cycle_cpu_s_1gib.value}`,
    );
    const windows = await frozenWindows(rig, "big", quick ? 5 : 20);
    results.frozen_window_p50_ms = metricOf(
      windows,
      "ms",
      "the largest gap between a running writer's acknowledged commits around each snapshot",
      0,
    );
    for (const env of ["small", "big"])
      await rig.api("DELETE", `/v1/envs/${encodeURIComponent(`ops-world/${env}`)}`);
  } finally {
    await rig.close();
    spawnSync("bash", [join(root, "scripts/clean-leftovers.sh")], { stdio: "ignore" });
  }

  // The dir driver copies: the same API fork on a host whose storage is plain directories.
  const dirRig = await openBenchRig("fork-dir", { storage: "dir" });
  try {
    await createOpsWorld(dirRig);
    log("fork: the dir driver, + 1 GiB");
    const big = await prepare(dirRig, "big", 1024 * MiB);
    await apiFork(dirRig, "big", "warm", big);
    const xs: number[] = [];
    for (let i = 0; i < (quick ? 3 : 10); i++) xs.push(await apiFork(dirRig, "big", `d${i}`, big));
    results.fork_p50_ms_dir_1gib = metricOf(
      xs,
      "ms",
      "POST /v1/envs/{id}/fork on the dir driver (copies)",
      0,
    );
  } finally {
    await dirRig.close();
  }
  return results;
}

/** A version's volume → snapshot id, from the host's record (the API does not expose them). */
async function snapshotIds(rig: BenchRig, versionId: string): Promise<Record<string, string>> {
  const v = rig.denvd.versions().find((x) => x.id === versionId);
  if (!v) throw new Error(`version ${versionId} is not on the host`);
  return v.snapshots as Record<string, string>;
}
