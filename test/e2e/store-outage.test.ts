/**
 * The control plane outlives its PostgreSQL (issue 70: `pg_ctl restart -m fast` killed `denv
 * server` with an unhandled 'error' event, 2 of 2). Under a steady load of reads and writes the
 * database is restarted and then stopped for a while: the server stays up, a request that comes
 * while the database is away waits for it (up to a bound) instead of failing, what fails says
 * `unavailable` (never a 500), /readyz says 503 until the store answers again, and every write the
 * server acknowledged is there afterwards.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type Lab, openLab } from "../harness/lab.ts";
import { type PostgresCluster, startPostgresCluster } from "../harness/postgres.ts";
import { waitFor } from "../harness/wait-for.ts";

let lab: Lab;
let pg: PostgresCluster;
/** Longer than a restart takes, short enough for a test of the bound. */
const STORE_WAIT_MS = 8000;

before(async () => {
  pg = await startPostgresCluster();
  lab = await openLab({ databaseUrl: pg.url, storeWaitMs: STORE_WAIT_MS });
});

after(async () => {
  await lab?.close();
  pg?.stop();
});

/** Writes and reads in a loop until stopped: what was acknowledged, and every status seen. */
function load() {
  const made: string[] = [];
  const statuses = new Map<number, number>();
  const failures: string[] = [];
  let stop = false;
  let n = 0;
  const worker = async () => {
    while (!stop) {
      const name = `load-${n++}`;
      const wrote = await lab.api("POST", "/v1/projects", { name, kind: "service", source: `./${name}` });
      statuses.set(wrote.status, (statuses.get(wrote.status) ?? 0) + 1);
      if (wrote.status === 201) made.push(name);
      else failures.push(`${wrote.status} ${JSON.stringify(wrote.data)}`);
      const read = await lab.api("GET", "/v1/projects");
      statuses.set(read.status, (statuses.get(read.status) ?? 0) + 1);
      if (read.status !== 200) failures.push(`${read.status} ${JSON.stringify(read.data)}`);
    }
  };
  const workers = Array.from({ length: 4 }, worker);
  return {
    made,
    statuses,
    failures,
    async end() {
      stop = true;
      await Promise.all(workers);
    },
  };
}

const ready = async () => (await lab.api("GET", "/readyz")).status;

test("a PostgreSQL restarted twice under load: the server stays up, and every acknowledged write is kept", async () => {
  const before = await lab.api("POST", "/v1/projects", { name: "kept", kind: "service", source: "./kept" });
  assert.equal(before.status, 201, JSON.stringify(before.data));
  const traffic = load();
  await waitFor("load under way", () => traffic.made.length >= 5);
  pg.restart();
  const afterFirst = traffic.made.length;
  await waitFor("writes after the first restart", () => traffic.made.length >= afterFirst + 5);
  pg.restart();
  const afterSecond = traffic.made.length;
  await waitFor("writes after the second restart", () => traffic.made.length >= afterSecond + 5);
  await traffic.end();
  console.log(`statuses across two restarts: ${JSON.stringify(Object.fromEntries(traffic.statuses))}`);
  // A request that met the restart either waited for the database or said so: never a 500.
  for (const f of traffic.failures) assert.match(f, /^503 .*"code":"unavailable"/, f);
  assert.equal(await ready(), 200);
  const listed = (await lab.api("GET", "/v1/projects")).data.projects as { name: string }[];
  const names = new Set(listed.map((p) => p.name));
  for (const name of ["kept", ...traffic.made])
    assert.ok(names.has(name), `${name} was acknowledged and lost`);
});

test("while PostgreSQL is away /readyz says 503 with the store's reason; a request waits for it to come back", async () => {
  pg.pause();
  let back = false;
  try {
    // A write sent while the database is away is held, not refused: it lands once it is back.
    const pending = lab.api("POST", "/v1/projects", { name: "held", kind: "service", source: "./held" });
    const probe = await lab.api("GET", "/readyz");
    assert.equal(probe.status, 503, JSON.stringify(probe.data));
    assert.match(String(probe.data.checks.store), /^failing: /);
    pg.start();
    back = true;
    const held = await pending;
    assert.equal(held.status, 201, JSON.stringify(held.data));
  } finally {
    if (!back) pg.start();
  }
  await waitFor("the store ready again", async () => (await ready()) === 200);
  const one = await lab.api("GET", `/v1/projects/held`);
  assert.equal(one.status, 200, JSON.stringify(one.data));
});

test("a PostgreSQL away past the bound: requests fail as unavailable, naming the store, and the server carries on", async () => {
  pg.pause();
  let back = false;
  try {
    const fromMs = performance.now();
    const refused = await lab.api("POST", "/v1/projects", {
      name: "late",
      kind: "service",
      source: "./late",
    });
    assert.ok(performance.now() - fromMs >= STORE_WAIT_MS - 500, "it waited for the database first");
    assert.equal(refused.status, 503, JSON.stringify(refused.data));
    assert.equal(refused.data.error.code, "unavailable");
    assert.match(refused.data.error.message, /the store's database did not answer for 8 s: .*try again/);
    pg.start();
    back = true;
  } finally {
    if (!back) pg.start();
  }
  await waitFor("the store ready again", async () => (await ready()) === 200);
  const late = await lab.api("POST", "/v1/projects", { name: "late", kind: "service", source: "./late" });
  assert.equal(late.status, 201, "the refused write was not half-made: it can be made now");
});
