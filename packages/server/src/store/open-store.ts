/**
 * Opens the store: embedded SQLite in a data directory by default, or PostgreSQL when given a
 * postgres:// URL. The queries and the migrations are Kysely's, written once for both.
 */
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from "node:fs";
import { join } from "node:path";
import { type Dialect, Kysely, Migrator, PostgresDialect, SqliteDialect, sql } from "kysely";
import { migrationProvider } from "./migrations.ts";
import { openNodeSqlite } from "./node-sqlite-database.ts";
import { openPostgresPool, type StorePool } from "./postgres-pool.ts";
import type { Database } from "./schema.ts";

export type Store = Kysely<Database>;

export interface StoreOptions {
  /** For SQLite: the directory holding denv.sqlite. */
  dataDir: string;
  /** postgres://user:password@host:port/db — when set, PostgreSQL is used instead of SQLite. */
  databaseUrl?: string;
  /** How long a query waits for a PostgreSQL that is away (default STORE_WAIT_MS). */
  waitMs?: number;
}

/** Each PostgreSQL store's pool, for the readiness probe's reason. */
const pools = new WeakMap<Store, StorePool>();
/** How long the readiness probe waits on the store before it says it is not ready. */
const PING_WAIT_MS = 2000;

export async function openStore(options: StoreOptions | string): Promise<Store> {
  const o = typeof options === "string" ? { dataDir: options } : options;
  let dialect: Dialect;
  let pool: StorePool | null = null;
  if (o.databaseUrl) {
    if (!/^postgres(ql)?:\/\//.test(o.databaseUrl))
      throw new Error("the database URL must start with postgres://");
    // pg is loaded by servers on PostgreSQL only.
    const { default: pg } = await import("pg");
    pool = openPostgresPool(pg.Pool, o.databaseUrl, { waitMs: o.waitMs });
    dialect = new PostgresDialect({ pool });
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
  if (pool) pools.set(db, pool);
  const { error, results } = await new Migrator({ db, provider: migrationProvider }).migrateToLatest();
  if (error) {
    await db.destroy();
    const failed = results?.find((r) => r.status === "Error")?.migrationName;
    throw new Error(`store migration ${failed ?? ""} failed: ${(error as Error).message}`);
  }
  return db;
}

/**
 * Whether the store answers (the readiness probe's check): throws what the database said, or, when
 * it is away (a query then waits for it), why it is away, within PING_WAIT_MS.
 */
export async function pingStore(store: Store): Promise<void> {
  const pool = pools.get(store);
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(pool?.away() ?? `no answer within ${PING_WAIT_MS} ms`)),
      PING_WAIT_MS,
    );
  });
  const ping = sql`select 1`.execute(store);
  ping.catch(() => {});
  try {
    if (pool?.away()) throw new Error(pool.away() as string);
    await Promise.race([ping, late]);
  } finally {
    clearTimeout(timer);
  }
}
