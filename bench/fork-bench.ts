/**
 * Fork-to-healthy of ops-world, side by side in one run:
 *   - denv on btrfs, with 10 MiB and with 1 GiB of extra data in the db volume;
 *   - denv on the dir driver (copies), 1 GiB;
 *   - the peer: copy the volumes with `cp -a`, then `docker-compose up -d` the same stack (Debian's
 *     docker-compose), waiting for the same health, judged the same way (the compose healthchecks,
 *     run through the Engine API's exec until they pass);
 * and the snapshot's frozen window with a writer running. Prints p50s and ratios.
 *
 *   node bench/fork-bench.ts [--quick] [--json]
 */
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  BtrfsDriver,
  Denvd,
  DirDriver,
  DockerRuntime,
  defaultAgentBinary,
  type StorageDriver,
} from "@denv/denvd";
import type { ResolvedSpec } from "@denv/protocol";
import { pinSpec, RegistryPinner, validateCompose } from "@denv/spec";
import Docker from "dockerode";
import { parse, stringify } from "yaml";
import { deployStack } from "../test/e2e/denvd-helpers.ts";

const quick = process.argv.includes("--quick");
const json = process.argv.includes("--json");
const ITER = quick ? 3 : 7;
const MiB = 1024 ** 2;
const root = join(import.meta.dirname, "..");
const runId = `bench-${randomBytes(3).toString("hex")}`;
const base = join("/var/lib/denv-test", runId);
const labels = { "dev.denv.test": runId };
const docker = new Docker();

const log = (s: string) => process.stderr.write(`${s}\n`);
const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)] as number;

async function spec(): Promise<ResolvedSpec> {
  const text = readFileSync(join(root, "examples/ops-world/docker-compose.yaml"), "utf8");
  const r = validateCompose(text, { env: {}, projectName: "ops-world" });
  if (!r.ok) throw new Error(JSON.stringify(r.errors));
  return pinSpec(r.spec, new RegistryPinner());
}

async function openHost(storage: StorageDriver, dir: string): Promise<Denvd> {
  return Denvd.open({
    stateDir: dir,
    storage,
    runtime: new DockerRuntime(),
    extraLabels: labels,
    minFreeBytes: 256 * MiB,
    agentBinary: defaultAgentBinary(),
  });
}

/** Deploys ops-world, adds `ballastBytes` of random data to the db volume, and snapshots it. */
async function version(d: Denvd, s: ResolvedSpec, ballastBytes: number) {
  const dep = await deployStack(d, s, { name: "alpha" });
  const r = await d.exec(dep.stack.id, "db", {
    command: `head -c ${ballastBytes} /dev/urandom > /var/lib/postgresql/data/ballast && sync`,
    user: "postgres",
  });
  if (r.exitCode !== 0) throw new Error(r.stderr.toString());
  return { env: dep.stack.id, version: (await d.snapshot(dep.stack.id)).version };
}

async function denvForks(d: Denvd, versionId: string): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < ITER; i++) {
    const t = performance.now();
    const f = await d.fork(versionId, { name: `f${i}` });
    out.push(performance.now() - t);
    await d.destroy(f.stack.id);
  }
  return out;
}

/** The peer's way: copy the volumes, docker-compose up, poll the same healthchecks. */
async function peerForks(s: ResolvedSpec, snapshotDirs: Record<string, string>): Promise<number[]> {
  const compose = parse(readFileSync(join(root, "examples/ops-world/docker-compose.yaml"), "utf8"));
  delete compose["x-denv"];
  const out: number[] = [];
  for (let i = 0; i < ITER; i++) {
    const project = `${runId}-peer${i}`.replace(/[^a-z0-9]/g, "");
    const dir = join(base, "peer", String(i));
    mkdirSync(dir, { recursive: true });
    for (const svc of Object.values<Record<string, unknown>>(compose.services)) svc.labels = labels;
    compose.volumes = Object.fromEntries(
      Object.keys(snapshotDirs).map((v) => [
        v,
        { driver: "local", driver_opts: { type: "none", o: "bind", device: join(dir, v) }, labels },
      ]),
    );
    compose.networks = { default: { internal: true, labels } };
    // Quoted: docker-compose reads YAML 1.1, where a bare `yes` is a boolean.
    writeFileSync(
      join(dir, "docker-compose.yaml"),
      stringify(compose, { defaultStringType: "QUOTE_DOUBLE" }),
    );
    const t = performance.now();
    for (const [v, src] of Object.entries(snapshotDirs)) execFileSync("cp", ["-a", src, join(dir, v)]);
    const up = spawnSync(
      "docker-compose",
      ["-p", project, "-f", join(dir, "docker-compose.yaml"), "up", "-d"],
      {
        encoding: "utf8",
      },
    );
    if (up.status !== 0) throw new Error(up.stderr);
    await waitHealthyViaExec(project, s);
    out.push(performance.now() - t);
    spawnSync("docker-compose", ["-p", project, "-f", join(dir, "docker-compose.yaml"), "down", "-v"], {
      stdio: "ignore",
    });
    rmSync(dir, { recursive: true, force: true });
  }
  return out;
}

async function waitHealthyViaExec(project: string, s: ResolvedSpec): Promise<void> {
  await Promise.all(
    Object.entries(s.services).map(async ([name, svc]) => {
      const [c] = await docker.listContainers({
        all: true,
        filters: JSON.stringify({
          label: [`com.docker.compose.project=${project}`, `com.docker.compose.service=${name}`],
        }),
      });
      if (!c) throw new Error(`no container for ${name}`);
      const container = docker.getContainer(c.Id);
      if (!svc.healthcheck) return;
      const [kind, ...rest] = svc.healthcheck.test;
      const cmd = kind === "CMD-SHELL" ? ["sh", "-c", rest[0] as string] : rest;
      for (const deadline = Date.now() + 60_000; Date.now() < deadline; ) {
        const exec = await container.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
        const stream = await exec.start({ hijack: true, stdin: false });
        stream.resume();
        await new Promise((r) => stream.on("end", r).on("close", r));
        if ((await exec.inspect()).ExitCode === 0) return;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error(`${name} never healthy`);
    }),
  );
}

/**
 * The physical floor: on datasets already cloned (untimed), the same containers created and
 * started straight through the Engine API, all in parallel, polled to the same health.
 */
async function floorForks(
  s: ResolvedSpec,
  snapshots: Record<string, string>,
  btrfs: BtrfsDriver,
): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < ITER; i++) {
    const tag = `${runId}-floor${i}`;
    const net = await docker.createNetwork({
      Name: tag,
      Internal: true,
      Labels: labels,
      Options: { "com.docker.network.bridge.inhibit_ipv4": "true" },
    });
    const datasets: string[] = [];
    for (const [vol, snap] of Object.entries(snapshots)) {
      const ds = `${tag}-${vol}`;
      await btrfs.clone(snap, ds);
      datasets.push(ds);
      await docker.createVolume({
        Name: ds,
        Driver: "local",
        DriverOpts: { type: "none", o: "bind", device: btrfs.datasetPath(ds) },
        Labels: labels,
      });
    }
    const t = performance.now();
    const containers = await Promise.all(
      Object.entries(s.services).map(async ([name, svc]) => {
        const c = await docker.createContainer({
          name: `${tag}-${name}`,
          Image: svc.image_pinned ?? svc.image,
          ...(svc.command ? { Cmd: svc.command } : {}),
          Env: Object.entries(svc.environment).map(([k, v]) => `${k}=${v}`),
          ...(svc.user ? { User: svc.user } : {}),
          Labels: labels,
          HostConfig: {
            NetworkMode: tag,
            Memory: svc.caps.memory_bytes,
            PidsLimit: svc.caps.pids,
            NanoCpus: svc.caps.cpus * 1e9,
            Binds: svc.volumes.map((v) => `${tag}-${v.dataset}:${v.target}`),
          },
          NetworkingConfig: { EndpointsConfig: { [tag]: { Aliases: [name] } } },
        });
        await c.start();
        return [name, c] as const;
      }),
    );
    await Promise.all(
      containers.map(async ([name, c]) => {
        const hc = s.services[name]?.healthcheck;
        if (!hc) return;
        const [kind, ...rest] = hc.test;
        const cmd = kind === "CMD-SHELL" ? ["sh", "-c", rest[0] as string] : rest;
        for (;;) {
          const exec = await c.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
          const stream = await exec.start({ hijack: true, stdin: false });
          stream.resume();
          await new Promise((r) => stream.on("end", r).on("close", r));
          if ((await exec.inspect()).ExitCode === 0) return;
          await new Promise((r) => setTimeout(r, 100));
        }
      }),
    );
    out.push(performance.now() - t);
    await Promise.all(containers.map(([, c]) => c.remove({ force: true })));
    for (const ds of datasets) {
      await docker.getVolume(ds).remove();
      await btrfs.destroyDataset(ds);
    }
    await net.remove();
  }
  return out;
}

/** Snapshots taken while a writer inserts rows: their frozen windows. */
async function frozenWindows(d: Denvd, envId: string): Promise<number[]> {
  await d.exec(envId, "opsbox", {
    command: ["psql", "-qc", "create table if not exists w (id serial primary key, t text)"],
  });
  const writer = d.exec(envId, "opsbox", {
    command: 'while [ ! -e /tmp/stop ]; do psql -qc "insert into w (t) values (now())" >/dev/null; done',
  });
  const out: number[] = [];
  try {
    for (let i = 0; i < ITER * 2; i++) {
      out.push((await d.snapshot(envId)).evidence.frozen_ms);
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    await d.exec(envId, "opsbox", { command: "touch /tmp/stop" });
    await writer;
  }
  return out;
}

export async function forkBench(): Promise<
  Record<string, { value: number; unit: string; samples?: number[] }>
> {
  mkdirSync(base, { recursive: true });
  const s = await spec();
  const btrfs = new BtrfsDriver({ stateDir: join(base, "btrfs"), imageSizeBytes: 32 * 1024 ** 3 });
  const dirDriver = new DirDriver(join(base, "dir"));
  const results: Record<string, { value: number; unit: string; samples?: number[] }> = {};
  const record = (name: string, samples: number[]) => {
    results[name] = { value: Math.round(p50(samples)), unit: "ms", samples: samples.map(Math.round) };
    log(`${name}: p50 ${Math.round(p50(samples))} ms  (${samples.map(Math.round).join(", ")})`);
  };
  try {
    const b = await openHost(btrfs, join(base, "btrfs"));
    log(`btrfs: ${ITER} forks each of ops-world + 10 MiB and + 1 GiB`);
    const small = await version(b, s, 10 * MiB);
    record("fork_p50_ms_btrfs_10mib", await denvForks(b, small.version.id));
    await b.destroy(small.env);
    const big = await version(b, s, 1024 * MiB);
    record("fork_p50_ms_btrfs_1gib", await denvForks(b, big.version.id));
    record("fork_floor_p50_ms_1gib", await floorForks(s, big.version.snapshots, btrfs));
    record("frozen_window_p50_ms", await frozenWindows(b, big.env));
    log("peer: cp -a of the volumes + docker-compose up, 1 GiB");
    const snapDirs = Object.fromEntries(
      Object.entries(big.version.snapshots).map(([v, id]) => [v, join(btrfs.poolPath, "snapshots", id)]),
    );
    record("fork_p50_ms_peer_1gib", await peerForks(s, snapDirs));
    await b.destroy(big.env);

    const d = await openHost(dirDriver, join(base, "dir"));
    log("dir: forks of ops-world + 1 GiB (copies)");
    const dirBig = await version(d, s, 1024 * MiB);
    record("fork_p50_ms_dir_1gib", await denvForks(d, dirBig.version.id));
    await d.destroy(dirBig.env);
    for (const v of d.versions()) await d.deleteVersion(v.id);
    for (const v of b.versions()) await b.deleteVersion(v.id);
  } finally {
    await btrfs.unmount().catch(() => {});
    rmSync(base, { recursive: true, force: true });
    spawnSync("bash", [join(root, "scripts/clean-leftovers.sh")], { stdio: "ignore" });
  }
  return results;
}

async function main() {
  const results = await forkBench();
  const v = (n: string) => results[n]?.value ?? Number.NaN;
  const ratios = {
    btrfs_1gib_vs_10mib: v("fork_p50_ms_btrfs_1gib") / v("fork_p50_ms_btrfs_10mib"),
    peer_vs_btrfs_1gib: v("fork_p50_ms_peer_1gib") / v("fork_p50_ms_btrfs_1gib"),
    dir_vs_btrfs_1gib: v("fork_p50_ms_dir_1gib") / v("fork_p50_ms_btrfs_1gib"),
  };
  process.stdout.write("\nmetric                        p50 ms\n");
  for (const [name, r] of Object.entries(results))
    process.stdout.write(`${name.padEnd(30)}${String(r.value).padStart(7)}\n`);
  process.stdout.write("\nratio                         x\n");
  for (const [name, r] of Object.entries(ratios))
    process.stdout.write(`${name.padEnd(30)}${r.toFixed(2).padStart(7)}\n`);
  if (json) process.stdout.write(`${JSON.stringify({ metrics: results, ratios })}\n`);
}

if (import.meta.main) await main();
