/**
 * Kysely's SQLite dialect over Node's built-in `node:sqlite`: the embedded store needs no native
 * module, so nothing has to be compiled against the running Node.
 */
import { DatabaseSync, type StatementSync } from "node:sqlite";
import { DenvError } from "@denv/protocol";
import type { SqliteDatabase, SqliteStatement } from "kysely";

type Param = null | number | bigint | string | Uint8Array;

function toParams(parameters: ReadonlyArray<unknown>): Param[] {
  return parameters.map((p) =>
    typeof p === "boolean" ? (p ? 1 : 0) : p === undefined ? null : (p as Param),
  );
}

const STATEMENT_CACHE = 256;
/** SQLite's result code for a full disk (or a database at its max_page_count). */
const SQLITE_FULL = 13;

/**
 * A full disk as a refusal that says so: SQLite rolls back the statement (nothing half-written),
 * and the caller is told where space is needed instead of "the server failed".
 */
function refusedWhenFull<T>(path: string, run: () => T): T {
  try {
    return run();
  } catch (err) {
    if ((err as { errcode?: unknown }).errcode === SQLITE_FULL)
      throw new DenvError(
        "insufficient_storage",
        `the store's disk is full (SQLite at ${path}: ${(err as Error).message}); nothing was written: free space there and try again`,
        { cause: err },
      );
    throw err;
  }
}

export function openNodeSqlite(path: string): SqliteDatabase {
  const db = new DatabaseSync(path);
  // WAL: readers do not block the writer; busy_timeout: a second process waits instead of failing.
  // WAL with synchronous=NORMAL: commits do not wait for an fsync each (a deployment writes its phase
  // log a dozen times), the database cannot be corrupted by a crash, and only a power loss can drop
  // the last commits before the checkpoint, the usual trade for WAL (SQLite docs, "WAL mode").
  db.exec(
    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;",
  );
  // Prepared statements by their SQL, the newest STATEMENT_CACHE kept: Kysely compiles the same
  // few texts for every request, and preparing one anew was the server's largest item of SQLite
  // time under an exec load. Kysely holds one connection and runs one query at a time on it, so a
  // statement is never in use twice.
  const cache = new Map<string, { stmt: StatementSync; reader: boolean }>();
  const statement = (sql: string) => {
    let hit = cache.get(sql);
    if (hit) cache.delete(sql);
    else {
      const stmt = db.prepare(sql);
      hit = { stmt, reader: stmt.columns().length > 0 };
      if (cache.size >= STATEMENT_CACHE) cache.delete(cache.keys().next().value as string);
    }
    cache.set(sql, hit);
    return hit;
  };
  return {
    close: () => {
      cache.clear();
      db.close();
    },
    prepare(sql: string): SqliteStatement {
      const { stmt, reader } = statement(sql);
      return {
        reader,
        all: (parameters) => refusedWhenFull(path, () => stmt.all(...toParams(parameters)) as unknown[]),
        run: (parameters) => {
          const r = refusedWhenFull(path, () => stmt.run(...toParams(parameters)));
          return { changes: r.changes, lastInsertRowid: r.lastInsertRowid };
        },
        iterate: (parameters) => stmt.iterate(...toParams(parameters)) as IterableIterator<unknown>,
      };
    },
  };
}
