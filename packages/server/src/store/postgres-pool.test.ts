import assert from "node:assert/strict";
import { test } from "node:test";
import { isConnectionError } from "./postgres-pool.ts";

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
