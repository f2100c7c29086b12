import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { Kysely, Migrator, SqliteDialect } from "kysely";
import { migrationProvider } from "./migrations.ts";
import { openNodeSqlite } from "./node-sqlite-database.ts";
import { openStore } from "./open-store.ts";

test("0013 on SQLite: the versions table made again keeps every row, and takes a version with no host", async () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-migrate-"));
  try {
    // A store as the previous release left it, with a version on a host.
    const old = new Kysely<any>({
      dialect: new SqliteDialect({ database: openNodeSqlite(join(dir, "denv.sqlite")) }),
    });
    const upTo = await new Migrator({ db: old, provider: migrationProvider }).migrateTo("0012_targets");
    assert.equal(upTo.error, undefined);
    await old.insertInto("teams").values({ id: "team_a", name: "a", created_at: "2026-01-01" }).execute();
    await old
      .insertInto("versions")
      .values({
        id: "ver_000000000001",
        team_id: "team_a",
        project_id: "prj_1",
        environment_id: "env_1",
        host_id: "host_1",
        spec_json: "{}",
        spec_hash: "h",
        images_json: "{}",
        evidence_json: "{}",
        created_at: "2026-01-01",
      })
      .execute();
    await old.destroy();

    const store = await openStore(dir);
    try {
      const kept = await store.selectFrom("versions").selectAll().execute();
      assert.deepEqual(
        kept.map((v) => [v.id, v.host_id, v.target_id, v.snapshot_ref]),
        [["ver_000000000001", "host_1", "denvd", null]],
      );
      await store
        .insertInto("versions")
        .values({
          ...(kept[0] as (typeof kept)[number]),
          id: "ver_000000000002",
          host_id: null,
          target_id: "e2b",
          snapshot_ref: "abc:default",
        })
        .execute();
      const hosted = await store.selectFrom("versions").selectAll().where("host_id", "is", null).execute();
      assert.deepEqual(
        hosted.map((v) => [v.id, v.target_id, v.snapshot_ref]),
        [["ver_000000000002", "e2b", "abc:default"]],
      );
      // Its team is still checked: a version of no team is refused.
      await assert.rejects(
        store
          .insertInto("versions")
          .values({ ...(kept[0] as (typeof kept)[number]), id: "ver_000000000003", team_id: "nobody" })
          .execute(),
        /FOREIGN KEY/,
      );
    } finally {
      await store.destroy();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
