/**
 * The fleet on the real engine: three hosts, each its own denvd with its own btrfs pool, joined to
 * one server. ops-world is deployed on the first. Its version is replicated to a second host
 * (btrfs send/receive relayed through the server over the hosts' connections), then again,
 * incrementally, once it changed; with the first host gone, its environment is `lost` and forks of
 * the version still come from a replica; a replication cut mid-stream leaves no half-received
 * version and succeeds when tried again; drains, `x-denv.replicas`, deletes with a holder away.
 * A fan-out of 24 forks over three machines with their own engines is lab/fleet-hosts.test.ts.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { deployOpsWorld, type Lab, type LabHost, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

let lab: Lab;
let version: string;
/** ops-world's alpha, on the first host. */
let alpha: string;
/** host-b and host-c, joined by the harness (closed with the lab). */
const extras: LabHost[] = [];
type Extra = LabHost;

before(async () => {
  lab = await openLab({ hostWatch: { lostAfterMs: 1500, everyMs: 200 }, replicaKeeper: { everyMs: 300 } });
  version = await deployOpsWorld(lab);
  alpha = (await lab.api("GET", "/v1/envs/ops-world%2Falpha")).data.id as string;
  extras.push(await lab.addHost({ name: "host-b" }), await lab.addHost({ name: "host-c" }));
});

after(async () => {
  await lab?.close();
});

const psql = async (env: string, sql: string) => {
  const r = await lab.api("POST", `/v1/envs/${env}/exec`, {
    service: "opsbox",
    command: ["psql", "-tAc", sql],
  });
  assert.equal(r.data.exit_code, 0, JSON.stringify(r.data));
  return (r.data.stdout as string).trim();
};

async function statusBecomes(id: string, want: string): Promise<void> {
  await waitFor(
    `environment ${id} to become ${want}`,
    async () => (await lab.api("GET", `/v1/envs/${id}`)).data.status === want,
  );
}

const hostOf = async (env: string) => (await lab.api("GET", `/v1/envs/${env}`)).data.host_id as string;

test("a version replicated to another host, then incrementally; forks of it run there with the data", async () => {
  const [b] = extras as [Extra];
  const r = await lab.api("POST", `/v1/versions/${version}/replicas`, { host: "host-b" });
  assert.equal(r.status, 201, JSON.stringify(r.data));
  assert.equal(r.data.already, false);
  assert.equal(r.data.format, "btrfs-send");
  assert.equal(r.data.base_version_id, null);
  assert.ok(r.data.bytes > 1024 ** 2, `a full stream of ops-world moves its data: ${r.data.bytes} bytes`);
  // Its snapshots on host-b are committed, and recorded by host-b's denvd.
  assert.ok(b.host.denvd.versions().some((v) => v.id === version));
  assert.equal(
    (await lab.api("POST", `/v1/versions/${version}/replicas`, { host: "host-b" })).data.already,
    true,
  );
  const hosts = (await lab.api("GET", "/v1/hosts")).data.hosts as { name: string; versions: string[] }[];
  assert.ok(hosts.find((h) => h.name === "host-b")?.versions.includes(version));
  const listed = (await lab.api("GET", "/v1/versions")).data.versions.find(
    (v: { id: string }) => v.id === version,
  );
  assert.deepEqual(listed.replicas, [b.hostId]);

  // A change, a new version: only what changed travels (btrfs send -p on the version both hold).
  await psql(alpha, "delete from orders where id <= 5");
  const snap = await lab.api("POST", `/v1/envs/${alpha}/snapshot`);
  assert.equal(snap.status, 200, JSON.stringify(snap.data));
  const v2 = (await lab.api("GET", `/v1/envs/${alpha}`)).data.current_version_id as string;
  assert.notEqual(v2, version);
  const inc = await lab.api("POST", `/v1/versions/${v2}/replicas`, { host: "host-b" });
  assert.equal(inc.status, 201, JSON.stringify(inc.data));
  assert.equal(inc.data.base_version_id, version);
  assert.ok(inc.data.bytes < r.data.bytes / 2, `incremental ${inc.data.bytes} bytes, full ${r.data.bytes}`);

  // A fork asked for on host-b forks its replica there; one on host-c (which lacks the version)
  // waits for a replica to be made there first, and says so in its place phase.
  const onB = await lab.api("POST", `/v1/versions/${v2}/forks`, { count: 1, name: "on-b", host: "host-b" });
  assert.equal(onB.data.created, 1, JSON.stringify(onB.data));
  const bFork = onB.data.forks[0].environment.id as string;
  assert.equal(await hostOf(bFork), b.hostId);
  assert.equal(await psql(bFork, "select count(*) from orders"), "99995");
  const onC = await lab.api("POST", `/v1/versions/${v2}/forks`, { count: 1, name: "on-c", host: "host-c" });
  assert.equal(onC.data.created, 1, JSON.stringify(onC.data));
  const cFork = onC.data.forks[0].environment.id as string;
  assert.equal(await hostOf(cFork), (extras[1] as Extra).hostId);
  assert.equal(await psql(cFork, "select count(*) from orders"), "99995");
  const dep = (await lab.api("GET", `/v1/envs/${cFork}/deployments`)).data.deployments[0].id as string;
  const place = (await lab.api("GET", `/v1/deployments/${dep}`)).data.phases.find(
    (p: { name: string }) => p.name === "place",
  ).evidence;
  assert.equal(place.replication.from_host_id, lab.hostId, JSON.stringify(place));
  assert.ok(place.replication.bytes > 0);
  // A host that is not the team's: refused, nothing made.
  const nowhere = await lab.api("POST", `/v1/versions/${v2}/forks`, { count: 1, host: "host-zz" });
  assert.equal(nowhere.status, 404);
  for (const id of [bFork, cFork]) await lab.api("DELETE", `/v1/envs/${id}`);
});

test("the holder lost: its environment is lost, and forks of the version come from a replica", async () => {
  await lab.stopSidecar();
  try {
    await statusBecomes(alpha, "lost");
    const r = await lab.api("POST", "/v1/sandboxes", { from_version: version });
    assert.equal(r.status, 201, JSON.stringify(r.data));
    assert.notEqual(await hostOf(r.data.id), lab.hostId);
    assert.equal(await psql(r.data.id, "select count(*) from orders"), "100000");
    await lab.api("DELETE", `/v1/envs/${r.data.id}`);
  } finally {
    await lab.restartSidecar();
  }
});

/** The pids of `btrfs receive` commands writing into a pool. */
function receivers(pool: string): number[] {
  const out = execFileSync("ps", ["-eo", "pid=,args="], { encoding: "utf8" });
  return out
    .split("\n")
    .filter((l) => l.includes("btrfs") && l.includes("receive") && l.includes(pool))
    .map((l) => Number(l.trim().split(/\s+/)[0]));
}

test("a replication cut mid-stream leaves nothing half-received, and succeeds when tried again", async () => {
  const c = extras[1] as Extra;
  // A version of some size, that host-c does not hold.
  await psql(
    alpha,
    "create table ballast as select repeat(md5(g::text), 64) as x from generate_series(1, 60000) g",
  );
  await lab.api("POST", `/v1/envs/${alpha}/snapshot`);
  const v3 = (await lab.api("GET", `/v1/envs/${alpha}`)).data.current_version_id as string;
  const pool = c.host.storage.poolPath;
  const replicating = lab.api("POST", `/v1/versions/${v3}/replicas`, { host: "host-c" });
  // The receiving command is stopped mid-stream (flow control stalls the sender), the sending host
  // goes away, then the receiver is let go: what it got is a cut stream.
  const pids = await waitFor(
    "the receive to start on host-c",
    () => {
      const found = receivers(pool);
      return found.length > 0 ? found : undefined;
    },
    { intervalMs: 10 },
  );
  assert.ok(pids.length, "the receive started on host-c");
  const signal = (sig: NodeJS.Signals) => {
    for (const p of pids)
      try {
        process.kill(p, sig);
      } catch {} // gone already: the stop below still cuts what is left of the stream
  };
  signal("SIGSTOP");
  await lab.stopSidecar();
  signal("SIGCONT");
  const cut = await replicating;
  assert.notEqual(cut.status, 201, JSON.stringify(cut.data));
  assert.ok(!c.host.denvd.versions().some((v) => v.id === v3), "no version from a cut stream");
  await waitFor(
    "the cut stream's staging to be removed",
    () => readdirSync(join(pool, "receiving")).length === 0,
  );
  assert.deepEqual(readdirSync(join(pool, "receiving")), [], "nothing left staged");
  const listed = (await lab.api("GET", "/v1/versions")).data.versions.find(
    (v: { id: string }) => v.id === v3,
  );
  assert.deepEqual(listed.replicas, []);

  await lab.restartSidecar();
  const again = await lab.api("POST", `/v1/versions/${v3}/replicas`, { host: "host-c" });
  assert.equal(again.status, 201, JSON.stringify(again.data));
  assert.ok(c.host.denvd.versions().some((v) => v.id === v3));
  // And deleting the version removes every copy.
  const fork = await lab.api("POST", "/v1/sandboxes", { from_version: v3 });
  assert.equal(fork.status, 201, JSON.stringify(fork.data));
  assert.equal(await psql(fork.data.id, "select count(*) from ballast"), "60000");
});

const holdersOf = async (v: string) => {
  const listed = (await lab.api("GET", "/v1/versions")).data.versions.find((x: { id: string }) => x.id === v);
  return [listed.host_id, ...listed.replicas] as string[];
};

test("a drained host takes nothing new, and a version it held as one of too few copies is copied off", async () => {
  const [b, c] = extras as [Extra, Extra];
  // v: the fresh version of alpha, held by host-a alone; kept at 2 copies: one is made now.
  await lab.api("POST", `/v1/envs/${alpha}/snapshot`);
  const v = (await lab.api("GET", `/v1/envs/${alpha}`)).data.current_version_id as string;
  const kept = await lab.api("PUT", `/v1/versions/${v}/replicas`, { copies: 2 });
  assert.equal(kept.status, 200, JSON.stringify(kept.data));
  assert.equal(kept.data.holders.length, 2);
  const second = kept.data.holders[1] as string;
  const other = second === b.hostId ? c : b;
  const drained = await lab.api("POST", `/v1/hosts/${second}/drain`);
  assert.equal(drained.status, 200, JSON.stringify(drained.data));
  assert.deepEqual(
    drained.data.replicated
      .filter((r: { version_id: string }) => r.version_id === v)
      .map((r: any) => r.to_host_id),
    [other.hostId],
  );
  const hosts = (await lab.api("GET", "/v1/hosts")).data.hosts as { id: string; draining: boolean }[];
  assert.equal(hosts.find((h) => h.id === second)?.draining, true);
  // Nothing new lands there: a fan-out spreads over the others only.
  const fan = await lab.api("POST", `/v1/versions/${v}/forks`, { count: 4, name_prefix: "drained" });
  assert.equal(fan.data.created, 4, JSON.stringify(fan.data));
  const ids = fan.data.forks.map((f: { environment: { id: string } }) => f.environment.id) as string[];
  for (const id of ids) assert.notEqual(await hostOf(id), second);
  for (const id of ids) await lab.api("DELETE", `/v1/envs/${id}`);
  const undone = await lab.api("DELETE", `/v1/hosts/${second}/drain`);
  assert.equal(undone.data.draining, false);
});

test("x-denv.replicas: a deploy's version gets its copies, and gets one back when a holder is lost", async () => {
  const compose = readFileSync(
    join(import.meta.dirname, "../../examples/ops-world/docker-compose.yaml"),
    "utf8",
  );
  await lab.api("PUT", "/v1/projects/ops-world/source", {
    compose: compose.replace("  kind: rl-environment\n", "  kind: rl-environment\n  replicas: 2\n"),
  });
  const d = await lab.api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "beta" });
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data));
  const v = d.data.version_id as string;
  let holders = await waitFor("the keeper to make the second copy", async () => {
    const h = await holdersOf(v);
    return h.length >= 2 ? h : undefined;
  });
  assert.equal(holders.length, 2, "the keeper made the second copy");
  // The copy's host goes away for good (past the lost deadline): a third host takes a copy.
  const gone = holders[1] as string;
  const extra = extras.find((e) => e.hostId === gone);
  if (extra) await extra.disconnect();
  else await lab.stopSidecar();
  try {
    holders = await waitFor("a copy on the remaining host", async () => {
      const h = await holdersOf(v);
      return h.length >= 3 ? h : undefined;
    });
    assert.equal(holders.length, 3, "a copy was made on the remaining host");
    assert.ok(!holders.slice(2).includes(gone));
  } finally {
    if (extra) await extra.reconnect();
    else await lab.restartSidecar();
  }
});

test("a version deleted while a host holding a copy is away: the delete answers, and the copy goes when the host is back", async () => {
  const c = extras[1] as Extra;
  // The last test took alpha's host away and back: alpha is snapshotted once it runs again (on a
  // loaded machine the host's report can come after this test has begun).
  await statusBecomes(alpha, "running");
  const snapped = await lab.api("POST", `/v1/envs/${alpha}/snapshot`);
  assert.ok(snapped.status < 300, JSON.stringify(snapped.data));
  const old = (await lab.api("GET", `/v1/envs/${alpha}`)).data.current_version_id as string;
  // A newer one, so nothing uses the old one.
  const newer = await lab.api("POST", `/v1/envs/${alpha}/snapshot`);
  assert.ok(newer.status < 300, JSON.stringify(newer.data));
  const copied = await lab.api("POST", `/v1/versions/${old}/replicas`, { host: "host-c" });
  assert.equal(copied.status, 201, JSON.stringify(copied.data));
  assert.ok(c.host.denvd.versions().some((v) => v.id === old));
  await c.disconnect();
  try {
    await waitFor("host-c to be seen away", async () => {
      const h = (await lab.api("GET", "/v1/hosts")).data.hosts.find((x: { id: string }) => x.id === c.hostId);
      return !h.connected;
    });
    const del = await lab.api("DELETE", `/v1/versions/${old}`);
    assert.equal(del.status, 200, JSON.stringify(del.data));
    assert.deepEqual(del.data.left_on, [c.hostId]);
    assert.equal(
      (await lab.api("GET", "/v1/versions")).data.versions.filter((v: any) => v.id === old).length,
      0,
    );
    assert.ok(
      c.host.denvd.versions().some((v) => v.id === old),
      "the host away still holds its copy",
    );
  } finally {
    await c.reconnect();
  }
  await waitFor(
    "the copy's delete once host-c is back",
    () => !c.host.denvd.versions().some((v) => v.id === old),
  );
  assert.ok(
    !c.host.denvd.versions().some((v) => v.id === old),
    "the copy was deleted once the host was back",
  );
  // The record goes when the host's answer to the delete arrives, a moment after the copy itself.
  const records = () =>
    lab.server.store.selectFrom("version_replicas").selectAll().where("version_id", "=", old).execute();
  await waitFor("the replica's record to go", async () => (await records()).length === 0);
  assert.deepEqual(await records(), [], "and its record with it");
});
