/**
 * The API side of the benchmark, each figure beside its peer measured in the same run:
 *   sandbox create (POST /v1/sandboxes from a single-container version until its first exec answers)
 *     vs `docker run` of the same image until the same exec answers;
 *   exec of `echo` through POST /v1/envs/{id}/exec vs the Engine API directly vs `docker exec`;
 *   deploy of ops-world to healthy by denv vs `docker-compose up` of the same stack to the same health;
 *   fan-out of ops-world forks in one call vs the same forks one after another.
 * Rollouts at scale (pools, create throughput, live sandboxes, exec under load) are scale-bench.ts.
 */
import { execFile, execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { DenvClient } from "@denv/sdk";
import Docker from "dockerode";
import { parse, stringify } from "yaml";
import { log, ms, openBenchRig } from "./bench-rig.ts";
import { metricOf, shuffled } from "./bench-stats.ts";

export type { Metric } from "./bench-stats.ts";

import type { Metric } from "./bench-stats.ts";

const root = join(import.meta.dirname, "..");
const docker = new Docker();
const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";

/** An exec through the Engine API: its exit code and output, demultiplexed. */
export async function engineExec(
  c: Docker.Container,
  cmd: string[],
): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const exec = await c.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({ hijack: true, stdin: false });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  docker.modem.demuxStream(
    stream,
    { write: (b: Buffer) => out.push(b) } as never,
    {
      write: (b: Buffer) => err.push(b),
    } as never,
  );
  await new Promise((r) => stream.on("end", r).on("close", r));
  return {
    exitCode: (await exec.inspect()).ExitCode ?? -1,
    stdout: Buffer.concat(out).toString(),
    stderr: Buffer.concat(err).toString(),
  };
}

export async function apiBench(quick: boolean): Promise<Record<string, Metric>> {
  const rig = await openBenchRig("api");
  const { api, server, denvd, labels, runId, stateDir } = rig;
  const results: Record<string, Metric> = {};
  const peerDir = join(stateDir, "peer");
  try {
    // --- deploy vs docker-compose up, each to healthy and to ready, by this client's clock ---
    const compose = readFileSync(join(root, "examples/ops-world/docker-compose.yaml"), "utf8");
    await api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
    await api("PUT", "/v1/projects/ops-world/source", { compose });
    const client = new DenvClient({ baseUrl: server.url, apiKey: rig.key });
    let deployN = 0;
    /** `denv deploy --wait`'s wait: the request, then the deployment's events to its verdict. */
    const denvDeploy = async (): Promise<{ healthy: number; ready: number }> => {
      const env = `deploy-${deployN++}`;
      const t = performance.now();
      const d = await api("POST", "/v1/projects/ops-world/deploy?wait=false", { env });
      let healthy = Number.NaN;
      let last: Record<string, any> = d;
      for await (const e of client.deploymentEvents(d.id)) {
        last = e;
        const health = e.phases.find((p: { name: string }) => p.name === "health");
        if (Number.isNaN(healthy) && health?.status === "succeeded") healthy = performance.now() - t;
        if (["succeeded", "failed", "rolled_back"].includes(e.status)) break;
      }
      const ready = performance.now() - t;
      if (last.status !== "succeeded" || Number.isNaN(healthy))
        throw new Error(`deploy ${env}: ${last.status} ${last.reason ?? ""}`);
      const id = encodeURIComponent(`ops-world/${env}`);
      const count = await api("POST", `/v1/envs/${id}/exec`, {
        command: ["psql", "-tAc", "select count(*) from orders"],
      });
      if (count.stdout !== "100000\n") throw new Error(`deploy ${env}: ${count.stdout} orders`);
      await api("DELETE", `/v1/envs/${id}`);
      return { healthy, ready };
    };
    /** The peer: docker-compose up to the same health, then the same warm command (the seed). */
    const peerDeploy = async (): Promise<{ healthy: number; ready: number }> => {
      const i = deployN++;
      const project = `${runId}p${i}`.replace(/[^a-z0-9]/g, "");
      const dir = join(peerDir, String(i));
      const t = performance.now();
      const healthy = await composeUp(compose, dir, project, labels, undefined, { keep: true });
      const [c] = await docker.listContainers({
        filters: JSON.stringify({
          label: [`com.docker.compose.project=${project}`, "com.docker.compose.service=opsbox"],
        }),
      });
      const box = docker.getContainer(c?.Id as string);
      const warm = await engineExec(box, ["sh", "-c", "psql -h db -U postgres -f /seed/orders.sql"]);
      const ready = performance.now() - t;
      const count = await engineExec(box, ["psql", "-tAc", "select count(*) from orders"]);
      composeDown(dir, project);
      if (warm.exitCode !== 0 || count.stdout !== "100000\n")
        throw new Error(`peer deploy: warm ${warm.exitCode} ${warm.stderr}; ${count.stdout} orders`);
      return { healthy, ready };
    };
    const denvRuns: { healthy: number; ready: number }[] = [];
    const peerRuns: { healthy: number; ready: number }[] = [];
    await denvDeploy(); // warm-up, untimed
    await peerDeploy();
    const deployRounds = quick ? 3 : 20;
    for (let round = 0; round < deployRounds; round++)
      for (const who of shuffled(["denv", "peer"], round + 1))
        if (who === "denv") denvRuns.push(await denvDeploy());
        else peerRuns.push(await peerDeploy());
    results.deploy_ms = metricOf(
      denvRuns.map((r) => r.healthy),
      "ms",
      "to healthy: POST deploy to the event reporting the health phase succeeded, client clock",
      0,
    );
    results.deploy_ready_ms = metricOf(
      denvRuns.map((r) => r.ready),
      "ms",
      "to ready: POST deploy to its verdict (health, warm, snapshot: a version), client clock",
      0,
    );
    results.deploy_peer_ms = metricOf(
      peerRuns.map((r) => r.healthy),
      "ms",
      "docker-compose up -d on fresh volumes until the same healthchecks pass",
      0,
    );
    results.deploy_ready_peer_ms = metricOf(
      peerRuns.map((r) => r.ready),
      "ms",
      "docker-compose up, healthy, then the same warm command (the seed) run to its end",
      0,
    );
    log(
      `  deploy: to healthy ${results.deploy_ms.value} ms, to ready ${results.deploy_ready_ms.value} ms; peer ${results.deploy_peer_ms.value} / ${results.deploy_ready_peer_ms.value} ms`,
    );

    // --- fan-out: N forks of one version in one call, beside the same N made one after another ---
    // Rounds in a shuffled order (the two contestants alternate who goes first); every fork of
    // every round must be made and answer an exec, or the run fails.
    const fanBase = await api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "fan-base" });
    const fanCount = quick ? 8 : 32;
    const fanRounds = quick ? 2 : 4;
    const fanMs: number[] = [];
    const seqMs: number[] = [];
    /** Each fork answers an exec of its own name (it is live and is the one asked for), then goes. */
    const checkAndRemove = async (ids: string[]) => {
      for (const id of ids) {
        const r = await api("POST", `/v1/envs/${id}/exec`, { service: "opsbox", command: ["echo", id] });
        if (r.exit_code !== 0 || r.stdout !== `${id}\n`)
          throw new Error(`fork ${id} exec: ${JSON.stringify(r)}`);
      }
      for (const id of ids) await api("DELETE", `/v1/envs/${id}`);
    };
    const fanOut = async (round: number) => {
      const t = performance.now();
      const fan = await api("POST", `/v1/versions/${fanBase.version_id}/forks`, {
        count: fanCount,
        name_prefix: `fan${round}`,
      });
      const elapsed = performance.now() - t;
      const ids = (fan.forks as { ok: boolean; environment?: { id: string } }[])
        .filter((f) => f.ok)
        .map((f) => f.environment?.id as string);
      if (fan.created !== fanCount || ids.length !== fanCount)
        throw new Error(
          `fan-out made ${fan.created} of ${fanCount}: ${JSON.stringify(fan.forks).slice(0, 400)}`,
        );
      await checkAndRemove(ids);
      fanMs.push(elapsed);
    };
    const oneByOne = async (round: number) => {
      const t = performance.now();
      const ids: string[] = [];
      for (let i = 0; i < fanCount; i++)
        ids.push(
          (await api("POST", "/v1/sandboxes", { from_version: fanBase.version_id, name: `seq${round}-${i}` }))
            .id,
        );
      const elapsed = performance.now() - t;
      await checkAndRemove(ids);
      seqMs.push(elapsed);
    };
    for (let round = 0; round < fanRounds; round++)
      for (const run of shuffled([fanOut, oneByOne], 7000 + round)) await run(round);
    await api("DELETE", `/v1/envs/${encodeURIComponent("ops-world/fan-base")}`);
    results[`fanout_${fanCount}_ms`] = metricOf(
      fanMs,
      "ms",
      `${fanCount} ops-world forks made and healthy, one POST /v1/versions/{id}/forks (${fanRounds} rounds, each fork checked by an exec)`,
      0,
    );
    results[`fanout_${fanCount}_sequential_ms`] = metricOf(
      seqMs,
      "ms",
      `the same ${fanCount} forks made one after another (POST /v1/sandboxes each)`,
      0,
    );
    log(
      `  fan-out of ${fanCount}: ${ms(fanMs)} ms; one after another: ${ms(seqMs)} ms (${fanRounds} rounds)`,
    );

    // --- sandbox create ---
    const single =
      'x-denv: { kind: agent, agent: { service: box } }\nservices:\n  box:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    user: "1000:1000"\n    command: [sleep, infinity]\n    volumes: ["work:/work"]\nvolumes: { work: {} }\n';
    await api("POST", "/v1/projects", { name: "single", kind: "agent", source: "./single" });
    await api("PUT", "/v1/projects/single/source", { compose: single });
    const base = await api("POST", "/v1/projects/single/deploy?wait=true", { env: "base" });
    const version = base.phases.find((p: any) => p.name === "verdict").evidence.version_id as string;
    const creates: number[] = [];
    const peerCreates: number[] = [];
    /** POST /v1/sandboxes until its first exec answers; checked, then removed (as the peer's are). */
    const denvCreate = async () => {
      const t = performance.now();
      const sb = await api("POST", "/v1/sandboxes", { from_version: version });
      const r = await api("POST", `/v1/envs/${sb.id}/exec`, { command: ["echo", "hi"] });
      const elapsed = performance.now() - t;
      if (r.exit_code !== 0 || r.stdout !== "hi\n") throw new Error(`sandbox exec: ${JSON.stringify(r)}`);
      await api("DELETE", `/v1/envs/${sb.id}`);
      return elapsed;
    };
    /** The same image and volume, created and started through the Engine API until exec answers. */
    const peerCreate = async () => {
      const t = performance.now();
      const vol = await docker.createVolume({ Labels: labels });
      const c = await docker.createContainer({
        Image: OPSBOX,
        Cmd: ["sleep", "infinity"],
        User: "1000:1000",
        Labels: labels,
        HostConfig: { Binds: [`${vol.name}:/work`], NetworkMode: "none" },
      });
      await c.start();
      const r = await engineExec(c, ["echo", "hi"]);
      const elapsed = performance.now() - t;
      if (r.exitCode !== 0 || r.stdout !== "hi\n") throw new Error(`peer exec: ${JSON.stringify(r)}`);
      await c.remove({ force: true });
      await docker.getVolume(vol.name).remove();
      return elapsed;
    };
    await denvCreate(); // warm-up, untimed
    await peerCreate();
    for (let i = 0; i < (quick ? 8 : 20); i++)
      for (const who of shuffled(["denv", "peer"], i + 1))
        if (who === "denv") creates.push(await denvCreate());
        else peerCreates.push(await peerCreate());
    results.sandbox_create_p50_ms = metricOf(
      creates,
      "ms",
      "POST /v1/sandboxes until its first exec answers",
      0,
    );
    results.sandbox_create_p95_ms = { value: ms(creates, 0.95), unit: "ms" };
    results.sandbox_create_peer_p50_ms = metricOf(
      peerCreates,
      "ms",
      "Engine API create + start (a volume, no network) until an exec of echo answers",
      0,
    );
    const sandboxes = [(await api("POST", "/v1/sandboxes", { from_version: version })).id as string];

    // --- exec ---
    const first = sandboxes[0] as string;
    const execs: number[] = [];
    for (let i = 0; i < (quick ? 50 : 200); i++) {
      const t = performance.now();
      const r = await api("POST", `/v1/envs/${first}/exec`, { command: ["echo", "hi"] });
      execs.push(performance.now() - t);
      if (r.exit_code !== 0 || r.stdout !== "hi\n") throw new Error(`exec: ${JSON.stringify(r)}`);
    }
    results.exec_p50_ms = metricOf(execs, "ms", "POST /v1/envs/{id}/exec of echo, answered and checked", 1);
    results.exec_p99_ms = { value: ms(execs, 0.99), unit: "ms" };
    const hostEnv = (
      await server.store
        .selectFrom("environments")
        .select("stack_id")
        .where("id", "=", first)
        .executeTakeFirstOrThrow()
    ).stack_id as string;
    const containerId = denvd.stack(hostEnv).containers.box as string;
    const direct: number[] = [];
    for (let i = 0; i < (quick ? 50 : 200); i++) {
      const t = performance.now();
      const r = await engineExec(docker.getContainer(containerId), ["echo", "hi"]);
      direct.push(performance.now() - t);
      if (r.exitCode !== 0 || r.stdout !== "hi\n") throw new Error(`engine exec: ${JSON.stringify(r)}`);
    }
    results.exec_direct_p50_ms = metricOf(
      direct,
      "ms",
      "Engine API exec create + start + inspect, output checked",
      1,
    );
    const cli: number[] = [];
    for (let i = 0; i < (quick ? 20 : 50); i++) {
      const t = performance.now();
      const out = execFileSync("docker", ["exec", containerId, "echo", "hi"], { encoding: "utf8" });
      cli.push(performance.now() - t);
      if (out !== "hi\n") throw new Error(`docker exec: ${out}`);
    }
    results.exec_cli_p50_ms = metricOf(cli, "ms", "`docker exec CONTAINER echo hi`, output checked", 1);

    for (const id of sandboxes) await api("DELETE", `/v1/envs/${id}`);
  } finally {
    await rig.close();
  }
  return results;
}

/**
 * The peer's deploy: docker-compose up -d of the same stack, to the same health; on fresh volumes,
 * or with each volume bound to a directory given (a copy of another stack's data).
 */
export async function composeUp(
  text: string,
  dir: string,
  project: string,
  labels: Record<string, string>,
  volumeDirs?: Record<string, string>,
  options: { keep?: boolean; subnet?: string } = {},
): Promise<number> {
  const compose = parse(text);
  delete compose["x-denv"];
  for (const svc of Object.values<Record<string, unknown>>(compose.services)) svc.labels = labels;
  compose.volumes = Object.fromEntries(
    Object.keys(compose.volumes).map((v) => [
      v,
      volumeDirs?.[v]
        ? { labels, driver: "local", driver_opts: { type: "none", o: "bind", device: volumeDirs[v] } }
        : { labels },
    ]),
  );
  // Many projects at once need their own subnets: the engine's default pools hold about 31.
  compose.networks = {
    default: {
      internal: true,
      labels,
      ...(options.subnet ? { ipam: { config: [{ subnet: options.subnet }] } } : {}),
    },
  };
  mkdirSync(dir, { recursive: true });
  const file = join(dir, "docker-compose.yaml");
  writeFileSync(file, stringify(compose, { defaultStringType: "QUOTE_DOUBLE" }));
  const t = performance.now();
  // Not spawnSync: several of these run at once in the fan-out peer.
  await promisify(execFile)("docker-compose", ["-p", project, "-f", file, "up", "-d"], { encoding: "utf8" });
  for (const name of ["db", "queue"]) {
    const [c] = await docker.listContainers({
      filters: JSON.stringify({
        label: [`com.docker.compose.project=${project}`, `com.docker.compose.service=${name}`],
      }),
    });
    const cmd = name === "db" ? ["sh", "-c", "pg_isready -U postgres"] : ["redis-cli", "ping"];
    for (;;) {
      const exec = await docker
        .getContainer(c?.Id as string)
        .exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
      const stream = await exec.start({ hijack: true, stdin: false });
      stream.resume();
      await new Promise((r) => stream.on("end", r).on("close", r));
      if ((await exec.inspect()).ExitCode === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const elapsed = performance.now() - t;
  if (!options.keep) {
    composeDown(dir, project);
    log(`  docker-compose up to healthy: ${Math.round(elapsed)} ms`);
  }
  return elapsed;
}

/** Removes what composeUp made: the project's containers, network and volumes, and its directory. */
export function composeDown(dir: string, project: string): void {
  spawnSync("docker-compose", ["-p", project, "-f", join(dir, "docker-compose.yaml"), "down", "-v"], {
    stdio: "ignore",
  });
  rmSync(dir, { recursive: true, force: true });
}
