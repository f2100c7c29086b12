import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { test } from "node:test";
import { isDenvError } from "@denv/protocol";
import type pg from "pg";
import { isConnectionError, openPostgresPool } from "./postgres-pool.ts";

const pgError = (code: string, message: string) => Object.assign(new Error(message), { code });

test("connection failures are told from a statement's own errors", () => {
  for (const e of [
    pgError("57P01", "terminating connection due to administrator command"),
    pgError("57P03", "the database system is starting up"),
    pgError("08006", "connection failure"),
    pgError("ECONNREFUSED", "connect ECONNREFUSED 127.0.0.1:5432"),
    new Error("Connection terminated unexpectedly"),
    new Error("Client has encountered a connection error and is not queryable"),
  ])
    assert.equal(isConnectionError(e), true, e.message);
  for (const e of [
    pgError("23505", "duplicate key value violates unique constraint"),
    pgError("42P01", 'relation "nope" does not exist'),
    pgError("40001", "could not serialize access"),
    new Error("syntax error at or near"),
    "Connection terminated",
    null,
  ])
    assert.equal(isConnectionError(e), false, String(e));
});

/** A pg Pool stand-in: lends the clients given, in turn, then refuses as a database that is away. */
function fakePool(clients: { query: (...a: unknown[]) => Promise<unknown> }[]) {
  const released: (boolean | undefined)[] = [];
  const made: EventEmitter[] = [];
  class FakePool extends EventEmitter {
    constructor() {
      super();
      made.push(this);
    }
    connect() {
      const c = clients.shift();
      if (!c)
        return Promise.reject(
          Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" }),
        );
      let done = false;
      return Promise.resolve(
        Object.assign(new EventEmitter(), c, {
          // As pg-pool's: a second release of one checkout throws.
          release(destroy?: boolean) {
            if (done)
              throw new Error("Release called on client which has already been released to the pool.");
            done = true;
            released.push(destroy);
          },
        }),
      );
    }
    end() {
      return Promise.resolve();
    }
  }
  return { Pool: FakePool as unknown as typeof pg.Pool, released, made };
}

const dead = () => ({ query: () => Promise.reject(new Error("Connection terminated unexpectedly")) });
const alive = (rows: unknown[]) => ({ query: () => Promise.resolve({ rows }) });

test("a dead connection's first statement is sent once more on a fresh one; each connection released once", async () => {
  const { Pool, released } = fakePool([dead(), alive([{ n: 1 }])]);
  const pool = openPostgresPool(Pool, "postgres://x@127.0.0.1/x", { waitMs: 200 });
  const c = await pool.connect();
  assert.deepEqual(await c.query("select 1 as n", []), { rows: [{ n: 1 }] });
  c.release();
  assert.deepEqual(released, [true, undefined], "the dead one destroyed, the fresh one returned");
});

test("no fresh connection within the bound: unavailable, and the checkout's release is not a second one", async () => {
  const { Pool, released } = fakePool([dead()]);
  const pool = openPostgresPool(Pool, "postgres://x@127.0.0.1/x", { waitMs: 200 });
  const c = await pool.connect();
  await assert.rejects(c.query("insert into t values (1)", []), (err: unknown) => {
    assert.ok(isDenvError(err), String(err));
    assert.equal(err.code, "unavailable");
    assert.match(err.message, /^the store's database did not answer for 0 s: connect ECONNREFUSED/);
    return true;
  });
  c.release();
  assert.deepEqual(released, [true], "only the dead one, once");
  assert.match(pool.away() ?? "", /ECONNREFUSED/);
});

test("a later statement of a checkout is not sent again: what the checkout did went with the connection", async () => {
  let calls = 0;
  const flaky = {
    query: () =>
      calls++ === 0
        ? Promise.resolve({ rows: [] })
        : Promise.reject(new Error("Connection terminated unexpectedly")),
  };
  const { Pool, released } = fakePool([flaky, alive([])]);
  const pool = openPostgresPool(Pool, "postgres://x@127.0.0.1/x", { waitMs: 200 });
  const c = await pool.connect();
  await c.query("begin", []);
  await assert.rejects(c.query("update t set n = 2", []), /ended the connection: Connection terminated/);
  c.release();
  assert.equal(calls, 2, "sent once each");
  assert.deepEqual(released, [undefined]);
});

test("a connection is heard from the moment it is made: a FATAL before any checkout holds it ends nothing", () => {
  const { Pool, made } = fakePool([]);
  openPostgresPool(Pool, "postgres://x@127.0.0.1/x", { waitMs: 200 });
  const client = new EventEmitter();
  // pg-pool says 'connect' as it makes a connection, then drops its own idle listener to lend it.
  made[0]?.emit("connect", client);
  assert.ok(client.listenerCount("error") > 0, "a listener from the start");
  assert.doesNotThrow(() =>
    client.emit("error", new Error("terminating connection due to administrator command")),
  );
});
