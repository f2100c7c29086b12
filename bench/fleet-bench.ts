/**
 * The fleet, each figure beside its peer in the same run: three hosts (each its own denvd and
 * btrfs pool, on this machine's one engine and its CPUs) joined to one server.
 *   replication of a ~1 GiB version host to host through the server (POST /v1/versions/{id}/replicas,
 *     until it answers) vs `btrfs send | btrfs receive` piped directly between the same two pools;
 *   the first fork on a host without the version (a replica made there, then the fork) vs a cold
 *     fork on the host that holds it, of ops-world;
 *   N cold ops-world forks spread over three hosts holding the version vs the same N on one host.
 * The three hosts share this machine's cores: the spread figure says what placement costs or saves
 * here, not what three machines would do.
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { BtrfsDriver, Denvd, DockerRuntime, defaultAgentBinary, joinServer, Sidecar } from "@denv/denvd";
import { log, openBenchRig } from "./bench-rig.ts";
import { type Metric, metricOf } from "./bench-stats.ts";

const MIB = 1024 ** 2;
/** A shell for the peer's pipes that reads no start-up file (a host's .bashrc is not the peer). */
const sh = (script: string) =>
  execFileSync("bash", ["--norc", "--noprofile", "-c", script], {
    env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", SHLVL: "1" },
  });
const root = join(import.meta.dirname, "..");

interface ExtraHost {
  id: string;
  name: string;
  denvd: Denvd;
  storage: BtrfsDriver;
  sidecar: Sidecar;
  stateDir: string;
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
    const alpha = (await api("GET", `/v1/envs/${encodeURIComponent("ops-world/alpha")}`)).id as string;
    const hostA = (await api("GET", "/v1/hosts")).hosts[0].id as string;
    for (const name of ["fleet-b", "fleet-c"]) {
      const stateDir = join("/var/lib/denv-test", `${rig.runId}-${name}`);
      const storage = new BtrfsDriver({ stateDir, imageSizeBytes: 24 * 1024 ** 3 });
      const denvd = await Denvd.open({
        stateDir,
        storage,
        runtime: new DockerRuntime(),
        extraLabels: rig.labels,
        minFreeBytes: 256 * MIB,
        agentBinary: defaultAgentBinary(),
      });
      const token = (await api("POST", "/v1/hosts/join-token")).token as string;
      const joined = await joinServer(server.url, token, name);
      const sidecar = new Sidecar({ serverUrl: server.url, secret: joined.secret, denvd });
      sidecar.start();
      await sidecar.ready;
      extras.push({ id: joined.host_id, name, denvd, storage, sidecar, stateDir });
    }
    const [b, c] = extras as [ExtraHost, ExtraHost];
    /** A replica taken back, so the next sample copies it again. */
    const unreplicate = async (host: ExtraHost, version: string) => {
      await host.denvd.deleteVersion(version);
      await server.store
        .deleteFrom("version_replicas")
        .where("version_id", "=", version)
        .where("host_id", "=", host.id)
        .execute();
    };

    // A version of about 1 GiB: ops-world with 1 GiB of incompressible data in its database's volume.
    log("fleet: writing 1 GiB into alpha's database volume");
    await api("POST", `/v1/envs/${alpha}/exec`, {
      service: "db",
      user: "root",
      command: "dd if=/dev/urandom of=/var/lib/postgresql/data/ballast bs=1M count=1024 status=none",
      timeout_ms: 600_000,
    });
    await api("POST", `/v1/envs/${alpha}/snapshot`);
    const big = (await api("GET", `/v1/envs/${alpha}`)).current_version_id as string;
    const snapshots = Object.values(
      (rig.denvd.versions().find((v) => v.id === big) as { snapshots: Record<string, string> }).snapshots,
    );
    const rounds = quick ? 2 : 4;
    const denvRate: number[] = [];
    const peerRate: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const t = performance.now();
      const r = await api("POST", `/v1/versions/${big}/replicas`, { host: b.name });
      const ms = performance.now() - t;
      denvRate.push(Math.round((r.bytes / MIB / (ms / 1000)) * 10) / 10);
      log(`fleet: replication ${Math.round(r.bytes / MIB)} MiB in ${Math.round(ms)} ms (${r.format})`);
      await unreplicate(b, big);
      // The peer: every volume's snapshot piped straight from pool to pool, all at once.
      const into = join(b.storage.poolPath, `peer-${randomBytes(3).toString("hex")}`);
      const pipes = snapshots
        .map(
          (s) =>
            `btrfs -q send ${join((rig.storage as BtrfsDriver).poolPath, "snapshots", s)} | btrfs -q receive ${into} &`,
        )
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
      "a ~1 GiB ops-world version host to host through the server (btrfs send/receive relayed, both ends digesting), until the API answers",
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
    for (const h of extras) {
      await h.sidecar.stop().catch(() => {});
      for (const s of h.denvd.stacks()) await h.denvd.destroy(s.id).catch(() => {});
      for (const v of h.denvd.versions()) await h.denvd.deleteVersion(v.id).catch(() => {});
      await h.denvd.close().catch(() => {});
      await h.storage.unmount().catch(() => {});
      rmSync(h.stateDir, { recursive: true, force: true });
    }
    await rig.close();
  }
}
