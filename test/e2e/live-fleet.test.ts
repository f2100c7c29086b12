/**
 * A live version on more than one host (issue 71): its process images travel with its volumes to
 * another host (relayed through the server, counted at both ends, checked there against the digests
 * the control plane recorded), and a fork placed on that host continues the parent's process from
 * its memory. A version taken on a CPU with a flag another host's CPU lacks is copied there
 * disk-only, saying why; a live fork there is refused naming the flag (a cold one runs), and no
 * host whose CPU lacks it restores those processes.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type Lab, type LabHost, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
const TICKER =
  't=$(cat /proc/sys/kernel/random/uuid); i=0; while :; do i=$((i+1)); echo "$t $i" > /srv/count.new; mv /srv/count.new /srv/count; sleep 0.1; done';
const COMPOSE = `x-denv: { kind: service }
services:
  ticker:
    image: ${OPSBOX}
    user: "1000:1000"
    command: ["sh", "-c", ${JSON.stringify(TICKER.replaceAll("/srv/", "/tmp/").replaceAll("$", "$$$$"))}]
`;

let lab: Lab;
let b: LabHost;
let c: LabHost;

async function token(env: string): Promise<string> {
  const r = await lab.api("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, {
    service: "ticker",
    command: ["cat", "/tmp/count"],
  });
  return r.status === 200 && r.data.exit_code === 0 ? (String(r.data.stdout).split(" ")[0] ?? "") : "";
}

const hostOf = async (env: string) =>
  (await lab.api("GET", `/v1/envs/${encodeURIComponent(env)}`)).data.host_id as string;

before(async () => {
  lab = await openLab();
  // Deployed while the lab's own host is the only one: alpha (and its versions) are there.
  await lab.api("POST", "/v1/projects", { name: "roam", kind: "service", source: "./roam" });
  const put = await lab.api("PUT", "/v1/projects/roam/source", { compose: COMPOSE });
  assert.equal(put.status, 200, JSON.stringify(put.data));
  const d = await lab.api("POST", "/v1/projects/roam/deploy?wait=true", { env: "alpha" });
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data));
  b = await lab.addHost({ name: "live-b" });
  c = await lab.addHost({ name: "live-c" });
});

after(async () => {
  await lab?.close();
});

async function liveVersion(): Promise<{ version: string; parent: string }> {
  const parent = await waitFor("the ticker's first tick", async () => {
    const t = await token("roam/alpha");
    return /^[0-9a-f-]{36}$/.test(t) ? t : null;
  });
  const snap = await lab.api("POST", "/v1/envs/roam%2Falpha/snapshot?wait=true", { live: true });
  assert.equal(snap.data.status, "succeeded", JSON.stringify(snap.data));
  const version = (await lab.api("GET", "/v1/envs/roam%2Falpha")).data.current_version_id as string;
  return { version, parent };
}

test("a live version copied to another host carries its processes: a fork there continues the parent's memory", async () => {
  const { version, parent } = await liveVersion();
  const copy = await lab.api("POST", `/v1/versions/${version}/replicas`, { host: "live-b" });
  assert.equal(copy.status, 201, JSON.stringify(copy.data));
  assert.deepEqual(copy.data.live, { held: ["ticker"], refused: null }, JSON.stringify(copy.data));
  const sent = copy.data.evidence.live.services.ticker;
  assert.ok(sent.bytes > 0 && /^[0-9a-f]{64}$/.test(sent.sha256), JSON.stringify(sent));
  // On host-b, root's alone, where its forks restore from.
  const images = join(b.host.stateDir, "live", version, "ticker");
  assert.ok(existsSync(images), images);
  assert.ok(b.host.denvd.versions().find((v) => v.id === version)?.live?.services.ticker?.digest);

  const on = await lab.api("POST", `/v1/versions/${version}/forks`, {
    count: 1,
    name: "on-b",
    host: "live-b",
  });
  assert.equal(on.data.created, 1, JSON.stringify(on.data));
  const fork = on.data.forks[0].environment.id as string;
  assert.equal(await hostOf(fork), b.hostId);
  await waitFor("the fork on host-b to tick", async () => (await token(fork)) !== "");
  assert.equal(await token(fork), parent, "the parent's process, restored on another host");
  await lab.api("DELETE", `/v1/envs/${fork}`);
});

test("a host whose CPU lacks a flag the processes were taken with keeps the copy disk-only; a live fork there is refused, a cold one runs", async () => {
  const { version } = await liveVersion();
  // As if the version had been taken on a CPU with one more flag than these machines have.
  const rec = lab.host.denvd.versions().find((v) => v.id === version);
  assert.ok(rec?.live?.cpuFlags?.length, "the version records its host's CPU flags");
  rec.live.cpuFlags.push("denv_test_only_flag");

  const copy = await lab.api("POST", `/v1/versions/${version}/replicas`, { host: "live-c" });
  assert.equal(copy.status, 201, JSON.stringify(copy.data));
  assert.deepEqual(copy.data.live.held, []);
  assert.match(copy.data.live.refused, /CPU lacks denv_test_only_flag/);
  assert.equal(existsSync(join(c.host.stateDir, "live", version)), false, "no process images kept there");
  assert.equal(existsSync(join(c.host.stateDir, "live-incoming", version)), false, "nor staged");

  const live = await lab.api("POST", `/v1/versions/${version}/forks`, {
    count: 1,
    name: "live-c",
    host: "live-c",
  });
  const why = JSON.stringify(live.data);
  assert.equal(live.data.created ?? 0, 0, why);
  assert.match(why, /holds version .* without its processes .*CPU lacks denv_test_only_flag/);
  const cold = await lab.api("POST", `/v1/versions/${version}/forks`, {
    count: 1,
    name: "cold-c",
    host: "live-c",
    cold: true,
  });
  assert.equal(cold.data.created, 1, JSON.stringify(cold.data));
  const coldFork = cold.data.forks[0].environment.id as string;
  assert.equal(await hostOf(coldFork), c.hostId);
  await waitFor("the cold fork to tick", async () => (await token(coldFork)) !== "");
  // The host that took it now has a CPU without that flag too: it refuses to restore them, naming it.
  const home = await lab.api("POST", `/v1/versions/${version}/forks`, {
    count: 1,
    name: "home",
    host: lab.hostId,
  });
  assert.match(JSON.stringify(home.data), /this host's CPU lacks denv_test_only_flag/);
  await lab.api("DELETE", `/v1/envs/${coldFork}`);
});
