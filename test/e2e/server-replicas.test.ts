/**
 * Two `denv server` replicas on one PostgreSQL cluster, as processes, and a denvd dialing them in
 * turn: a host connected to one replica is driven through the other (deploy, exec with its
 * streams, a file tar, a deployment's event stream); a replica SIGKILLed mid-deploy and one
 * SIGKILLed mid-fan-out have their deployments taken over by the other once their leases lapse,
 * every one ends succeeded or rolled back, and nothing of a rolled-back one is left on the host.
 */
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { LABEL } from "@denv/denvd";
import { removeLabelled } from "../harness/engine.ts";
import { freePort } from "../harness/net.ts";
import { startPostgresCluster } from "../harness/postgres.ts";
import { openTestHost, readHostState } from "../harness/test-host.ts";
import { denvBin, denvdBin, kill, opsWorldCompose, startProcess, until } from "./process-world.ts";

const runId = `rp-${randomBytes(4).toString("hex")}`;
const adminKey = `dk_${runId}`;
const secretKey = randomBytes(32).toString("base64");
const stateDir = join("/var/lib/denv-test", runId);
let pg: { url: string; stop: () => void };
let denvd: ChildProcess | null = null;

interface Replica {
  name: string;
  url: string;
  dataDir: string;
  proc: ChildProcess | null;
}
const replicas: Replica[] = [];

async function startReplica(r: Replica): Promise<void> {
  const port = new URL(r.url).port;
  r.proc = await startProcess(
    denvBin,
    [
      "server",
      ...["--data-dir", r.dataDir, "--port", port, "--ports-port", "0"],
      ...["--database-url", pg.url, "--allow-fetch", "127.0.0.1:5000"],
      // Short leases: a dead replica's deployments are taken over seconds after it stops.
      ...["--lease-s", "3", "--host-wait-s", "60"],
    ],
    { DENV_ADMIN_KEY: adminKey, DENV_SECRET_KEY: secretKey },
  );
}

async function api(r: Replica, method: string, path: string, body?: unknown) {
  const res = await fetch(`${r.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${adminKey}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(10 * 60_000),
  });
  const text = await res.text();
  let data: any = text;
  try {
    data = JSON.parse(text);
  } catch {}
  return { status: res.status, data, text };
}

const hostState = () => readHostState(stateDir);

before(async () => {
  pg = await startPostgresCluster();
  for (const name of ["a", "b"]) {
    const port = await freePort();
    replicas.push({
      name,
      url: `http://127.0.0.1:${port}`,
      dataDir: await mkdtemp(join(tmpdir(), `denv-${name}-`)),
      proc: null,
    });
  }
  // One after the other: the first creates the admin team, the second finds it.
  for (const r of replicas) await startReplica(r);
  const [a, b] = replicas as [Replica, Replica];
  const token = (await api(a, "POST", "/v1/hosts/join-token")).data.token;
  const joined = spawnSync(
    process.execPath,
    [
      denvdBin,
      "join",
      "--server",
      `${a.url},${b.url}`,
      "--token",
      token,
      "--state-dir",
      stateDir,
      "--name",
      runId,
    ],
    { encoding: "utf8" },
  );
  assert.equal(joined.status, 0, joined.stderr);
  denvd = await startProcess(denvdBin, ["run", "--state-dir", stateDir, "--label", `dev.denv.test=${runId}`]);
  await api(a, "POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
  await api(a, "PUT", "/v1/projects/ops-world/source", { compose: opsWorldCompose });
});

after(async () => {
  for (const r of replicas) await kill(r.proc);
  await kill(denvd);
  if (existsSync(join(stateDir, "state.json"))) {
    const h = await openTestHost({ stateDir, runId });
    await h.close();
    await removeLabelled(h.docker, { "dev.denv.test": runId });
  }
  for (const r of replicas) await rm(r.dataDir, { recursive: true, force: true });
  pg?.stop();
});

/** The replica holding the host's connection (denvd's status.json names it), and the other one. */
async function roles(): Promise<{ holding: Replica; other: Replica }> {
  const [a, b] = replicas as [Replica, Replica];
  const holding = await until("the host to be connected to a live replica", async () => {
    const url = JSON.parse(readFileSync(join(stateDir, "status.json"), "utf8")).server as string;
    const r = replicas.find((x) => x.url === url && x.proc?.exitCode === null && x.proc.signalCode === null);
    if (!r) return undefined;
    const h = (await api(r, "GET", "/v1/hosts")).data.hosts?.[0];
    return h?.connected ? r : undefined;
  });
  return { holding, other: holding === a ? b : a };
}

/** What the host holds now: its stacks' names. */
function stackNames(): string[] {
  return Object.values<any>(hostState().stacks)
    .map((s) => s.name as string)
    .sort();
}

function containersOf(stackId: string): number {
  const ps = spawnSync("docker", ["ps", "-aq", "--filter", `label=${LABEL.stack}=${stackId}`], {
    encoding: "utf8",
  });
  return ps.stdout.split("\n").filter(Boolean).length;
}

test("a host connected to one replica is driven through the other: deploy, exec's streams, files, events", async () => {
  const { holding, other } = await roles();
  // The other replica reads where hosts are from the store (within a second).
  await until("the other replica to report the host connected", async () =>
    (await api(other, "GET", "/v1/hosts")).data.hosts?.[0]?.connected ? true : undefined,
  );
  const dep = await api(other, "POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
  assert.equal(dep.data.status, "succeeded", dep.data.reason);
  const count = await api(other, "POST", "/v1/envs/alpha/exec", {
    service: "opsbox",
    command: ["psql", "-tAc", "select count(*) from orders"],
  });
  assert.equal(count.data.exit_code, 0, count.data.stderr);
  assert.equal(count.data.stdout.trim(), "100000");
  // stdin travels the other way through the link.
  const echoed = await api(other, "POST", "/v1/envs/alpha/exec", {
    service: "opsbox",
    command: "cat > /home/ubuntu/answer.txt && wc -c < /home/ubuntu/answer.txt",
    stdin: Buffer.from("through the other replica\n").toString("base64"),
  });
  assert.equal(echoed.data.stdout.trim(), "26", echoed.data.stderr);
  const tar = await fetch(`${other.url}/v1/envs/alpha/files?service=opsbox&path=/home/ubuntu/answer.txt`, {
    headers: { authorization: `Bearer ${adminKey}` },
  });
  assert.equal(tar.status, 200);
  assert.match(Buffer.from(await tar.arrayBuffer()).toString("latin1"), /through the other replica/);
  // A port URL minted and served by the replica that does not hold the host: the tunnel crosses the link.
  const sb = await api(other, "POST", "/v1/sandboxes", { image: "127.0.0.1:5000/denv/openenv-echo:0.1" });
  assert.equal(sb.status, 201, sb.text);
  const minted = await api(other, "POST", `/v1/envs/${sb.data.id}/ports/8000`, {});
  assert.equal(minted.status, 201, minted.text);
  const health = await until("the sandbox's port to answer through its URL", async () => {
    const r = await fetch(`${minted.data.url}/health`).catch(() => null);
    return r?.status === 200 ? r.text() : undefined;
  });
  assert.ok(health.length > 0);
  assert.equal((await api(other, "DELETE", `/v1/envs/${sb.data.id}`)).status, 200);
  // A deployment run by the holding replica, followed live through the other.
  const fork = await api(holding, "POST", "/v1/projects/ops-world/deploy", { env: "gamma" });
  assert.equal(fork.status, 202, fork.text);
  const events = await fetch(`${other.url}/v1/deployments/${fork.data.id}/events`, {
    headers: { authorization: `Bearer ${adminKey}` },
  });
  const text = await events.text();
  const last = JSON.parse(
    text
      .trim()
      .split("\n")
      .filter((l) => l.startsWith("data:"))
      .at(-1)
      ?.slice(5) ?? "{}",
  );
  assert.equal(last.status, "succeeded", last.reason);
  assert.ok(text.split("event: deployment").length > 3, "several updates were streamed");
});

test("the replica running a deploy and holding its host is SIGKILLed: the other takes it over and rolls it back", async (t) => {
  const { holding, other } = await roles();
  const started = await api(holding, "POST", "/v1/projects/ops-world/deploy", { env: "beta" });
  assert.equal(started.status, 202, started.text);
  const depId = started.data.id as string;
  await until("the deploy to reach its start phase", async () => {
    const d = (await api(other, "GET", `/v1/deployments/${depId}`)).data;
    return d.phases.some((p: any) => ["start", "health", "warm"].includes(p.name) && p.status === "running")
      ? true
      : undefined;
  });
  await kill(holding.proc);
  // denvd dials the next replica; that one claims the lapsed lease and ends the deployment.
  const d = await until(
    "the verdict from the surviving replica",
    async () => {
      const x = (await api(other, "GET", `/v1/deployments/${depId}`)).data;
      return x.status === "running" ? undefined : x;
    },
    180_000,
  );
  assert.ok(["rolled_back", "succeeded"].includes(d.status), `${d.status}: ${d.reason}`);
  t.diagnostic(`the deploy ended ${d.status}: ${d.reason}`);
  if (d.status === "rolled_back") {
    await until("the host to hold no stack of beta", async () =>
      stackNames().some((n) => n.endsWith("-beta")) ? undefined : true,
    );
    assert.equal((await api(other, "GET", "/v1/envs/beta")).data.status, "failed");
  }
  assert.equal((await roles()).holding, other, "the host is held by the surviving replica");
  // The replica comes back; both serve again.
  await startReplica(holding);
  const exec = await api(holding, "POST", "/v1/envs/alpha/exec", { service: "opsbox", command: "true" });
  assert.equal(exec.data.exit_code, 0, JSON.stringify(exec.data));
});

test("the replica running a fan-out is SIGKILLed mid-way: every fork ends succeeded or rolled back, none half-made", async (t) => {
  const { holding, other } = await roles();
  const version = (await api(holding, "GET", "/v1/envs/alpha")).data.current_version_id as string;
  // The fan-out runs on the replica that does not hold the host: every call crosses the link.
  const fan = api(other, "POST", `/v1/versions/${version}/forks`, { count: 4, name_prefix: "fan" }).catch(
    () => null,
  );
  await until("a fork's stack on the host", async () => {
    const fanStacks = Object.values<any>(hostState().stacks).filter((s) => /-fan-/.test(s.name));
    return fanStacks.some((s) => containersOf(s.id) > 0) ? true : undefined;
  });
  await kill(other.proc);
  await fan;
  const deps = await until(
    "every fork's verdict",
    async () => {
      const envs = (await api(holding, "GET", "/v1/envs")).data.environments as any[];
      const fans = envs.filter((e) => /^fan-/.test(e.name));
      const ds = await Promise.all(
        fans.map(async (e) => (await api(holding, "GET", `/v1/envs/${e.id}/deployments`)).data),
      );
      const all = ds.flatMap((x) => x.deployments ?? []);
      return all.length && all.every((x: any) => x.status !== "running") ? { fans, all } : undefined;
    },
    180_000,
  );
  for (const d of deps.all)
    assert.ok(["succeeded", "rolled_back"].includes(d.status), `${d.status}: ${d.reason}`);
  t.diagnostic(`the forks' deployments ended: ${deps.all.map((d: any) => d.status).join(", ")}`);
  // The kill came mid-way: at least one fork was still being made, and was taken over.
  assert.ok(
    deps.all.some((d: any) => d.status === "rolled_back" && /server stopped/.test(d.reason ?? "")),
    "a fork was taken over from the killed replica and rolled back",
  );
  // What the host holds of the fan-out is exactly the forks that run.
  const running = deps.fans.filter((e: any) => e.status === "running").map((e: any) => e.name as string);
  await until("the host to hold only the forks that run", async () => {
    const onHost = stackNames()
      .filter((n) => /-fan-/.test(n))
      .map((n) => n.replace(/^ops-world-/, ""));
    return JSON.stringify(onHost.sort()) === JSON.stringify([...running].sort()) ? true : undefined;
  });
  for (const name of running) {
    const rows = await api(holding, "POST", `/v1/envs/${name}/exec`, {
      service: "opsbox",
      command: ["psql", "-tAc", "select count(*) from orders"],
    });
    assert.equal(rows.data.stdout.trim(), "100000");
  }
  await startReplica(other);
});

test("two deploys of one environment sent to two replicas at once run one after the other", async () => {
  const [a, b] = replicas as [Replica, Replica];
  const [first, second] = await Promise.all([
    api(a, "POST", "/v1/projects/ops-world/deploy?wait=true", { env: "delta" }),
    api(b, "POST", "/v1/projects/ops-world/deploy?wait=true", { env: "delta" }),
  ]);
  for (const d of [first, second]) assert.equal(d.data.status, "succeeded", d.text);
  /** When a deployment's phases ran: from its first phase's start to its last one's end. */
  const span = (d: any) => {
    const ran = (d.phases as any[]).filter((p) => p.started_at);
    return {
      from: Math.min(...ran.map((p) => Date.parse(p.started_at))),
      to: Math.max(...ran.map((p) => Date.parse(p.finished_at))),
    };
  };
  const [x, y] = [span(first.data), span(second.data)].sort((p, q) => p.from - q.from) as [
    { from: number; to: number },
    { from: number; to: number },
  ];
  assert.ok(x.to <= y.from, `the later one began after the earlier one ended (${JSON.stringify([x, y])})`);
  const envs = (await api(a, "GET", "/v1/envs")).data.environments as any[];
  assert.equal(envs.filter((e) => e.name === "delta" && e.status === "running").length, 1);
});

test("a deploy run by one replica outlives the replica holding its host: its calls are routed again and run once", async (t) => {
  const { holding, other } = await roles();
  const started = await api(other, "POST", "/v1/projects/ops-world/deploy", { env: "epsilon" });
  assert.equal(started.status, 202, started.text);
  const depId = started.data.id as string;
  const phase = await until("the deploy to be waiting on the host in health or warm", async () => {
    const d = (await api(other, "GET", `/v1/deployments/${depId}`)).data;
    return d.phases.find((p: any) => ["health", "warm"].includes(p.name) && p.status === "running")?.name as
      | string
      | undefined;
  });
  await kill(holding.proc);
  const d = await until(
    "the verdict",
    async () => {
      const x = (await api(other, "GET", `/v1/deployments/${depId}`)).data;
      return x.status === "running" ? undefined : x;
    },
    180_000,
  );
  t.diagnostic(`killed the host's replica during ${phase}; the deploy ended ${d.status}`);
  assert.equal(d.status, "succeeded", d.reason);
  // The seed ran once: a warm step run twice would have loaded the orders twice (or failed).
  const rows = await api(other, "POST", "/v1/envs/epsilon/exec", {
    service: "opsbox",
    command: ["psql", "-tAc", "select count(*) from orders"],
  });
  assert.equal(rows.data.stdout.trim(), "100000", JSON.stringify(rows.data));
  assert.equal((await roles()).holding, other, "the host reconnected to the surviving replica");
  await startReplica(holding);
});
