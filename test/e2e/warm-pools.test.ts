/**
 * Warm pools on the real engine: ready forks of an ops-world version kept aside, handed over by a
 * create of that version and refilled behind it; what the user gets is the same as a cold fork
 * (data, files, processes, its own isolated network); an empty pool forks cold; x-denv.pool
 * declares one; draining removes every member; a pool too large for the host is refused.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { deployOpsWorld, type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

const run = promisify(execFile);
let lab: Lab;
let version: string;

before(async () => {
  lab = await openLab({ pools: { intervalMs: 500 } });
  version = await deployOpsWorld(lab);
});

after(async () => {
  await lab?.close();
});

async function waitPool(versionId: string, ready: number) {
  return waitFor(
    `the pool to have ${ready} ready`,
    async () => {
      const p = await lab.api("GET", `/v1/pools/${versionId}`);
      // A pool x-denv declares is made just after its deploy's verdict.
      if (p.status !== 404) assert.equal(p.status, 200, JSON.stringify(p.data));
      return p.status === 200 && p.data.ready === ready && p.data.warming === 0 ? p.data : undefined;
    },
    { intervalMs: 300 },
  );
}

const exec = async (env: string, service: string, command: string[]) => {
  const r = await lab.api("POST", `/v1/envs/${env}/exec`, { service, command });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  assert.equal(r.data.exit_code, 0, r.data.stderr);
  return (r.data.stdout as string).trim();
};

/** The containers of the stack a fork deployment made, by service, as the engine reports them. */
async function containersOf(
  deploymentId: string,
): Promise<Record<string, { id: string; networks: Record<string, string> }>> {
  const d = (await lab.api("GET", `/v1/deployments/${deploymentId}`)).data;
  const stackId = d.phases.find((p: { name: string }) => p.name === "fork").evidence.stack_id as string;
  assert.match(stackId, /^stk_/);
  const listed = await run("docker", ["ps", "-q", "--filter", `label=dev.denv.environment=${stackId}`]);
  const ids = listed.stdout.trim().split("\n");
  const out: Record<string, { id: string; networks: Record<string, string> }> = {};
  for (const id of ids) {
    const [info] = JSON.parse((await run("docker", ["inspect", id])).stdout);
    const nets = info.NetworkSettings.Networks as Record<string, { IPAddress: string }>;
    out[info.Config.Labels["dev.denv.service"]] = {
      id,
      networks: Object.fromEntries(Object.entries(nets).map(([n, v]) => [n, v.IPAddress])),
    };
  }
  return out;
}

/** What a user can see of an environment from inside: data, files, processes. */
async function fingerprint(env: string) {
  const data = await exec(env, "opsbox", [
    "psql",
    "-tAc",
    "select count(*), md5(string_agg(id::text || ':' || status || ':' || total_cents, ',' order by id)) from orders",
  ]);
  const files = await exec(env, "opsbox", [
    "bash",
    "-c",
    "cd /home/ubuntu && find . -printf '%p %s %m\\n' | sort",
  ]);
  // The processes each service runs, without the ones this exec itself starts.
  const processes: Record<string, string> = {};
  for (const svc of ["db", "queue", "opsbox"])
    processes[svc] = await exec(env, svc, [
      "bash",
      "-c",
      // From /proc (not every image has ps): owner and command line of each process, without
      // this script's own (its text names /proc; tr, stat, sort and grep are its helpers).
      "for d in /proc/[0-9]*; do c=$(tr '\\0' ' ' < $d/cmdline 2>/dev/null) && [ -n \"$c\" ] && echo \"$(stat -c %U $d) $c\"; done | grep -v -e '/proc/' -e ' tr ' -e ' stat ' -e ' sort' -e ' grep ' | sort",
    ]);
  return { data, files, processes };
}

test("a pool member and a cold fork of the same version are the same to their user", async () => {
  const cold = await lab.api("POST", "/v1/sandboxes", { from_version: version, name: "cold" });
  assert.equal(cold.status, 201, JSON.stringify(cold.data));

  const set = await lab.api("PUT", `/v1/pools/${version}`, { size: 2 });
  assert.equal(set.status, 200, JSON.stringify(set.data));
  await waitPool(version, 2);
  const listed = (await lab.api("GET", "/v1/envs")).data.environments.length;

  const warm = await lab.api("POST", "/v1/sandboxes", { from_version: version, name: "warm" });
  assert.equal(warm.status, 201, JSON.stringify(warm.data));
  const pool = (await lab.api("GET", `/v1/pools/${version}`)).data;
  assert.deepEqual([pool.hits, pool.misses], [1, 0], "the create was served from the pool");
  // The members were never the team's to see; the one taken is now, under its new name.
  const envs = (await lab.api("GET", "/v1/envs")).data.environments as { name: string }[];
  assert.equal(envs.length, listed + 1);
  assert.ok(envs.some((e) => e.name === "warm"));
  assert.ok(!envs.some((e) => e.name.startsWith("pool-")), "no pool member is listed");

  const [c, w] = [cold.data, warm.data];
  assert.equal(w.parent_version_id, version);
  assert.equal(w.status, "running");
  assert.equal(w.sandbox, c.sandbox);
  // Its record is a fork's: one fork deployment, succeeded, nothing else done to it.
  const deps = (await lab.api("GET", `/v1/envs/${w.id}/deployments`)).data.deployments;
  assert.deepEqual(
    deps.map((d: { kind: string; status: string }) => [d.kind, d.status]),
    [["fork", "succeeded"]],
  );

  // Data, files and processes: the same.
  let a = await fingerprint(c.id);
  let b = await fingerprint(w.id);
  if (JSON.stringify(a.processes) !== JSON.stringify(b.processes)) {
    // A health check caught mid-run on one side: look again.
    a = await fingerprint(c.id);
    b = await fingerprint(w.id);
  }
  assert.match(a.data, /^100000\|[0-9a-f]{32}$/);
  assert.match(a.processes.db ?? "", /postgres/);
  assert.match(a.processes.queue ?? "", /redis-server/);
  assert.match(a.processes.opsbox ?? "", /sleep infinity/);
  assert.match(a.files, /\.\/\.bashrc|\. \d+ \d+/);
  assert.deepEqual(b, a);

  // Network: each on networks of its own, neither reaching the other's database.
  const cc = await containersOf(c.deployment_id);
  const wc = await containersOf(w.deployment_id);
  const cNets = new Set(Object.values(cc).flatMap((x) => Object.keys(x.networks)));
  const wNets = new Set(Object.values(wc).flatMap((x) => Object.keys(x.networks)));
  assert.ok(wNets.size > 0);
  for (const n of wNets) assert.ok(!cNets.has(n), `network ${n} is shared`);
  const coldDb = Object.values(cc.db?.networks ?? {})[0] as string;
  const reach = await lab.api("POST", `/v1/envs/${w.id}/exec`, {
    service: "opsbox",
    command: [
      "bash",
      "-c",
      `timeout 2 bash -c 'exec 3<>/dev/tcp/${coldDb}/5432' && echo reached || echo blocked`,
    ],
  });
  assert.equal(reach.data.stdout.trim(), "blocked");
  // Egress: the member's fork proved it blocked, as the cold fork's did.
  const forkPhase = (d: { phases: { name: string; evidence: { egress?: { result: string } } }[] }) =>
    d.phases.find((p) => p.name === "fork")?.evidence.egress?.result;
  const coldDeploy = (await lab.api("GET", `/v1/deployments/${c.deployment_id}`)).data;
  const warmDeploy = (await lab.api("GET", `/v1/deployments/${w.deployment_id}`)).data;
  assert.equal(forkPhase(coldDeploy), "blocked");
  assert.equal(forkPhase(warmDeploy), "blocked");

  // Writes in the member are its own.
  await exec(w.id, "opsbox", ["psql", "-tAc", "delete from orders where id <= 5"]);
  assert.equal(await exec(c.id, "opsbox", ["psql", "-tAc", "select count(*) from orders"]), "100000");

  // The pool refills behind the take.
  const refilled = await waitPool(version, 2);
  assert.equal(refilled.size, 2);
});

test("fan-out takes from the pool first, then forks cold; every fork is reported", async () => {
  await waitPool(version, 2);
  const r = await lab.api("POST", `/v1/versions/${version}/forks`, { count: 3, name_prefix: "fan" });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  assert.deepEqual([r.data.created, r.data.failed], [3, 0]);
  const p = (await lab.api("GET", `/v1/pools/${version}`)).data;
  // Two from the pool (the first test took one), and at least one cold.
  assert.equal(p.hits, 3, JSON.stringify(p));
  assert.ok(p.misses >= 1, JSON.stringify(p));
  for (const f of r.data.forks)
    assert.equal(
      await exec(f.environment.id, "opsbox", ["psql", "-tAc", "select count(*) from orders"]),
      "100000",
    );
});

test("a pool too large for the host, or of a size that is not one, is refused and nothing is made", async () => {
  const before = (await lab.api("GET", `/v1/pools/${version}`)).data;
  const huge = await lab.api("PUT", `/v1/pools/${version}`, { size: 256 });
  assert.equal(huge.status, 503, JSON.stringify(huge.data));
  assert.equal(huge.data.error.code, "capacity");
  assert.match(huge.data.error.message, /pool of 256/);
  for (const size of [-1, 1.5, 257, "8"]) {
    const bad = await lab.api("PUT", `/v1/pools/${version}`, { size });
    assert.equal(bad.status, 400, JSON.stringify(bad.data));
    assert.equal(bad.data.error.code, "invalid_argument");
  }
  assert.equal((await lab.api("GET", `/v1/pools/${version}`)).data.size, before.size);
  // Another team cannot see, set or drain it.
  assert.equal((await lab.api("GET", `/v1/pools/${version}`, undefined, lab.keyB)).status, 404);
  assert.equal((await lab.api("PUT", `/v1/pools/${version}`, { size: 1 }, lab.keyB)).status, 404);
  assert.equal((await lab.api("DELETE", `/v1/pools/${version}`, undefined, lab.keyB)).status, 404);
  assert.deepEqual((await lab.api("GET", "/v1/pools", undefined, lab.keyB)).data.pools, []);
});

test("shrinking a pool destroys the members past its size; draining it destroys the rest; an empty pool's version still forks, cold", async () => {
  await waitPool(version, 2);
  const containers = async () =>
    (await run("docker", ["ps", "-q", "--filter", `label=dev.denv.test=${lab.host.runId}`])).stdout
      .trim()
      .split("\n").length;
  const beforeShrink = await containers();
  const shrunk = await lab.api("PUT", `/v1/pools/${version}`, { size: 1 });
  assert.equal(shrunk.status, 200, JSON.stringify(shrunk.data));
  assert.equal(shrunk.data.size, 1);
  await waitPool(version, 1);
  // One ops-world member (three containers) gone; none of the team's environments touched.
  assert.equal(beforeShrink - (await containers()), 3);
  const stacksBefore = (
    await run("docker", ["ps", "-q", "--filter", `label=dev.denv.test=${lab.host.runId}`])
  ).stdout
    .trim()
    .split("\n");
  const d = await lab.api("DELETE", `/v1/pools/${version}`);
  assert.equal(d.status, 200, JSON.stringify(d.data));
  assert.equal(d.data.drained, 1);
  const stacksAfter = (
    await run("docker", ["ps", "-q", "--filter", `label=dev.denv.test=${lab.host.runId}`])
  ).stdout
    .trim()
    .split("\n");
  // Three containers per ops-world member.
  assert.equal(stacksBefore.length - stacksAfter.length, 3);
  assert.equal((await lab.api("GET", `/v1/pools/${version}`)).status, 404);
  const f = await lab.api("POST", "/v1/sandboxes", { from_version: version, name: "after-drain" });
  assert.equal(f.status, 201, JSON.stringify(f.data));
});

test("x-denv.pool declares a pool for the latest version; a new version takes it over", async () => {
  const compose = (n: number, note: string) =>
    `x-denv: { kind: agent, pool: { size: ${n}, environment: main } }\nservices:\n  box:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    user: "1000"\n    command: ["sleep", "infinity"]\n    environment: { NOTE: ${note} }\n`;
  await lab.api("POST", "/v1/projects", { name: "pooled", kind: "agent", source: "./pooled" });
  await lab.api("PUT", "/v1/projects/pooled/source", { compose: compose(1, "one") });
  const d1 = await lab.api("POST", "/v1/projects/pooled/deploy?wait=true", { env: "main" });
  assert.equal(d1.data.status, "succeeded", d1.data.reason);
  const p1 = await waitPool(d1.data.version_id, 1);
  assert.equal(p1.source, "x-denv");
  await lab.api("PUT", "/v1/projects/pooled/source", { compose: compose(2, "two") });
  const d2 = await lab.api("POST", "/v1/projects/pooled/deploy?wait=true", { env: "main" });
  assert.equal(d2.data.status, "succeeded", d2.data.reason);
  await waitPool(d2.data.version_id, 2);
  // The first version's declared pool is drained.
  await waitFor(
    "the old version's pool to be drained",
    async () => (await lab.api("GET", `/v1/pools/${d1.data.version_id}`)).status === 404,
    { intervalMs: 300 },
  );
  const pools = (await lab.api("GET", "/v1/pools")).data.pools as { version_id: string }[];
  assert.ok(!pools.some((p) => p.version_id === d1.data.version_id));
  // A fork of the environment comes from the new pool.
  const f = await lab.api("POST", `/v1/envs/${encodeURIComponent("pooled/main")}/fork`, { name: "taken" });
  assert.equal(f.status, 201, JSON.stringify(f.data));
  assert.equal((await lab.api("GET", `/v1/pools/${d2.data.version_id}`)).data.hits, 1);
  assert.equal(await exec(f.data.id, "box", ["printenv", "NOTE"]), "two");
});

test("a pool of image sandboxes: a create with the same settings takes one; other settings do not", async () => {
  const settings = {
    image: "127.0.0.1:5000/denv/opsbox:bookworm",
    cmd: ["sleep", "infinity"],
    user: "1000",
    env: { B: "2", A: "1" },
  };
  const cold = await lab.api("POST", "/v1/sandboxes", { ...settings, name: "img-cold" });
  assert.equal(cold.status, 201, JSON.stringify(cold.data));
  const set = await lab.api("PUT", "/v1/pools", { size: 1, ...settings });
  assert.equal(set.status, 200, JSON.stringify(set.data));
  assert.match(set.data.image_key, /^[0-9a-f]{64}$/);
  const version = set.data.version_id as string;
  await waitPool(version, 1);
  // The first sandbox the pool was made from is gone; only its version stays.
  const names = ((await lab.api("GET", "/v1/envs")).data.environments as { name: string }[]).map(
    (e) => e.name,
  );
  assert.ok(!names.some((n) => n.startsWith("pool-")), names.join(" "));

  // The same settings, env in another order: taken from the pool.
  const warm = await lab.api("POST", "/v1/sandboxes", {
    ...settings,
    env: { A: "1", B: "2" },
    name: "img-warm",
  });
  assert.equal(warm.status, 201, JSON.stringify(warm.data));
  assert.equal((await lab.api("GET", `/v1/pools/${version}`)).data.hits, 1);
  for (const id of [cold.data.id, warm.data.id]) {
    assert.equal(await exec(id, "main", ["id", "-u"]), "1000");
    assert.equal(await exec(id, "main", ["bash", "-c", "echo $A$B"]), "12");
    assert.equal(await exec(id, "main", ["bash", "-c", "ls -A /work | wc -l"]), "0");
  }
  const procs = async (id: string) =>
    exec(id, "main", [
      "bash",
      "-c",
      // Processes whose whole command line is the service's command (this script's own and its
      // subshells', whose command lines also name it, are not).
      "n=0; for d in /proc/[0-9]*; do [ \"$(tr '\\0' ' ' < $d/cmdline 2>/dev/null)\" = 'sleep infinity ' ] && n=$((n+1)); done; echo $n",
    ]);
  assert.equal(await procs(cold.data.id), "1");
  assert.equal(await procs(warm.data.id), "1");

  // Other settings are another sandbox: made cold, the pool untouched.
  const other = await lab.api("POST", "/v1/sandboxes", { ...settings, env: { A: "9" }, name: "img-other" });
  assert.equal(other.status, 201, JSON.stringify(other.data));
  assert.equal(await exec(other.data.id, "main", ["printenv", "A"]), "9");
  const after = (await lab.api("GET", `/v1/pools/${version}`)).data;
  assert.deepEqual([after.hits, after.misses], [1, 0]);

  // Size 0 drains it; draining it again is not_found.
  const drained = await lab.api("PUT", "/v1/pools", { size: 0, ...settings });
  assert.equal(drained.status, 200, JSON.stringify(drained.data));
  assert.deepEqual([drained.data.size, drained.data.ready], [0, 0]);
  assert.equal((await lab.api("GET", `/v1/pools/${version}`)).status, 404);
  assert.equal((await lab.api("PUT", "/v1/pools", { size: 0, ...settings })).status, 404);
  // A hostile or malformed pool request is refused whole.
  for (const bad of [
    { size: 1 },
    { size: 1, image: "" },
    { size: 1, image: "x", name: "n" },
    { size: 300, image: "x" },
  ]) {
    const r = await lab.api("PUT", "/v1/pools", bad);
    assert.equal(r.status, 400, JSON.stringify(r.data));
  }
});

test("denv pool set | show | rm, by environment or version", async () => {
  const denv = (...args: string[]) =>
    run(process.execPath, [join(import.meta.dirname, "../../packages/cli/bin/denv.js"), ...args], {
      encoding: "utf8",
      env: { ...process.env, DENV_SERVER: lab.server.url, DENV_API_KEY: lab.keyA, DENV_NO_STDIN: "1" },
    });
  const set = await denv("pool", "set", "ops-world/alpha", "--size", "1");
  assert.match(set.stdout, new RegExp(`pool of ${version}: 1 kept`));
  await waitPool(version, 1);
  const show = await denv("pool", "show");
  assert.match(show.stdout, /^VERSION {2,}SIZE {2}READY/);
  assert.match(show.stdout, new RegExp(`${version} {2,}1 {4,}1 {5,}0 {2,}`));
  const one = JSON.parse((await denv("pool", "show", version, "--json")).stdout);
  assert.equal(one.version_id, version);
  // The host holding the version shows it, and its pool with the member ready, to its team only.
  const hosts = await denv("host", "list");
  assert.match(hosts.stdout, / {2}ENVS {2,}VERSIONS {2,}POOLS\n/);
  // (The VERSIONS column shows the newest three: this file's other tests made later ones.)
  assert.match(hosts.stdout, new RegExp(` {2}\\d+ {2,}ver_.*? {2,}(.*,)?${version} 1/1(,.*)?\\n`));
  const listed = JSON.parse((await denv("host", "list", "--json")).stdout).hosts[0];
  assert.ok(listed.versions.includes(version), JSON.stringify(listed));
  assert.deepEqual(
    listed.pools.find((p: { version_id: string }) => p.version_id === version),
    { version_id: version, size: 1, ready: 1 },
    JSON.stringify(listed.pools),
  );
  const theirs = await lab.api("GET", "/v1/hosts", undefined, lab.keyB);
  assert.ok(!JSON.stringify(theirs.data).includes(version), "another team's host list has none of it");
  await assert.rejects(
    denv("pool", "set", "ops-world/alpha", "--size", "many"),
    (err: { code: number; stderr: string }) => {
      assert.equal(err.code, 2);
      assert.match(err.stderr, /--size many must be a whole number from 0 to 256/);
      return true;
    },
  );
  const rm = await denv("pool", "rm", "ops-world/alpha");
  assert.match(rm.stdout, /drained the pool of .* \(1 ready forks destroyed\)/);
  await assert.rejects(denv("pool", "show", version), (err: { code: number; stderr: string }) => {
    assert.match(err.stderr, /not_found|no warm pool/);
    return true;
  });
});
