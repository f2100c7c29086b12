import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { digestTree } from "./volume-digest.ts";

const root = mkdtempSync(join(tmpdir(), "denv-digest-"));
after(() => rmSync(root, { recursive: true, force: true }));

function tree(name: string): string {
  const d = join(root, name);
  mkdirSync(join(d, "sub/deeper"), { recursive: true });
  writeFileSync(join(d, "a.txt"), "alpha\n");
  writeFileSync(join(d, "sub/b.bin"), Buffer.alloc(3 * 1024 * 1024, 7));
  writeFileSync(join(d, "sub/deeper/c"), "");
  return d;
}

test("the same content gives the same digest; times do not count, content, mode and names do", async () => {
  const a = await digestTree(tree("one"));
  const b = tree("two");
  utimesSync(join(b, "a.txt"), new Date(0), new Date(0));
  assert.equal((await digestTree(b)).digest, a.digest);
  assert.equal(a.files, 3);
  assert.equal(a.bytes, 6 + 3 * 1024 * 1024);
  assert.deepEqual(
    a.entries.map(([p]) => p),
    ["a.txt", "sub", "sub/b.bin", "sub/deeper", "sub/deeper/c"],
  );
  writeFileSync(join(b, "sub/deeper/c"), "x");
  const changed = await digestTree(b);
  assert.notEqual(changed.digest, a.digest);
  // The entry that changed is the one whose line differs.
  const differ = changed.entries
    .filter(([p, d]) => a.entries.find(([q]) => q === p)?.[1] !== d)
    .map(([p]) => p);
  assert.deepEqual(differ, ["sub/deeper/c"]);
  writeFileSync(join(b, "sub/deeper/c"), "");
  chmodSync(join(b, "a.txt"), 0o600);
  assert.notEqual((await digestTree(b)).digest, a.digest);
});

test("a container's links are digested by their target text and never followed; a FIFO does not hang the walk", async () => {
  const d = tree("hostile");
  symlinkSync("/etc/shadow", join(d, "to-shadow"));
  symlinkSync("/", join(d, "to-root"));
  symlinkSync("loop", join(d, "loop"));
  execFileSync("mkfifo", [join(d, "fifo")]);
  const r = await digestTree(d);
  assert.equal(r.files, 3, "nothing outside the tree was read");
  const other = tree("hostile-2");
  symlinkSync("/etc/passwd", join(other, "to-shadow"));
  symlinkSync("/", join(other, "to-root"));
  symlinkSync("loop", join(other, "loop"));
  execFileSync("mkfifo", [join(other, "fifo")]);
  assert.notEqual((await digestTree(other)).digest, r.digest, "a link's target is part of the state");
});

test("too many entries is refused with the bound named, not walked forever", async () => {
  const d = join(root, "many");
  mkdirSync(d);
  for (let i = 0; i < 50; i++) writeFileSync(join(d, `f${i}`), "");
  await assert.rejects(digestTree(d, { maxEntries: 20 }), /more than 20 entries/);
  const listed = await digestTree(d, { maxListed: 10 });
  assert.equal(listed.entries.length, 10);
  assert.equal(listed.listed_all, false);
});

test("a PostgreSQL data directory leaves out what a base backup leaves out, and says so", async () => {
  const d = join(root, "pgdata");
  mkdirSync(join(d, "pg_wal"), { recursive: true });
  mkdirSync(join(d, "base/5"), { recursive: true });
  mkdirSync(join(d, "global"), { recursive: true });
  mkdirSync(join(d, "pg_stat_tmp"), { recursive: true });
  writeFileSync(join(d, "PG_VERSION"), "15\n");
  writeFileSync(join(d, "base/5/16384"), "table");
  writeFileSync(join(d, "global/pg_control"), "control");
  const before = await digestTree(d);
  writeFileSync(join(d, "pg_wal/000000010000000000000001"), "wal bytes");
  writeFileSync(join(d, "base/5/pg_internal.init"), "pointers");
  writeFileSync(join(d, "postmaster.pid"), "1\n");
  writeFileSync(join(d, "pg_stat_tmp/global.stat"), "x");
  const afterNoise = await digestTree(d);
  assert.equal(afterNoise.digest, before.digest);
  assert.equal(afterNoise.left_out.length, 4);
  assert.ok(afterNoise.left_out.some((x) => x.startsWith("pg_wal/")));
  writeFileSync(join(d, "base/5/16384"), "table changed");
  assert.notEqual((await digestTree(d)).digest, before.digest, "the tables themselves count");
  // The same names outside a data directory are ordinary files.
  const plain = join(root, "plain");
  mkdirSync(join(plain, "pg_wal"), { recursive: true });
  writeFileSync(join(plain, "pg_wal/x"), "1");
  const p = await digestTree(plain);
  assert.equal(p.files, 1);
  assert.deepEqual(p.left_out, []);
});
