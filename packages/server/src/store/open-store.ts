/**
 * Opens the store: embedded SQLite in a data directory by default. The queries are Kysely's, so the
 * same code targets PostgreSQL through Kysely's PostgresDialect (not wired here yet: see README).
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { Kysely, Migrator, SqliteDialect } from "kysely";
import { migrationProvider } from "./migrations.ts";
import { openNodeSqlite } from "./node-sqlite-database.ts";
import type { Database } from "./schema.ts";

export type Store = Kysely<Database>;

export async function openStore(dataDir: string): Promise<Store> {
  mkdirSync(dataDir, { recursive: true });
  const db = new Kysely<Database>({
    dialect: new SqliteDialect({ database: openNodeSqlite(join(dataDir, "denv.sqlite")) }),
  });
  const { error, results } = await new Migrator({ db, provider: migrationProvider }).migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === "Error")?.migrationName;
    throw new Error(`store migration ${failed ?? ""} failed: ${(error as Error).message}`);
  }
  return db;
}
