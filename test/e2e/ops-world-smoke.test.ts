/**
 * Smoke test of the ops-world example on the real Docker engine, straight through the Engine API
 * (dockerode), before any denv code is involved: the example's images must run as its compose file
 * says, become healthy, reach each other by service name, and seed the task's data. Everything the
 * test creates carries a unique label, and the test proves none of it is left behind.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import Docker from "dockerode";
import { parse } from "yaml";
import { execIn, removeLabelled, waitHealthy } from "../harness/engine.ts";

const root = join(import.meta.dirname, "..", "..");
const example = join(root, "examples", "ops-world");
const compose = parse(readFileSync(join(example, "docker-compose.yaml"), "utf8"));
const expected = /^EXPECTED=(\d+)$/m.exec(
  readFileSync(join(example, "images", "verifier", "verify.sh"), "utf8"),
)?.[1];

const docker = new Docker();
const runId = `smoke-${randomBytes(4).toString("hex")}`;
const labels = { "dev.denv.test": runId };
const containers: Record<string, Docker.Container> = {};

function svc(name: string): Docker.Container {
  const c = containers[name];
  assert.ok(c, `no container for service ${name}`);
  return c;
}

interface ComposeService {
  image: string;
  command?: string[];
  user?: string;
  environment?: Record<string, string>;
  volumes?: string[];
  pids_limit?: number;
  healthcheck?: { test: string[]; interval: string; retries: number };
}

function nanos(duration: string): number {
  const m = /^(\d+)s$/.exec(duration);
  assert.ok(m, `unexpected duration ${duration}`);
  return Number(m[1]) * 1e9;
}

before(async () => {
  const net = await docker.createNetwork({ Name: runId, Internal: true, Labels: labels });
  for (const name of Object.keys(compose.volumes)) {
    await docker.createVolume({ Name: `${runId}_${name}`, Labels: labels });
  }
  for (const [name, svc] of Object.entries<ComposeService>(compose.services)) {
    const env = Object.entries(svc.environment ?? {}).map(([k, v]) => `${k}=${v}`);
    const binds = (svc.volumes ?? []).map((v) => `${runId}_${v}`);
    const hc = svc.healthcheck;
    const c = await docker.createContainer({
      name: `${runId}-${name}`,
      Image: svc.image,
      Cmd: svc.command,
      Env: env,
      User: svc.user,
      Labels: { ...labels, "dev.denv.service": name },
      Healthcheck: hc
        ? { Test: hc.test, Interval: nanos(hc.interval), Retries: hc.retries, StartPeriod: 0 }
        : undefined,
      HostConfig: { Binds: binds, Memory: 2 * 1024 ** 3, PidsLimit: svc.pids_limit ?? 2048 },
      NetworkingConfig: { EndpointsConfig: { [net.id]: { Aliases: [name] } } },
    });
    containers[name] = c;
  }
  // db and queue first: opsbox depends_on them.
  await Promise.all(["db", "queue"].map((n) => svc(n).start()));
  await svc("opsbox").start();
});

after(async () => {
  await removeLabelled(docker, labels);
});

test("db and queue become healthy through their compose healthchecks", async () => {
  await Promise.all(["db", "queue"].map((n) => waitHealthy(svc(n), 90_000)));
  for (const n of ["db", "queue"])
    assert.equal(
      (await svc(n).inspect()).State.Health?.Status,
      "healthy",
      `${n} is healthy by its healthcheck`,
    );
});

test("opsbox runs as uid 1000, not root", async () => {
  const r = await execIn(svc("opsbox"), ["id", "-u"]);
  assert.equal(r.stdout.trim(), "1000");
});

test("psql from opsbox reaches db, and redis-cli reaches queue, by service name", async () => {
  const pg = await execIn(svc("opsbox"), ["psql", "-h", "db", "-U", "postgres", "-tAc", "select 41 + 1"]);
  assert.equal(pg.exitCode, 0, pg.stderr);
  assert.equal(pg.stdout.trim(), "42");
  const redis = await execIn(svc("opsbox"), ["redis-cli", "-h", "queue", "ping"]);
  assert.equal(redis.exitCode, 0, redis.stderr);
  assert.equal(redis.stdout.trim(), "PONG");
});

test("the warm command seeds 100,000 orders and the task's answer is the verifier's", async () => {
  const warm: string = compose["x-denv"].warm[0];
  const w = await execIn(svc("opsbox"), ["sh", "-c", warm]);
  assert.equal(w.exitCode, 0, w.stderr);
  const count = await execIn(svc("opsbox"), ["psql", "-tAc", "select count(*) from orders"]);
  assert.equal(count.stdout.trim(), "100000");
  const answer = await execIn(svc("opsbox"), [
    "psql",
    "-tAc",
    "select count(*) from orders where status = 'failed' and total_cents > 50000",
  ]);
  assert.equal(answer.stdout.trim(), expected);
});

test("queue keeps an append-only file on its volume", async () => {
  const r = await execIn(svc("queue"), ["redis-cli", "config", "get", "appendonly"]);
  assert.match(r.stdout, /appendonly\s+yes/);
});

test("teardown leaves nothing labelled behind", async () => {
  await removeLabelled(docker, labels);
  const filters = JSON.stringify({ label: [`dev.denv.test=${runId}`] });
  assert.deepEqual(await docker.listContainers({ all: true, filters }), []);
  assert.deepEqual(await docker.listNetworks({ filters }), []);
  assert.deepEqual((await docker.listVolumes({ filters })).Volumes ?? [], []);
});
