/**
 * The fleet on fresh machines: three lab hosts, each its own Docker engine and its own btrfs pool
 * (a filesystem made for it on this machine and handed to it, as a disk is to a new machine), each
 * with denvd installed by the one-line installer and joined to one server. ops-world is deployed on
 * the first; 24 forks requested at once land on all three (the two without the version each take
 * one copy, relayed through the server), and every fork holds its 100,000 rows. Then the first
 * machine dies mid-episode: its environments become `lost`, never `running`, and new forks of the
 * version still come from the copies.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { type RunningServer, startServer } from "@denv/server";
import { bootFreshHost, type FreshHost, type Lab, openLab } from "../../harness/fresh-host.ts";
import { LOCAL_REGISTRY, repoRoot } from "../../harness/test-host.ts";

const ADMIN = `dk_fleet_${Date.now()}`;
const FORKS = 24;
let lab: Lab;
let server: RunningServer;
let dataDir: string;
let version: string;
const machines: { name: string; host: FreshHost; pool: string; id?: string }[] = [];

/** A btrfs filesystem on a loop image of this machine, for one lab host (its disk). */
function makePool(dir: string): void {
  mkdirSync(dir, { recursive: true });
  const image = `${dir}.img`;
  execFileSync("truncate", ["-s", "8G", image]);
  execFileSync("mkfs.btrfs", ["-q", image]);
  execFileSync("mount", ["-o", "loop,noatime", image, dir]);
}

async function api(method: string, path: string, body?: unknown) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(900_000),
  });
  return { status: res.status, data: (await res.json()) as any };
}

/** Installs denvd on a lab host with the installer's line, its pool handed in; answers its host id. */
async function install(m: (typeof machines)[number]): Promise<string> {
  const token = (await api("POST", "/v1/hosts/join-token")).data.token as string;
  const r = await m.host.sh(
    `curl -fsSL ${server.url}/install.sh | sh -s -- --token ${token} --server ${server.url} --name ${m.name} --btrfs-pool /srv/denv-pool`,
  );
  assert.equal(r.exitCode, 0, `${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /"storage":"btrfs"/);
  for (let i = 0; i < 300; i++) {
    const h = ((await api("GET", "/v1/hosts")).data.hosts as any[]).find((x) => x.name === m.name);
    if (h?.connected) {
      m.id = h.id as string;
      return m.id;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.fail(`${m.name} never connected`);
}

const rows = async (env: string) => {
  const r = await api("POST", `/v1/envs/${env}/exec`, {
    service: "opsbox",
    command: ["psql", "-tAc", "select count(*) from orders"],
  });
  assert.equal(r.data.exit_code, 0, JSON.stringify(r.data));
  return (r.data.stdout as string).trim();
};

before(async () => {
  lab = await openLab();
  dataDir = await mkdtemp(join(tmpdir(), "denv-fleet-lab-"));
  server = await startServer({
    dataDir,
    adminKey: ADMIN,
    host: lab.gateway,
    port: 0,
    downloadsDir: join(repoRoot, "dist"),
    fetchAllow: LOCAL_REGISTRY,
    hostWatch: { lostAfterMs: 3000, everyMs: 250 },
  });
  // The three machines boot at once; denvd goes on the first alone, so ops-world is taken there.
  await Promise.all(
    ["fleet-1", "fleet-2", "fleet-3"].map(async (name) => {
      const pool = join("/var/lib/denv-test", `${lab.runId}-${name}`);
      makePool(pool);
      const host = await bootFreshHost(lab, {
        name: `${lab.runId}-${name}`,
        binds: [`${pool}:/srv/denv-pool`],
      });
      machines.push({ name, host, pool });
    }),
  );
  machines.sort((a, b) => a.name.localeCompare(b.name));
  await install(machines[0] as (typeof machines)[number]);
  const compose = readFileSync(join(repoRoot, "examples/ops-world/docker-compose.yaml"), "utf8");
  await api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
  await api("PUT", "/v1/projects/ops-world/source", { compose });
  const d = (await api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" })).data;
  assert.equal(d.status, "succeeded", JSON.stringify(d.phases?.find((p: any) => p.status === "failed")));
  version = d.version_id as string;
  for (const m of machines.slice(1)) await install(m);
});

after(async () => {
  for (const e of (await api("GET", "/v1/envs").catch(() => ({ data: {} }))).data.environments ?? [])
    await api("DELETE", `/v1/envs/${e.id}`).catch(() => {});
  await server?.close();
  await lab?.close(); // the machines first: their engines hold the pools
  for (const m of machines) {
    try {
      execFileSync("umount", [m.pool]);
    } catch {
      execFileSync("umount", ["-l", m.pool], { stdio: "ignore" });
    }
    rmSync(m.pool, { recursive: true, force: true });
    rmSync(`${m.pool}.img`, { force: true });
  }
  await rm(dataDir, { recursive: true, force: true });
});

describe("the fleet on three fresh machines", { timeout: 1_800_000 }, () => {
  let forks: { id: string; host: string }[] = [];

  test(`${FORKS} forks requested at once land on all three machines, each with 100,000 rows`, async () => {
    const hosts = (await api("GET", "/v1/hosts")).data.hosts as any[];
    assert.deepEqual(hosts.map((h) => h.storage).sort(), ["btrfs", "btrfs", "btrfs"]);
    const [first, second, third] = machines.map((m) => m.id as string) as [string, string, string];
    assert.deepEqual(
      hosts.filter((h) => h.versions.includes(version)).map((h) => h.id),
      [first],
      "only the first machine holds the version before the fan-out",
    );
    const r = await api("POST", `/v1/versions/${version}/forks`, { count: FORKS, name_prefix: "wide" });
    assert.equal(r.status, 200, JSON.stringify(r.data));
    assert.deepEqual([r.data.created, r.data.failed], [FORKS, 0], JSON.stringify(r.data.forks));
    forks = await Promise.all(
      (r.data.forks as any[]).map(async (f) => {
        const id = f.environment.id as string;
        return { id, host: (await api("GET", `/v1/envs/${id}`)).data.host_id as string };
      }),
    );
    const per = new Map<string, number>();
    for (const f of forks) per.set(f.host, (per.get(f.host) ?? 0) + 1);
    if (per.size !== 3) {
      // What placement said: the place phase's evidence of each fork.
      const said = await Promise.all(
        forks.map(async (f) => {
          const dep = (await api("GET", `/v1/envs/${f.id}/deployments`)).data.deployments[0].id as string;
          return (await api("GET", `/v1/deployments/${dep}`)).data.phases.find((p: any) => p.name === "place")
            .evidence;
        }),
      );
      const logs = await Promise.all(
        machines.map(
          async (m) =>
            `${m.name}: ${(await m.host.sh("grep -i 'receive\\|error' /var/log/denvd.log | tail -8")).stdout}`,
        ),
      );
      assert.fail(
        `forks per host ${JSON.stringify([...per])}; placement: ${JSON.stringify(said)}; logs: ${logs.join("\n")}`,
      );
    }
    // Each machine ran its forks in its own engine.
    for (const m of machines) {
      const inside = await m.host.sh("docker ps --format '{{.Names}}' | grep -c opsbox");
      assert.equal(Number(inside.stdout.trim()) >= (per.get(m.id as string) ?? 0), true, inside.stdout);
    }
    // The two machines without the version each took one copy, as btrfs streams.
    const listed = (await api("GET", "/v1/versions")).data.versions.find((v: any) => v.id === version);
    assert.deepEqual([...listed.replicas].sort(), [second, third].sort());
    for (const f of forks) assert.equal(await rows(f.id), "100000", `fork ${f.id} on ${f.host}`);
  });

  test("the first machine dies mid-episode: its environments are lost, forks come from the copies", async () => {
    const [dead] = machines as [(typeof machines)[number]];
    const alpha = (await api("GET", `/v1/envs/${encodeURIComponent("ops-world/alpha")}`)).data.id as string;
    const onDead = [alpha, ...forks.filter((f) => f.host === dead.id).map((f) => f.id)];
    // Mid-episode: a fork on it is being written to when the machine goes.
    const writing = forks.find((f) => f.host === dead.id) as { id: string };
    const write = api("POST", `/v1/envs/${writing.id}/exec`, {
      service: "opsbox",
      command: ["psql", "-c", "create table scratch as select g from generate_series(1, 5000000) g"],
    }).catch((err) => err);
    await dead.host.container.kill();
    await write;
    for (const id of onDead) {
      let status = "";
      for (let i = 0; i < 600 && status !== "lost"; i++) {
        status = (await api("GET", `/v1/envs/${id}`)).data.status as string;
        if (status !== "lost") await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(status, "lost", id);
    }
    const r = await api("POST", `/v1/versions/${version}/forks`, { count: 2, name_prefix: "after" });
    assert.deepEqual([r.data.created, r.data.failed], [2, 0], JSON.stringify(r.data.forks));
    for (const f of r.data.forks as any[]) {
      const id = f.environment.id as string;
      assert.notEqual((await api("GET", `/v1/envs/${id}`)).data.host_id, dead.id);
      assert.equal(await rows(id), "100000");
    }
  });
});
