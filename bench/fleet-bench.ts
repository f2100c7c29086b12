/**
 * The fleet, each figure beside its peer in the same run: three hosts joined to one server, each
 * its own denvd with its own btrfs pool, on this machine's one engine and its CPUs. The first is the
 * rig's (in the server's process); the other two are `denvd run` processes of their own, as hosts
 * are, with pools this benchmark makes.
 *   replication of a ~1 GiB version from one denvd process to the other through the server (POST
 *     /v1/versions/{id}/replicas, until it answers) vs `btrfs send | btrfs receive` piped directly
 *     between the same two pools;
 *   the first fork on a host without the version (a replica made there, then the fork) vs a cold
 *     fork on the host that holds it, of ops-world;
 *   N cold ops-world forks spread over three hosts holding the version vs the same N on one host.
 * The three hosts share this machine's cores: the spread figure says what placement costs or saves
 * here, not what three machines would do.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { log, openBenchRig } from "./bench-rig.ts";
import { type Metric, metricOf } from "./bench-stats.ts";

const MIB = 1024 ** 2;
/** A shell for the peer's pipes that reads no start-up file (a host's .bashrc is not the peer). */
const sh = (script: string) =>
  execFileSync("bash", ["--norc", "--noprofile", "-c", script], {
    env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", SHLVL: "1" },
  });
const root = join(import.meta.dirname, "..");

const denvdBin = join(root, "packages/denvd/bin/denvd.js");
const execFileAsync = promisify(execFile);

/** A host as a process of its own: `denvd run` on a btrfs pool made for it here. */
interface ExtraHost {
  id: string;
  name: string;
  proc: ChildProcess;
  /** Its loop image, pool mount and state directory live under here. */
  dir: string;
  pool: string;
}

async function processHost(rig: Awaited<ReturnType<typeof openBenchRig>>, name: string): Promise<ExtraHost> {
  const dir = join("/var/lib/denv-test", `${rig.runId}-${name}`);
  const pool = join(dir, "pool");
  const stateDir = join(dir, "state");
  mkdirSync(pool, { recursive: true });
  mkdirSync(stateDir, { recursive: true });
  sh(
    `set -e; truncate -s 24G ${dir}/pool.img; mkfs.btrfs -q ${dir}/pool.img; mount -o loop,noatime ${dir}/pool.img ${pool}`,
  );
  const token = (await rig.api("POST", "/v1/hosts/join-token")).token as string;
  // Not execFileSync: the server answering the join runs in this process.
  await execFileAsync(process.execPath, [
    denvdBin,
    "join",
    ...["--server", rig.server.url, "--token", token, "--state-dir", stateDir, "--name", name],
    ...["--storage", "btrfs", "--btrfs-pool", pool],
  ]);
  const label = Object.entries(rig.labels).map(([k, v]) => `${k}=${v}`)[0] as string;
  const proc = spawn(process.execPath, [denvdBin, "run", "--state-dir", stateDir, "--label", label], {
    stdio: ["ignore", "ignore", "inherit"],
  });
  for (let i = 0; i < 600; i++) {
    const h = (
      (await rig.api("GET", "/v1/hosts")).hosts as { id: string; name: string; connected: boolean }[]
    ).find((x) => x.name === name);
    if (h?.connected) return { id: h.id, name, proc, dir, pool };
    if (proc.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  proc.kill("SIGKILL");
  throw new Error(`denvd ${name} did not connect`);
}

export async function fleetBench(quick: boolean): Promise<Record<string, Metric>> {
  const rig = await openBenchRig("fleet", { imageSizeBytes: 24 * 1024 ** 3 });
  const extras: ExtraHost[] = [];
  const results: Record<string, Metric> = {};
  try {
    const { api, server } = rig;
    // ops-world on the rig's host, before the others join: its versions are taken there.
    await api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
    await api("PUT", "/v1/projects/ops-world/source", {
      compose: readFileSync(join(root, "examples/ops-world/docker-compose.yaml"), "utf8"),
    });
    const d = await api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
    if (d.status !== "succeeded") throw new Error(`deploy: ${d.reason}`);
    const small = d.version_id as string;
    const hostA = (await api("GET", "/v1/hosts")).hosts[0].id as string;
    for (const name of ["fleet-b", "fleet-c"]) extras.push(await processHost(rig, name));
    const [b, c] = extras as [ExtraHost, ExtraHost];
    /** A replica taken back, so the next sample copies it again. */
    const unreplicate = async (host: ExtraHost, version: string) => {
      await server.denvd.stacks.deleteVersion(host.id, version);
      await server.store
        .deleteFrom("version_replicas")
        .where("version_id", "=", version)
        .where("host_id", "=", host.id)
        .execute();
    };

    // A version of about 1 GiB taken on fleet-b: a fork of ops-world there, with 1 GiB of
    // incompressible data written into its database's volume, snapshotted.
    log("fleet: writing 1 GiB into a fork's database volume on fleet-b");
    const ballast = (
      await api("POST", `/v1/versions/${small}/forks`, { count: 1, name: "ballast", host: b.name })
    ).forks[0].environment.id as string;
    await api("POST", `/v1/envs/${ballast}/exec`, {
      service: "db",
      user: "root",
      command: "dd if=/dev/urandom of=/var/lib/postgresql/data/ballast bs=1M count=1024 status=none",
      timeout_ms: 600_000,
    });
    await api("POST", `/v1/envs/${ballast}/snapshot`);
    const big = (await api("GET", `/v1/envs/${ballast}`)).current_version_id as string;
    const snapshots = Object.values((await server.denvd.stacks.describeVersion(b.id, big)).version.snapshots);
    const rounds = quick ? 2 : 4;
    const denvRate: number[] = [];
    const peerRate: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const t = performance.now();
      const r = await api("POST", `/v1/versions/${big}/replicas`, { host: c.name });
      const ms = performance.now() - t;
      denvRate.push(Math.round((r.bytes / MIB / (ms / 1000)) * 10) / 10);
      log(`fleet: replication ${Math.round(r.bytes / MIB)} MiB in ${Math.round(ms)} ms (${r.format})`);
      await unreplicate(c, big);
      // The peer: every volume's snapshot piped straight from pool to pool, all at once.
      const into = join(c.pool, `peer-${randomBytes(3).toString("hex")}`);
      const pipes = snapshots
        .map((s) => `btrfs -q send ${join(b.pool, "snapshots", s)} | btrfs -q receive ${into} &`)
        .join(" ");
      const p = performance.now();
      sh(`set -e; mkdir -p ${into}; ${pipes} wait`);
      const peerMs = performance.now() - p;
      peerRate.push(Math.round((r.bytes / MIB / (peerMs / 1000)) * 10) / 10);
      sh(`for s in ${into}/*; do btrfs -q subvolume delete "$s"; done; rmdir ${into}`);
    }
    results.replication_mib_per_s = metricOf(
      denvRate,
      "MiB/s",
      "a ~1 GiB ops-world version from one denvd process to another through the server (btrfs send/receive relayed, both ends digesting), until the API answers",
    );
    results.replication_peer_mib_per_s = metricOf(
      peerRate,
      "MiB/s",
      "btrfs send | btrfs receive piped directly between the same two pools",
    );

    // The first fork on a host without the version vs a cold fork on its holder (ops-world, ~66 MiB).
    const firstAway: number[] = [];
    const onHolder: number[] = [];
    const destroy = (id: string) => api("DELETE", `/v1/envs/${id}`);
    for (let i = 0; i < rounds; i++) {
      let t = performance.now();
      const away = await api("POST", `/v1/versions/${small}/forks`, {
        count: 1,
        name: `away-${i}`,
        host: c.name,
      });
      firstAway.push(Math.round(performance.now() - t));
      t = performance.now();
      const home = await api("POST", `/v1/versions/${small}/forks`, {
        count: 1,
        name: `home-${i}`,
        host: hostA,
      });
      onHolder.push(Math.round(performance.now() - t));
      await destroy(away.forks[0].environment.id);
      await destroy(home.forks[0].environment.id);
      await unreplicate(c, small);
    }
    results.first_fork_elsewhere_ms = metricOf(
      firstAway,
      "ms",
      "fork of ops-world on a host without the version: a replica made there, then the fork",
    );
    results.first_fork_holder_ms = metricOf(onHolder, "ms", "cold fork of ops-world on the host holding it");

    // N cold forks over three hosts (each holding the version) vs the same N on one.
    const n = quick ? 8 : 32;
    for (const h of extras) await api("POST", `/v1/versions/${small}/replicas`, { host: h.name });
    const spread: number[] = [];
    const one: number[] = [];
    for (let i = 0; i < (quick ? 1 : 2); i++) {
      for (const [label, body, into] of [
        ["one", { count: n, name_prefix: `one${i}`, host: hostA }, one],
        ["spread", { count: n, name_prefix: `spread${i}` }, spread],
      ] as const) {
        const t = performance.now();
        const r = await api("POST", `/v1/versions/${small}/forks`, body);
        const took = Math.round(performance.now() - t);
        if (r.created !== n)
          throw new Error(`${label}: ${r.created} of ${n} forks: ${JSON.stringify(r.forks)}`);
        into.push(took);
        log(`fleet: ${n} forks ${label === "one" ? "on one host" : "over three hosts"} in ${took} ms`);
        for (const f of r.forks) await destroy(f.environment.id);
      }
    }
    results[`fleet_${n}_forks_three_hosts_ms`] = metricOf(
      spread,
      "ms",
      `${n} cold ops-world forks in one fan-out, spread over three hosts holding the version (on this machine's shared cores)`,
    );
    results[`fleet_${n}_forks_one_host_ms`] = metricOf(one, "ms", `the same ${n} forks, all on one host`);
    return results;
  } finally {
    // Their environments first (through the server, while they are connected), then the hosts.
    const envs = (await rig.api("GET", "/v1/envs").catch(() => ({ environments: [] }))).environments ?? [];
    for (const e of envs as { id: string; host_id: string }[])
      if (extras.some((h) => h.id === e.host_id)) await rig.api("DELETE", `/v1/envs/${e.id}`).catch(() => {});
    for (const h of extras) {
      h.proc.kill("SIGTERM");
      await new Promise((r) => (h.proc.exitCode !== null ? r(null) : h.proc.once("exit", r)));
      try {
        sh(`umount ${h.pool} || umount -l ${h.pool}`);
      } catch {}
      rmSync(h.dir, { recursive: true, force: true });
    }
    await rig.close();
  }
}
