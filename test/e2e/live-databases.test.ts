/**
 * Live versions of ops-world itself (issue 71's acceptance), on the real engine with CRIU: a psql
 * session and a Redis connection the agent holds open from its own service (uid 1000) go on in a
 * live fork against the fork's own PostgreSQL and Redis, restored with their memory (no recovery,
 * no reconnect), while the parent's data stays as it was and its sessions go on too.
 *
 * Each session is a client reading what the test writes to a FIFO (a writer held open, so it never
 * sees an end) and printing into a file in the agent's layer, as an agent's tool drives one. The
 * same session shows itself by what only it holds: PostgreSQL's backend pid and a temporary table
 * (gone with its session), Redis's client id and the name given to the connection.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { StackRecord } from "@denv/denvd";
import { pinSpec, RegistryPinner, validateCompose } from "@denv/spec";
import { hostOp, openTestHost, repoRoot, type TestHost } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

/**
 * The agent's service's command: two FIFOs, each with a writer held open, read by psql and by
 * redis-cli line by line (their output line-buffered into files) once both databases answer, then
 * it sleeps as ops-world's does.
 */
const SESSIONS = `until pg_isready -q && redis-cli -h queue ping > /dev/null 2>&1; do sleep 0.2; done;
  cd /tmp && mkfifo pq rq && (sleep infinity > pq &) && (sleep infinity > rq &) &&
  (stdbuf -oL psql -At < pq > pout 2>&1 &) && (stdbuf -oL redis-cli -h queue < rq > rout 2>&1 &) && exec sleep infinity`;

let host: TestHost;
let parent: StackRecord;

async function sh(stackId: string, service: string, script: string, ...args: string[]): Promise<string> {
  const r = await host.denvd.exec(stackId, service, { command: ["sh", "-c", script, "sh", ...args] });
  assert.equal(r.exitCode, 0, `${service}: ${script}: ${r.stderr.toString()}`);
  return r.stdout.toString().trim();
}

/** A line to the agent's held session (psql or redis), never parsed by a shell. */
const say = (stackId: string, fifo: "pq" | "rq", line: string) =>
  sh(stackId, "opsbox", 'printf "%s\\n" "$1" > "/tmp/$2"', line, fifo);

/** What a held session has printed so far. */
const printed = (stackId: string, file: "pout" | "rout") => sh(stackId, "opsbox", 'cat "/tmp/$1"', file);

/** The line the session printed after the marker, once it has. */
async function after_(stackId: string, file: "pout" | "rout", marker: string): Promise<string> {
  let line = "";
  await waitFor(`${marker} in ${stackId}'s /tmp/${file}`, async () => {
    const lines = (await printed(stackId, file)).split("\n");
    const at = lines.indexOf(marker);
    line = at >= 0 ? (lines[at + 1] ?? "") : "";
    return line !== "";
  });
  return line;
}

before(async () => {
  host = await openTestHost({});
  // ops-world as it ships, the agent's service holding the two sessions (as uid 1000, its user).
  const compose = readFileSync(
    join(repoRoot, "examples", "ops-world", "docker-compose.yaml"),
    "utf8",
  ).replace('command: ["sleep", "infinity"]', `command: ["sh", "-c", ${JSON.stringify(SESSIONS)}]`);
  assert.ok(compose.includes("mkfifo"), "ops-world's agent service runs sleep infinity");
  const r = validateCompose(compose, { env: {}, projectName: "ops-live" });
  if (!r.ok) throw new Error(JSON.stringify(r.errors));
  const spec = await pinSpec(r.spec, new RegistryPinner());
  const prepared = await hostOp(host.denvd, "prepare", {
    spec,
    name: "ops-live",
    operation_id: "op_ops_live",
  });
  await hostOp(host.denvd, "start", { stack_id: prepared.stack_id });
  parent = host.denvd.stack(prepared.stack_id);
  await sh(parent.id, "opsbox", "psql -q -c 'create table notes (x text)'");
});

after(async () => {
  await host?.close();
});

test("a psql session and a Redis connection held open from the agent's service go on in a live fork, against the fork's databases", async () => {
  // The parent's sessions: a temporary table and a connection name that only these sessions hold.
  await say(parent.id, "pq", "create temporary table held (x text); insert into held values ('kept');");
  await say(parent.id, "pq", "select 'm1'; select pg_backend_pid();");
  const backend = await after_(parent.id, "pout", "m1");
  assert.match(backend, /^\d+$/);
  await say(parent.id, "rq", "client setname held");
  await say(parent.id, "rq", "echo m1");
  await say(parent.id, "rq", "client id");
  const clientId = await after_(parent.id, "rout", "m1");
  assert.match(clientId, /^\d+$/);

  const snap = await hostOp(host.denvd, "snapshot", { stack_id: parent.id, live: "on" });
  const live = snap.evidence.live;
  assert.deepEqual(Object.keys(live?.services ?? {}).sort(), ["db", "opsbox", "queue"], JSON.stringify(live));
  assert.deepEqual(live?.skipped ?? {}, {}, JSON.stringify(live));
  const fork = await hostOp(host.denvd, "fork", {
    version_id: snap.version_id,
    name: "ops-live-fork",
    operation_id: "op_ops_live_fork",
  });

  // In the fork, the same PostgreSQL backend (its pid, its temporary table) answers, and what it
  // writes lands in the fork's database alone.
  await say(fork.stack_id, "pq", "insert into notes values ('from-fork');");
  await say(fork.stack_id, "pq", "select 'm2'; select pg_backend_pid() || ' ' || (select x from held);");
  assert.equal(await after_(fork.stack_id, "pout", "m2"), `${backend} kept`);
  // The same Redis connection (its id, its name) sets a key in the fork's Redis alone.
  await say(fork.stack_id, "rq", "set written-by fork");
  await say(fork.stack_id, "rq", "echo m2");
  await say(fork.stack_id, "rq", "client getname");
  assert.equal(await after_(fork.stack_id, "rout", "m2"), "held");
  await say(fork.stack_id, "rq", "echo m3");
  await say(fork.stack_id, "rq", "client id");
  assert.equal(await after_(fork.stack_id, "rout", "m3"), clientId);

  const count = (stackId: string) =>
    sh(stackId, "opsbox", "psql -At -c \"select count(*) from notes where x = 'from-fork'\"");
  const key = (stackId: string) => sh(stackId, "opsbox", "redis-cli -h queue get written-by");
  assert.equal(await count(fork.stack_id), "1");
  assert.equal(await key(fork.stack_id), "fork");
  assert.equal(await count(parent.id), "0", "the parent's database never saw the fork's write");
  assert.equal(await key(parent.id), "", "nor its Redis");

  // The parent's own sessions go on, on the parent's databases.
  await say(parent.id, "pq", "select 'm3'; select pg_backend_pid() || ' ' || (select count(*) from notes);");
  assert.equal(await after_(parent.id, "pout", "m3"), `${backend} 0`);

  // A cold fork of the same version starts every process afresh: its agent's command opens new
  // sessions (no temporary table there), on the data as snapped.
  const cold = await hostOp(host.denvd, "fork", {
    version_id: snap.version_id,
    name: "ops-live-cold",
    operation_id: "op_ops_live_cold",
    cold: true,
  });
  assert.equal(await count(cold.stack_id), "0");
  await waitFor(
    "the cold fork's own psql session",
    async () => (await sh(cold.stack_id, "opsbox", "test -p /tmp/pq && echo yes || true")) === "yes",
  );
  await say(cold.stack_id, "pq", "select 'm4'; select coalesce(to_regclass('held')::text, 'no held table');");
  assert.equal(await after_(cold.stack_id, "pout", "m4"), "no held table");

  for (const id of [fork.stack_id, cold.stack_id]) await hostOp(host.denvd, "destroy", { stack_id: id });
  await hostOp(host.denvd, "delete_version", { version_id: snap.version_id });
});
