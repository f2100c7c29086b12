/**
 * Live versions (issue 71): how long a user waits for a fork whose service is warm — its state
 * built — side by side in the same rounds, every sample's answer checked:
 *   - denv's fork of a live version through the API (`POST /v1/envs/{id}/fork`, the 201 of a
 *     running fork), the service's state restored with its memory: ready at once;
 *   - denv's cold fork of the same version (`{cold: true}`): the service starts afresh and builds
 *     its state again (what every fork did before live versions);
 *   - the peer a good engineer would pick on the same engine: Docker's own checkpoint and restore
 *     with the same CRIU, by hand (`docker checkpoint create --leave-running`, `docker commit` of its
 *     layer, `docker create` from that image with the same command, the checkpoint copied into it,
 *     `docker start --checkpoint`) of the one warmed container — no volumes, no network of its own, no agent, no health or egress
 *     checks.
 * Each is timed from the request until an exec in the fork reads the service's ready file with the
 * parent's token (the cold fork: its own token). The warm-up stands for loading a model or warming
 * a cache: 64 MiB of state and about two seconds of hashing.
 * Also the live snapshot itself: its frozen window and each dump, as its evidence says; and how
 * both grow with what a service holds (10 MiB, 256 MiB, 1 GiB touched): the frozen window of its
 * live snapshot, and a fork of that version until an exec reads the token its process drew. And
 * ops-world itself, live against cold (live-ops-world-bench.ts).
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { log, openBenchRig } from "./bench-rig.ts";
import { type Metric, metricOf, shuffled } from "./bench-stats.ts";
import { opsWorldLive } from "./live-ops-world-bench.ts";

const run = promisify(execFile);
const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
const WARM = `import hashlib, os, time, uuid
token = str(uuid.uuid4())
state = bytearray(os.urandom(64 << 20))
h = b""
for _ in range(6_000_000):
    h = hashlib.sha256(h).digest()
open("/srv/ready", "w").write(token + " " + h.hex()[:16])
while True:
    time.sleep(1)
`;
const COMPOSE = `x-denv: { kind: service }
services:
  warm:
    image: ${OPSBOX}
    command: ["python3", "-c", ${JSON.stringify(WARM.replaceAll("$", "$$$$"))}]
`;

/** A process holding `mib` MiB it has written to (so every page is its own), and a token. */
const holding = (mib: number) => `import time, uuid
b = bytearray(${mib} << 20)
b[::4096] = b"x" * len(b[::4096])
open("/srv/token", "w").write(str(uuid.uuid4()))
time.sleep(1e9)
`;
const SIZES_MIB = [10, 256, 1024];

export async function liveBench(quick: boolean): Promise<Record<string, Metric>> {
  const rig = await openBenchRig("live");
  const { api, raw } = rig;
  const labels = Object.entries(rig.labels).flatMap(([k, v]) => ["--label", `${k}=${v}`]);
  const peerName = `${rig.runId}-peer`;
  try {
    await api("POST", "/v1/projects", { name: "live", kind: "service", source: "./live" });
    await api("PUT", "/v1/projects/live/source", { compose: COMPOSE });
    const d = await api("POST", "/v1/projects/live/deploy?wait=true", { env: "alpha" });
    if (d.status !== "succeeded") throw new Error(`deploy: ${d.reason}`);
    const ready = async (env: string): Promise<string | null> => {
      const r = await raw("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, {
        service: "warm",
        command: ["cat", "/srv/ready"],
      });
      return r.status === 200 && r.data.exit_code === 0 ? String(r.data.stdout) : null;
    };
    const until = async <T>(probe: () => Promise<T | null>): Promise<T> => {
      for (;;) {
        const v = await probe();
        if (v) return v;
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    const parentReady = await until(() => ready("live/alpha"));
    // The live version, its snapshot taken once the service is warm.
    const frozen: number[] = [];
    const dumps: number[] = [];
    let snapDeployment: Record<string, any> = {};
    for (let i = 0; i < (quick ? 2 : 5); i++) {
      snapDeployment = await api("POST", "/v1/envs/live%2Falpha/snapshot?wait=true", { live: true });
      if (snapDeployment.status !== "succeeded") throw new Error(`live snapshot: ${snapDeployment.reason}`);
      const ev = snapDeployment.phases.find((p: { name: string }) => p.name === "snapshot").evidence;
      frozen.push(ev.frozen_ms);
      dumps.push(ev.live.services.warm.dump_ms);
    }
    const imageBytes = snapDeployment.phases.find((p: { name: string }) => p.name === "snapshot").evidence
      .live.services.warm.checkpoint_bytes as number;

    // The peer's warmed container, the same image and program.
    await run("docker", ["run", "-d", "--name", peerName, ...labels, OPSBOX, "python3", "-c", WARM]);
    await until(async () => {
      const r = await run("docker", ["exec", peerName, "cat", "/srv/ready"]).catch(() => null);
      return r?.stdout ?? null;
    });
    const peerToken = (await run("docker", ["exec", peerName, "cat", "/srv/ready"])).stdout;
    const root = (await run("docker", ["info", "-f", "{{.DockerRootDir}}"])).stdout.trim();

    const live: number[] = [];
    const cold: number[] = [];
    const peer: number[] = [];
    const rounds = quick ? 3 : 8;
    for (let i = 0; i < rounds; i++)
      for (const who of shuffled(["live", "cold", "peer"], i + 1)) {
        const name = `${who}-${i}`;
        const t = performance.now();
        if (who === "peer") {
          const ck = `ck${i}`;
          await run("docker", ["checkpoint", "create", "--leave-running", peerName, ck]);
          // The restored process expects the files it wrote in its own layer: committed, as a
          // user of Docker carries a container's layer (pausing it again while it is read).
          const image = `${peerName}-layer:${i}`;
          await run("docker", ["commit", peerName, image]);
          const id = (
            await run("docker", [
              "create",
              "--name",
              `${peerName}-${i}`,
              ...labels,
              image,
              "python3",
              "-c",
              WARM,
            ])
          ).stdout.trim();
          const src = (await run("docker", ["inspect", "-f", "{{.Id}}", peerName])).stdout.trim();
          await run("mkdir", ["-p", `${root}/containers/${id}/checkpoints`]);
          await run("cp", [
            "-a",
            `${root}/containers/${src}/checkpoints/${ck}`,
            `${root}/containers/${id}/checkpoints/`,
          ]);
          await run("docker", ["start", "--checkpoint", ck, id]);
          const got = (await run("docker", ["exec", id, "cat", "/srv/ready"])).stdout;
          peer.push(performance.now() - t);
          if (got !== peerToken) throw new Error(`the peer's restore read ${got}`);
          await run("docker", ["rm", "-f", id]);
          await run("docker", ["rmi", image]);
          await run("docker", ["checkpoint", "rm", peerName, ck]);
          continue;
        }
        const f = await raw("POST", "/v1/envs/live%2Falpha/fork", {
          name,
          ...(who === "cold" ? { cold: true } : {}),
        });
        if (f.status !== 201) throw new Error(`${who} fork: ${JSON.stringify(f.data)}`);
        const got = await until(() => ready(`live/${name}`));
        (who === "live" ? live : cold).push(performance.now() - t);
        if (who === "live" && got !== parentReady) throw new Error(`the live fork read ${got}`);
        if (who === "cold" && got.split(" ")[0] === parentReady.split(" ")[0])
          throw new Error("the cold fork kept the parent's token");
        await api("DELETE", `/v1/envs/${encodeURIComponent(`live/${name}`)}`);
      }
    log(
      `live fork ready p50 ${metricOf(live, "ms").value} ms, cold ${metricOf(cold, "ms").value} ms, docker by hand ${metricOf(peer, "ms").value} ms`,
    );
    const bySize = await growth(api, raw, quick);
    const opsWorld = await opsWorldLive(api, raw, quick);
    return {
      ...bySize,
      ...opsWorld,
      live_fork_ready_p50_ms: metricOf(live, "ms", "fork of a live version until its warmed service answers"),
      live_cold_fork_ready_p50_ms: metricOf(
        cold,
        "ms",
        "cold fork of the same version until it has warmed again",
      ),
      live_peer_restore_p50_ms: metricOf(
        peer,
        "ms",
        "docker checkpoint create --leave-running + commit + create + start --checkpoint of one container, by hand",
      ),
      live_snapshot_frozen_p50_ms: metricOf(frozen, "ms", "the live snapshot's frozen window"),
      live_snapshot_dump_p50_ms: metricOf(
        dumps,
        "ms",
        `CRIU's dump of the service (${Math.round(imageBytes / 2 ** 20)} MiB of images)`,
      ),
    };
  } finally {
    await run("docker", ["rm", "-f", peerName]).catch(() => {});
    await rig.close();
  }
}

/** The frozen window and the live fork's time, per size of what the service holds. */
async function growth(
  api: (method: string, path: string, body?: unknown) => Promise<Record<string, any>>,
  raw: (method: string, path: string, body?: unknown) => Promise<{ status: number; data: any }>,
  quick: boolean,
): Promise<Record<string, Metric>> {
  const out: Record<string, Metric> = {};
  for (const mib of SIZES_MIB) {
    const project = `hold-${mib}`;
    const compose = `x-denv: { kind: service }
services:
  hold:
    image: ${OPSBOX}
    command: ["python3", "-c", ${JSON.stringify(holding(mib))}]
`;
    await api("POST", "/v1/projects", { name: project, kind: "service", source: `./${project}` });
    await api("PUT", `/v1/projects/${project}/source`, { compose });
    const d = await api("POST", `/v1/projects/${project}/deploy?wait=true`, { env: "alpha" });
    if (d.status !== "succeeded") throw new Error(`deploy ${project}: ${d.reason}`);
    const token = async (env: string): Promise<string | null> => {
      const r = await raw("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, {
        service: "hold",
        command: ["cat", "/srv/token"],
      });
      return r.status === 200 && r.data.exit_code === 0 && r.data.stdout ? String(r.data.stdout) : null;
    };
    let parent: string | null = null;
    while (!parent) parent = await token(`${project}/alpha`);
    const frozen: number[] = [];
    const forks: number[] = [];
    for (let i = 0; i < (quick ? 1 : 3); i++) {
      const snap = await api("POST", `/v1/envs/${project}%2Falpha/snapshot?wait=true`, { live: true });
      if (snap.status !== "succeeded") throw new Error(`live snapshot of ${project}: ${snap.reason}`);
      frozen.push(snap.phases.find((p: { name: string }) => p.name === "snapshot").evidence.frozen_ms);
      const t = performance.now();
      const f = await raw("POST", `/v1/envs/${project}%2Falpha/fork`, { name: `f${i}` });
      if (f.status !== 201) throw new Error(`fork of ${project}: ${JSON.stringify(f.data)}`);
      const got = await token(`${project}/f${i}`);
      forks.push(performance.now() - t);
      if (got !== parent) throw new Error(`the fork of ${project} read ${got}, not ${parent}`);
      await api("DELETE", `/v1/envs/${encodeURIComponent(`${project}/f${i}`)}`);
    }
    await api("DELETE", `/v1/envs/${encodeURIComponent(`${project}/alpha`)}`);
    log(
      `holding ${mib} MiB: frozen ${metricOf(frozen, "ms").value} ms, live fork ${metricOf(forks, "ms").value} ms`,
    );
    out[`live_snapshot_frozen_${mib}mib_p50_ms`] = metricOf(
      frozen,
      "ms",
      `the live snapshot's frozen window, a service holding ${mib} MiB`,
    );
    out[`live_fork_${mib}mib_p50_ms`] = metricOf(
      forks,
      "ms",
      `fork of that live version until an exec reads its process's token (${mib} MiB)`,
    );
  }
  return out;
}
