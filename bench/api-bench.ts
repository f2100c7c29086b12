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
import Docker from "dockerode";
import { parse, stringify } from "yaml";
import { log, ms, openBenchRig } from "./bench-rig.ts";

export type Metric = { value: number; unit: string; samples?: number[]; note?: string };

const root = join(import.meta.dirname, "..");
const docker = new Docker();
const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";

async function dockerExecEcho(c: Docker.Container): Promise<void> {
  const exec = await c.exec({ Cmd: ["echo", "hi"], AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({ hijack: true, stdin: false });
  stream.resume();
  await new Promise((r) => stream.on("end", r).on("close", r));
}

export async function apiBench(quick: boolean): Promise<Record<string, Metric>> {
  const rig = await openBenchRig("api");
  const { api, server, denvd, labels, runId, stateDir } = rig;
  const results: Record<string, Metric> = {};
  const peerDir = join(stateDir, "peer");
  try {
    // --- deploy vs docker-compose up ---
    const compose = readFileSync(join(root, "examples/ops-world/docker-compose.yaml"), "utf8");
    await api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
    await api("PUT", "/v1/projects/ops-world/source", { compose });
    const deploys: number[] = [];
    const peers: number[] = [];
    for (let i = 0; i < (quick ? 2 : 3); i++) {
      const d = await api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: `deploy-${i}` });
      const health = d.phases.find((p: any) => p.name === "health");
      deploys.push(Date.parse(health.finished_at) - Date.parse(d.created_at));
      await api("DELETE", `/v1/envs/${encodeURIComponent(`ops-world/deploy-${i}`)}`);
      peers.push(
        await composeUp(compose, join(peerDir, String(i)), `${runId}p${i}`.replace(/[^a-z0-9]/g, ""), labels),
      );
    }
    results.deploy_ms = {
      value: ms(deploys),
      unit: "ms",
      samples: deploys,
      note: "request to the end of the health phase (resolve, place, prepare, start, health)",
    };
    results.deploy_peer_ms = {
      value: ms(peers),
      unit: "ms",
      samples: peers,
      note: "docker-compose up -d on fresh volumes until the same healthchecks pass",
    };

    // --- fan-out: N forks of one version in one call, beside the same N made one after another ---
    const fanBase = await api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "fan-base" });
    const fanCount = quick ? 8 : 32;
    let t0 = performance.now();
    const fan = await api("POST", `/v1/versions/${fanBase.version_id}/forks`, {
      count: fanCount,
      name_prefix: "fan",
    });
    const fanMs = Math.round(performance.now() - t0);
    for (const f of fan.forks) if (f.ok) await api("DELETE", `/v1/envs/${f.environment.id}`);
    t0 = performance.now();
    const seq: string[] = [];
    for (let i = 0; i < fanCount; i++)
      seq.push(
        (await api("POST", "/v1/sandboxes", { from_version: fanBase.version_id, name: `seq-${i}` })).id,
      );
    const seqMs = Math.round(performance.now() - t0);
    for (const id of seq) await api("DELETE", `/v1/envs/${id}`);
    await api("DELETE", `/v1/envs/${encodeURIComponent("ops-world/fan-base")}`);
    results[`fanout_${fanCount}_ms`] = {
      value: fanMs,
      unit: "ms",
      note: `${fan.created} of ${fanCount} ops-world forks made and healthy, one POST /v1/versions/{id}/forks`,
    };
    results[`fanout_${fanCount}_sequential_ms`] = {
      value: seqMs,
      unit: "ms",
      note: `the same ${fanCount} forks made one after another (POST /v1/sandboxes each)`,
    };
    log(`  fan-out of ${fanCount}: ${fanMs} ms (${fan.created} made); one after another: ${seqMs} ms`);

    // --- sandbox create ---
    const single =
      'x-denv: { kind: agent, agent: { service: box } }\nservices:\n  box:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    user: "1000:1000"\n    command: [sleep, infinity]\n    volumes: ["work:/work"]\nvolumes: { work: {} }\n';
    await api("POST", "/v1/projects", { name: "single", kind: "agent", source: "./single" });
    await api("PUT", "/v1/projects/single/source", { compose: single });
    const base = await api("POST", "/v1/projects/single/deploy?wait=true", { env: "base" });
    const version = base.phases.find((p: any) => p.name === "verdict").evidence.version_id as string;
    const creates: number[] = [];
    const sandboxes: string[] = [];
    for (let i = 0; i < (quick ? 8 : 20); i++) {
      const t = performance.now();
      const sb = await api("POST", "/v1/sandboxes", { from_version: version });
      await api("POST", `/v1/envs/${sb.id}/exec`, { command: ["echo", "hi"] });
      creates.push(performance.now() - t);
      sandboxes.push(sb.id);
    }
    results.sandbox_create_p50_ms = { value: ms(creates), unit: "ms", samples: creates.map(Math.round) };
    results.sandbox_create_p95_ms = { value: ms(creates, 0.95), unit: "ms" };
    const peerCreates: number[] = [];
    for (let i = 0; i < (quick ? 8 : 20); i++) {
      const t = performance.now();
      const c = await docker.createContainer({
        Image: OPSBOX,
        Cmd: ["sleep", "infinity"],
        User: "1000:1000",
        Labels: labels,
      });
      await c.start();
      await dockerExecEcho(c);
      peerCreates.push(performance.now() - t);
      await c.remove({ force: true });
    }
    results.sandbox_create_peer_p50_ms = {
      value: ms(peerCreates),
      unit: "ms",
      samples: peerCreates.map(Math.round),
      note: "docker run (create + start) until docker exec echo answers",
    };

    // --- exec ---
    const first = sandboxes[0] as string;
    const execs: number[] = [];
    for (let i = 0; i < (quick ? 50 : 200); i++) {
      const t = performance.now();
      await api("POST", `/v1/envs/${first}/exec`, { command: ["echo", "hi"] });
      execs.push(performance.now() - t);
    }
    results.exec_p50_ms = { value: ms(execs), unit: "ms" };
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
      await dockerExecEcho(docker.getContainer(containerId));
      direct.push(performance.now() - t);
    }
    results.exec_direct_p50_ms = {
      value: ms(direct),
      unit: "ms",
      note: "Engine API exec create + start + inspect",
    };
    const cli: number[] = [];
    for (let i = 0; i < (quick ? 20 : 50); i++) {
      const t = performance.now();
      execFileSync("docker", ["exec", containerId, "echo", "hi"], { stdio: "ignore" });
      cli.push(performance.now() - t);
    }
    results.exec_cli_p50_ms = { value: ms(cli), unit: "ms" };

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
