import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  appendFileSync,
  chmodSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { DiffBudget, diffTrees } from "./tree-diff.ts";

describe("diffTrees (copies: every file compared by its bytes)", () => {
  let root: string;
  let a: string;
  let b: string;

  before(() => {
    root = mkdtempSync(join(tmpdir(), "tree-diff-"));
    a = join(root, "a");
    mkdirSync(join(a, "etc/conf.d"), { recursive: true });
    writeFileSync(join(a, "etc/app.conf"), "port = 80\nname = web\nlevel = 1\n");
    writeFileSync(join(a, "etc/conf.d/old.conf"), "x\n");
    writeFileSync(join(a, "same.txt"), "same\n");
    writeFileSync(join(a, "touched.txt"), "same bytes\n");
    writeFileSync(join(a, "bin.dat"), Buffer.from([0, 1, 2, 3]));
    writeFileSync(join(a, "mode.sh"), "#!/bin/sh\n");
    mkdirSync(join(a, "gone/deeper"), { recursive: true });
    writeFileSync(join(a, "gone/deeper/f"), "1234");
    symlinkSync("/etc/passwd", join(a, "link"));
    execFileSync("cp", ["-a", a, join(root, "b")]);
    b = join(root, "b");
    writeFileSync(join(b, "etc/app.conf"), "port = 8080\nname = web\nlevel = 1\n");
    unlinkSync(join(b, "etc/conf.d/old.conf"));
    writeFileSync(join(b, "new.txt"), "hello\n");
    execFileSync("touch", ["-d", "2001-01-01", join(b, "touched.txt")]);
    writeFileSync(join(b, "bin.dat"), Buffer.from([0, 1, 2, 4]));
    chmodSync(join(b, "mode.sh"), 0o755);
    rmSync(join(b, "gone"), { recursive: true });
    unlinkSync(join(b, "link"));
    symlinkSync("/root/.ssh/id_rsa", join(b, "link"));
    execFileSync("mkfifo", [join(b, "pipe")]);
    // A name's bytes as they are: "bad", a newline and 0xff (not UTF-8).
    writeFileSync(Buffer.concat([Buffer.from(`${b}/`), Buffer.from([0x62, 0x61, 0x64, 0x0a, 0xff])]), "x");
    appendFileSync(join(b, "same.txt"), "");
  });
  after(() => rmSync(root, { recursive: true, force: true }));

  it("reports each change exactly, in path order, and nothing unchanged", async () => {
    const budget = new DiffBudget();
    const { method, left_out, ...counts } = await diffTrees("data", a, b, budget);
    assert.equal(method, "bytes", "a copy shares no inodes");
    assert.deepEqual(left_out, []);
    const byPath = new Map(budget.entries.map((e) => [e.path, e]));
    assert.deepEqual(
      budget.entries.map((e) => `${e.change} ${e.path}`),
      [
        "created bad\\n\\xff",
        "modified bin.dat",
        "modified etc/app.conf",
        "deleted etc/conf.d/old.conf",
        "deleted gone",
        "deleted gone/deeper",
        "deleted gone/deeper/f",
        "modified link",
        "modified mode.sh",
        "created new.txt",
        "created pipe",
      ],
    );
    assert.deepEqual(counts, { created: 3, deleted: 4, modified: 4, bytes_added: 9, bytes_removed: 6 });
    const conf = byPath.get("etc/app.conf");
    assert.deepEqual(conf?.changed, ["content"]);
    assert.match(
      conf?.diff ?? "",
      /^--- a\/etc\/app.conf\n\+\+\+ b\/etc\/app.conf\n@@ -1,3 \+1,3 @@\n-port = 80\n\+port = 8080\n name = web\n/,
    );
    assert.equal(byPath.get("bin.dat")?.diff_omitted, "binary");
    assert.deepEqual(byPath.get("mode.sh")?.changed, ["mode"]);
    assert.equal(byPath.get("mode.sh")?.mode_after, 0o755);
    assert.equal(byPath.get("mode.sh")?.diff, undefined);
    const link = byPath.get("link");
    assert.deepEqual([link?.target_before, link?.target_after], ["/etc/passwd", "/root/.ssh/id_rsa"]);
    assert.equal(byPath.get("pipe")?.type, "fifo");
    const hostile = byPath.get("bad\\n\\xff");
    assert.equal(Buffer.from(hostile?.path_base64 ?? "", "base64").toString("hex"), "6261640aff");
    assert.equal(byPath.get("new.txt")?.diff, "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,1 @@\n+hello\n");
    assert.ok(!byPath.has("touched.txt"), "a time alone is not a change");
    assert.ok(!byPath.has("same.txt"));
  });

  it("an identical copy has no changes; the bound lists the first and counts the rest", async () => {
    const empty = new DiffBudget();
    assert.deepEqual(await diffTrees("data", a, a, empty), {
      method: "inode-ctime",
      left_out: [],
      created: 0,
      deleted: 0,
      modified: 0,
      bytes_added: 0,
      bytes_removed: 0,
    });
    assert.equal(empty.entries.length, 0);
    const small = new DiffBudget({ maxEntries: 2 });
    const counts = await diffTrees("data", a, b, small);
    assert.equal(small.entries.length, 2);
    assert.equal(small.truncated, true);
    assert.equal(counts.created + counts.deleted + counts.modified, 11);
  });

  it("past the compare budget a same-size file is reported as not compared, never as unchanged", async () => {
    const budget = new DiffBudget({ maxCompareBytes: 0 });
    await diffTrees("data", a, b, budget);
    const same = budget.entries.find((e) => e.path === "same.txt");
    assert.deepEqual([same?.changed, same?.content_compared], [["content"], false]);
  });
});

describe("diffTrees (a tree past the diff's bounds)", () => {
  let root: string;
  before(() => {
    root = mkdtempSync(join(tmpdir(), "tree-diff-bounds-"));
    mkdirSync(join(root, "a"));
    // The agent's other changes, beside a directory nested 300 deep (the attack nested 520).
    mkdirSync(join(root, "b"));
    writeFileSync(join(root, "b", "answer.txt"), "42\n");
    let deep = join(root, "b", "deep");
    mkdirSync(deep);
    for (let i = 0; i < 300; i++) {
      deep = join(deep, "d");
      mkdirSync(deep);
    }
    writeFileSync(join(deep, "hidden.txt"), "x");
  });
  after(() => rmSync(root, { recursive: true, force: true }));

  it("a subtree past the depth bound is named and left out; the rest is diffed", async () => {
    const budget = new DiffBudget();
    const counts = await diffTrees("data", join(root, "a"), join(root, "b"), budget);
    assert.ok(budget.entries.some((e) => e.path === "answer.txt" && e.change === "created"));
    assert.equal(budget.notDiffedCount, 1);
    const left = budget.notDiffed[0];
    assert.equal(left?.why, "depth");
    assert.equal(left?.volume, "data");
    assert.equal(left?.path.split("/").length, 257, "the first directory past 256 levels");
    assert.ok(!budget.entries.some((e) => e.path.endsWith("hidden.txt")));
    assert.ok(counts.created >= 257);
  });

  it("past its names or its time, the walk names what it left and goes no further", async () => {
    const few = new DiffBudget({ maxWalked: 3 });
    await diffTrees("data", join(root, "a"), join(root, "b"), few);
    assert.deepEqual(
      few.notDiffed.map((n) => [n.why, n.path]),
      [["entries", "deep/d"]],
    );
    let t = 0;
    const late = new DiffBudget({ maxWalkMs: 10 }, () => (t += 6));
    await diffTrees("data", join(root, "a"), join(root, "b"), late);
    assert.equal(late.notDiffed[0]?.why, "time");
    assert.ok(
      late.entries.some((e) => e.path === "answer.txt"),
      "what came before the time is kept",
    );
  });
});

describe("diffTrees (a PostgreSQL data directory)", () => {
  it("leaves out the engine's bookkeeping, counted, and lists the tables' files", async () => {
    const root = mkdtempSync(join(tmpdir(), "tree-diff-pg-"));
    try {
      const a = join(root, "a");
      mkdirSync(join(a, "pg_wal"), { recursive: true });
      mkdirSync(join(a, "global"));
      mkdirSync(join(a, "base/5"), { recursive: true });
      writeFileSync(join(a, "PG_VERSION"), "15\n");
      writeFileSync(join(a, "global/pg_control"), "c1");
      writeFileSync(join(a, "pg_wal/000000010000000000000001"), "w1");
      writeFileSync(join(a, "base/5/16384"), "page1");
      execFileSync("cp", ["-a", a, join(root, "b")]);
      const b = join(root, "b");
      writeFileSync(join(b, "global/pg_control"), "c2");
      writeFileSync(join(b, "pg_wal/000000010000000000000002"), "w2");
      writeFileSync(join(b, "postmaster.pid"), "1\n");
      writeFileSync(join(b, "base/5/16384"), "page2");
      const budget = new DiffBudget();
      const r = await diffTrees("pg", a, b, budget);
      assert.deepEqual(
        budget.entries.map((e) => `${e.change} ${e.path}`),
        ["modified base/5/16384"],
      );
      assert.deepEqual(r.left_out.map((l) => `${l.entries} ${l.why.split(":")[0]}`).sort(), [
        "1 global/pg_control",
        "1 pg_wal/",
        "1 postmaster.pid, postmaster.opts",
      ]);
      assert.equal(r.modified, 1);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe("diffTrees (hostile trees)", () => {
  it("a directory swapped for a link to / is reported as a link; nothing under / is read", async () => {
    const root = mkdtempSync(join(tmpdir(), "tree-diff-link-"));
    try {
      const a = join(root, "a");
      mkdirSync(join(a, "etc"), { recursive: true });
      writeFileSync(join(a, "etc/app.conf"), "x\n");
      execFileSync("cp", ["-a", a, join(root, "b")]);
      const b = join(root, "b");
      rmSync(join(b, "etc"), { recursive: true });
      symlinkSync("/", join(b, "etc"));
      // A loop, and a link to a FIFO: neither is followed nor opened.
      symlinkSync("loop", join(b, "loop"));
      execFileSync("mkfifo", [join(b, "fifo")]);
      symlinkSync("fifo", join(b, "to-fifo"));
      const budget = new DiffBudget();
      await diffTrees("data", a, b, budget);
      assert.deepEqual(
        budget.entries.map((e) => `${e.change} ${e.type} ${e.path} ${e.target_after ?? ""}`.trim()),
        [
          "modified symlink etc /",
          "deleted file etc/app.conf",
          "created fifo fifo",
          "created symlink loop loop",
          "created symlink to-fifo fifo",
        ],
      );
      assert.deepEqual(budget.entries[0]?.changed, ["type"]);
      assert.equal(budget.entries[0]?.type_before, "directory");
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
