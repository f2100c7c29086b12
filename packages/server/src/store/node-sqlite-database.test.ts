import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { isDenvError } from "@denv/protocol";
import { openNodeSqlite } from "./node-sqlite-database.ts";

test("a full store is refused as insufficient_storage naming where, and what was written before is intact", () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-sqlite-full-"));
  const path = join(dir, "denv.sqlite");
  const db = openNodeSqlite(path);
  try {
    db.prepare("create table t (id integer primary key, body blob)").run([]);
    // SQLite's own SQLITE_FULL, as a full disk gives it: the database may not grow past 64 pages.
    db.prepare("pragma max_page_count = 64").all([]);
    const row = new Uint8Array(16 * 1024);
    let written = 0;
    let refused: unknown;
    for (let i = 0; i < 1000 && !refused; i++) {
      try {
        db.prepare("insert into t (body) values (?)").run([row]);
        written++;
      } catch (err) {
        refused = err;
      }
    }
    assert.ok(isDenvError(refused), `refused as denv's error: ${String(refused)}`);
    assert.equal(refused.code, "insufficient_storage");
    assert.ok(refused.message.includes(path), refused.message);
    assert.match(refused.message, /nothing was written: free space there and try again/);
    const count = db.prepare("select count(*) as n from t").all([]) as { n: number }[];
    assert.equal(Number(count[0]?.n), written, "every acknowledged row is there, the refused one is not");
    db.prepare("pragma max_page_count = 1000000").all([]);
    db.prepare("insert into t (body) values (?)").run([row]);
  } finally {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
