/**
 * PostgreSQL's connections for the store, made to outlive the database going away (issue 70: a
 * `pg_ctl restart -m fast` ended every pooled connection, pg's Pool emitted 'error' with nobody
 * listening, and the server died). An idle connection the database ends is dropped and logged; a
 * connection asked for while the database is away is tried again with backoff for up to a bound
 * (nothing was sent, so nothing can be done twice), so a restart of a second or two costs a request
 * latency, not an error; a query whose connection is ended under it fails as `unavailable` (the
 * database rolled it back; retrying is the caller's choice), never as an anonymous 500.
 */
import { DenvError } from "@denv/protocol";
import type { PostgresPool, PostgresPoolClient } from "kysely";
import type pg from "pg";
import { serversOwnSocket } from "../outbound-guard.ts";
import { serverLog } from "../server-log.ts";

/** How long a connection is waited for while the database is away, by default. */
export const STORE_WAIT_MS = 30_000;
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 2000;

/** SQLSTATEs that mean the connection, not the statement, failed: class 08, and the shutdowns. */
const CONNECTION_STATES = /^(08...|57P0[1-3]|53300)$/;
const CONNECTION_ERRNOS = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENOENT",
]);
const CONNECTION_WORDS = /Connection terminated|not queryable|connection is closed|Connection refused/i;

/** Whether an error from pg means the database (or the way to it) went away. */
export function isConnectionError(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === "string" && (CONNECTION_STATES.test(code) || CONNECTION_ERRNOS.has(code))) return true;
  return CONNECTION_WORDS.test(err.message);
}

export interface StorePool extends PostgresPool {
  /** Why the last connection failed, while the database has not answered since; null when it has. */
  away(): string | null;
}

export function openPostgresPool(
  Pool: typeof pg.Pool,
  connectionString: string,
  options: { waitMs?: number } = {},
): StorePool {
  const waitMs = options.waitMs ?? STORE_WAIT_MS;
  // Its connections are the server's own: opened from within a team's outbound scope (a hosted
  // target's records), they are not held to the fetch policy (outbound-guard.ts).
  const pool = new Pool({ connectionString, max: 10, stream: serversOwnSocket });
  let away: string | null = null;
  pool.on("error", (err) => {
    // An idle connection ended by the database (a restart, an administrator): the pool drops it.
    serverLog().warn({ error: err.message }, "the store's database ended an idle connection");
  });
  const unavailable = (err: Error, what: string) =>
    new DenvError("unavailable", `the store's database ${what}: ${err.message}; try again`, { cause: err });
  const heard = new WeakSet<pg.PoolClient>();
  const listen = (client: pg.PoolClient) => {
    if (heard.has(client)) return;
    heard.add(client);
    // Ended while lent out between two queries (a transaction's, or just acquired): the next
    // query fails as unavailable; the event itself must not end the server.
    client.on("error", (err) =>
      serverLog().warn({ error: err.message }, "the store's database ended a connection in use"),
    );
  };
  // Heard from the moment each connection is made, not from when a checkout first holds it: the
  // pool drops its own listener as it lends a new connection, and a FATAL the database sends in
  // between (a restart's "terminating connection due to administrator command") would otherwise be
  // an 'error' event with no listener, which ends the process.
  pool.on("connect", (client) => listen(client));
  /** A pooled connection, tried again with backoff while the database is away. */
  const acquire = async (): Promise<pg.PoolClient> => {
    const deadline = performance.now() + waitMs;
    for (let delayMs = FIRST_RETRY_MS; ; delayMs = Math.min(delayMs * 2, MAX_RETRY_MS)) {
      try {
        const client = await pool.connect();
        if (away !== null) serverLog().info("the store's database answers again");
        away = null;
        listen(client);
        return client;
      } catch (err) {
        if (!isConnectionError(err)) throw err;
        if (away === null)
          serverLog().warn({ error: (err as Error).message }, "the store's database is away; waiting for it");
        away = (err as Error).message;
        const leftMs = deadline - performance.now();
        if (leftMs <= 0) throw unavailable(err as Error, `did not answer for ${Math.round(waitMs / 1000)} s`);
        await new Promise((r) => setTimeout(r, Math.min(delayMs, leftMs)));
      }
    }
  };
  /**
   * A lent connection. An idle one the database ended a moment ago may be lent before the pool
   * heard: its first statement then fails without having run (the backend was gone, or ended it
   * uncommitted), so that one statement is sent once more on a fresh connection. A later one is
   * not: what the checkout did before it (a transaction's statements) went with the connection.
   */
  const wrap = (first: pg.PoolClient): PostgresPoolClient => {
    // The connection lent now: none between a dead one's release and its successor's arrival
    // (Kysely releases the checkout once, whatever happened to it).
    let client: pg.PoolClient | null = first;
    let answered = false;
    const send = (args: unknown[]) => {
      if (!client) throw unavailable(new Error("no connection"), "is away");
      return (client.query as (...a: unknown[]) => unknown).apply(client, args);
    };
    return {
      query: ((...args: unknown[]) => {
        const r = send(args);
        if (!(r instanceof Promise)) return r;
        return r.then(
          (out) => {
            answered = true;
            return out;
          },
          async (err: unknown) => {
            if (!isConnectionError(err)) throw err;
            if (answered || !client) throw unavailable(err as Error, "ended the connection");
            client.release(true);
            client = null;
            client = await acquire();
            try {
              const out = await (send(args) as Promise<unknown>);
              answered = true;
              return out;
            } catch (again) {
              throw isConnectionError(again) ? unavailable(again as Error, "ended the connection") : again;
            }
          },
        );
      }) as PostgresPoolClient["query"],
      release: (destroy?: boolean) => {
        client?.release(destroy);
        client = null;
      },
    };
  };
  return {
    away: () => away,
    end: () => pool.end(),
    async connect() {
      return wrap(await acquire());
    },
  };
}
