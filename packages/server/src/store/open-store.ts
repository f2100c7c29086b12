/**
 * Opens the store: embedded SQLite in a data directory by default, or PostgreSQL when given a
 * postgres:// URL. The queries and the migrations are Kysely's, written once for both.
 */
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from "node:fs";
import { join } from "node:path";
import { type Dialect, Kysely, Migrator, PostgresDialect, SqliteDialect, sql } from "kysely";
import { serversOwnSocket } from "../outbound-guard.ts";
import { migrationProvider } from "./migrations.ts";
import { openNodeSqlite } from "./node-sqlite-database.ts";
import type { Database } from "./schema.ts";

export type Store = Kysely<Database>;

export interface StoreOptions {
  /** For SQLite: the directory holding denv.sqlite. */
  dataDir: string;
  /** postgres://user:password@host:port/db — when set, PostgreSQL is used instead of SQLite. */
  databaseUrl?: string;
}

export async function openStore(options: StoreOptions | string): Promise<Store> {
  const o = typeof options === "string" ? { dataDir: options } : options;
  let dialect: Dialect;
  if (o.databaseUrl) {
    if (!/^postgres(ql)?:\/\//.test(o.databaseUrl))
      throw new Error("the database URL must start with postgres://");
    // pg is loaded by servers on PostgreSQL only.
    const { default: pg } = await import("pg");
    // Its connections are the server's own: opened from within a team's outbound scope (a hosted
    // target's records), they are not held to the fetch policy (outbound-guard.ts).
    dialect = new PostgresDialect({
      pool: new pg.Pool({ connectionString: o.databaseUrl, max: 10, stream: serversOwnSocket }),
    });
  } else {
    // The store holds hashes of every key, sealed secrets and every team's records: only the
    // server's user reads it (the directory 0700, the database and its WAL files 0600, which SQLite
    // gives the mode of the database file when it creates them).
    mkdirSync(o.dataDir, { recursive: true, mode: 0o700 });
    chmodSync(o.dataDir, 0o700);
    const file = join(o.dataDir, "denv.sqlite");
    closeSync(openSync(file, "a", 0o600));
    for (const f of [file, `${file}-wal`, `${file}-shm`]) if (existsSync(f)) chmodSync(f, 0o600);
    dialect = new SqliteDialect({ database: openNodeSqlite(file) });
  }
  const db = new Kysely<Database>({ dialect });
  const { error, results } = await new Migrator({ db, provider: migrationProvider }).migrateToLatest();
  if (error) {
    await db.destroy();
    const failed = results?.find((r) => r.status === "Error")?.migrationName;
    throw new Error(`store migration ${failed ?? ""} failed: ${(error as Error).message}`);
  }
  return db;
}

/** Whether the store answers (the readiness probe's check): throws what the database said. */
export async function pingStore(store: Store): Promise<void> {
  await sql`select 1`.execute(store);
}
