/**
 * Processes dying mid-operation, as real processes: the server SIGKILLed in the middle of a deploy
 * (it comes back, rolls the deployment back, and what was being built is removed from the host),
 * and denvd SIGKILLed in the middle of a fork (it comes back, the server sends the same operation
 * again, and the fork completes once, with nothing left over).
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { LABEL } from "@denv/denvd";
import { openTestHost, repoRoot } from "./denvd-helpers.ts";
import { removeLabelled } from "./engine-helpers.ts";
import { freePort } from "./net-helpers.ts";

const denvBin = join(repoRoot, "packages/cli/bin/denv.js");
const denvdBin = join(repoRoot, "packages/denvd/bin/denvd.js");
const compose = readFileSync(join(repoRoot, "examples/ops-world/docker-compose.yaml"), "utf8");
const children: ChildProcess[] = [];
const cleanups: (() => Promise<void>)[] = [];

after(async () => {
  for (const c of children) c.kill("SIGKILL");
  for (const f of cleanups.reverse()) await f().catch(() => {});
});

function startProcess(bin: string, args: string[], env: Record<string, string> = {}): Promise<ChildProcess> {
  const child = spawn(process.execPath, [bin, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  let out = "";
  return new Promise((resolve, reject) => {
    const onData = (c: Buffer) => {
      out += c.toString();
      if (/listening on|Connected/.test(out)) resolve(child);
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.on("exit", (code) => reject(new Error(`${bin} exited (${code}): ${out}`)));
  });
}

/**
 * Kills a child and waits for it to be gone. One already gone resolves at once: a child killed by a
 * signal has a null exitCode (its signalCode says how it ended), and waiting for an 'exit' that has
 * already come would leave nothing for the event loop to do, so the test file would end there and
 * skip the rest of its cleanup (its stacks were left running).
 */
function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((r) => {
    child.on("exit", () => r());
    child.kill("SIGKILL");
  });
}

function client(url: () => string, key: string) {
  return async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url()}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, data: (await res.json()) as any };
  };
}

async function until<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A server process, a denvd process joined to it, and ops-world uploaded. */
async function world() {
  const runId = `rs-${randomBytes(4).toString("hex")}`;
  const dataDir = await mkdtemp(join(tmpdir(), "denv-server-"));
  const stateDir = join("/var/lib/denv-test", runId);
  const port = await freePort();
  const key = `dk_${runId}`;
  const url = `http://127.0.0.1:${port}`;
  const serverArgs = [
    "server",
    "--data-dir",
    dataDir,
    "--port",
    String(port),
    "--allow-fetch",
    "127.0.0.1:5000",
  ];
  const w = {
    runId,
    url,
    stateDir,
    server: await startProcess(denvBin, serverArgs, { DENV_ADMIN_KEY: key }),
    denvd: null as ChildProcess | null,
    api: client(() => url, key),
    restartServer: async () => {
      w.server = await startProcess(denvBin, serverArgs, { DENV_ADMIN_KEY: key });
    },
    startDenvd: async () => {
      w.denvd = await startProcess(denvdBin, [
        "run",
        "--state-dir",
        stateDir,
        "--label",
        `dev.denv.test=${runId}`,
      ]);
    },
  };
  cleanups.push(async () => {
    for (const c of [w.server, w.denvd]) if (c) await kill(c);
    const h = await openTestHost({ stateDir, runId });
    await h.close();
    await removeLabelled(h.docker, { "dev.denv.test": runId });
    await rm(dataDir, { recursive: true, force: true });
  });
  const token = (await w.api("POST", "/v1/hosts/join-token")).data.token;
  const joined = spawnSync(
    process.execPath,
    [denvdBin, "join", "--server", url, "--token", token, "--state-dir", stateDir, "--name", runId],
    {
      encoding: "utf8",
    },
  );
  assert.equal(joined.status, 0, joined.stderr);
  await w.startDenvd();
  await w.api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
  await w.api("PUT", "/v1/projects/ops-world/source", { compose });
  return w;
}

test("the server killed mid-deploy comes back, rolls the deployment back, and the host is left clean", async () => {
  const w = await world();
  const started = await w.api("POST", "/v1/projects/ops-world/deploy", { env: "alpha" });
  assert.equal(started.status, 202);
  const depId = started.data.id as string;
  await until("the deploy to reach its start phase", async () => {
    const d = await w.api("GET", `/v1/deployments/${depId}`);
    return d.data.phases.some(
      (p: any) => ["start", "health", "warm"].includes(p.name) && p.status === "running",
    )
      ? true
      : undefined;
  });
  await kill(w.server);
  await w.restartServer();
  const d = (await w.api("GET", `/v1/deployments/${depId}`)).data;
  assert.equal(d.status, "rolled_back");
  assert.match(d.reason, /server stopped/);
  assert.ok(d.phases.some((p: any) => p.status === "failed" && /server stopped/.test(p.reason)));
  assert.equal((await w.api("GET", "/v1/envs/alpha")).data.status, "failed");
  // denvd reconnects and is told to remove what the deploy was building.
  const h = await until("the host to be clean", async () => {
    const s = JSON.parse(readFileSync(join(w.stateDir, "state.json"), "utf8"));
    return Object.keys(s.stacks).length === 0 ? s : undefined;
  });
  const owner = `${LABEL.owner}=${h.ownerId}`;
  const left = spawnSync(
    "sh",
    ["-c", `docker ps -aq --filter label=${owner}; docker network ls -q --filter label=${owner}`],
    { encoding: "utf8" },
  );
  assert.equal(left.stdout.trim(), "");
  // And the next deploy succeeds.
  const again = await w.api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
  assert.equal(again.data.status, "succeeded", again.data.reason);
});

test("denvd killed mid-fork comes back and the fork completes once, with nothing left over", async () => {
  const w = await world();
  const dep = await w.api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
  assert.equal(dep.data.status, "succeeded", dep.data.reason);
  const fork = w.api("POST", "/v1/envs/alpha/fork", { name: "rollout-017" });
  await until("the fork to reach the host", async () => {
    const s = JSON.parse(readFileSync(join(w.stateDir, "state.json"), "utf8"));
    return Object.values<any>(s.stacks).some((e) => e.name.endsWith("rollout-017")) ? true : undefined;
  });
  await new Promise((r) => setTimeout(r, 150));
  await kill(w.denvd as ChildProcess);
  await w.startDenvd();
  const r = await fork;
  assert.equal(r.status, 201, JSON.stringify(r.data));
  assert.equal(r.data.status, "running");
  const count = await w.api("POST", `/v1/envs/${r.data.id}/exec`, {
    service: "opsbox",
    command: ["psql", "-tAc", "select count(*) from orders"],
  });
  assert.equal(count.data.stdout.trim(), "100000");
  const s = JSON.parse(readFileSync(join(w.stateDir, "state.json"), "utf8"));
  const names = Object.values<any>(s.stacks)
    .map((e) => e.name)
    .sort();
  assert.deepEqual(names, ["ops-world-alpha", "ops-world-rollout-017"]);
  const owner = `${LABEL.owner}=${s.ownerId}`;
  const containers = spawnSync("sh", ["-c", `docker ps -aq --filter label=${owner} | wc -l`], {
    encoding: "utf8",
  });
  assert.equal(containers.stdout.trim(), "6");
});
