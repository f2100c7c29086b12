/**
 * Kysely's SQLite dialect over Node's built-in `node:sqlite`: the embedded store needs no native
 * module, so nothing has to be compiled against the running Node.
 */
import { DatabaseSync, type StatementSync } from "node:sqlite";
import type { SqliteDatabase, SqliteStatement } from "kysely";

type Param = null | number | bigint | string | Uint8Array;

function toParams(parameters: ReadonlyArray<unknown>): Param[] {
  return parameters.map((p) =>
    typeof p === "boolean" ? (p ? 1 : 0) : p === undefined ? null : (p as Param),
  );
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
  return {
    close: () => db.close(),
    prepare(sql: string): SqliteStatement {
      const stmt: StatementSync = db.prepare(sql);
      return {
        reader: stmt.columns().length > 0,
        all: (parameters) => stmt.all(...toParams(parameters)) as unknown[],
        run: (parameters) => {
          const r = stmt.run(...toParams(parameters));
          return { changes: r.changes, lastInsertRowid: r.lastInsertRowid };
        },
        iterate: (parameters) => stmt.iterate(...toParams(parameters)) as IterableIterator<unknown>,
      };
    },
  };
}
