import assert from "node:assert/strict";
import { test } from "node:test";
import type { DiffEvidence } from "@denv/protocol";
import { compareDiffs, compareRuns, type ForkRun, lineDiff, sourcesOf } from "./replay-report.ts";

const step = (stdout: string, exit_code = 0) => ({ exit_code, stdout, stderr: "", timed_out: false, ms: 1 });
const vol = (digest: string, entries: [string, string][] = [["a", "1"]]) => ({
  digest,
  files: 1,
  bytes: 1,
  entries,
});
const run = (index: number, outs: string[], volumes: ForkRun["volumes"] = { home: vol("d") }): ForkRun => ({
  index,
  environment_id: `env_${index}`,
  error: null,
  steps: outs.map((o) => step(o)),
  volumes,
});

test("identical runs: identical, one digest, no divergence", () => {
  const r = compareRuns([run(1, ["a", "b"]), run(2, ["a", "b"]), run(3, ["a", "b"])]);
  assert.equal(r.identical, true);
  assert.equal(new Set(r.digests).size, 1);
  assert.equal(r.first_divergence, null);
});

test("a step whose output carries the time: the first divergence names the fork, the step, the lines and the clock", () => {
  const r = compareRuns([
    run(1, ["start", "2026-12-01T03:49:57,295000000+00:00\n"]),
    run(2, ["start", "2026-12-01T03:49:57,295000000+00:00\n"]),
    run(3, ["start", "2026-12-01T03:50:01,918237112+00:00\n"]),
  ]);
  assert.equal(r.identical, false);
  assert.deepEqual(r.divergent_forks, [3]);
  const d = r.first_divergence;
  assert.equal(d?.fork, 3);
  assert.equal(d?.step, 1);
  assert.equal(d?.what, "stdout");
  assert.deepEqual(d?.diff, [
    "line 1:",
    "- 2026-12-01T03:49:57,295000000+00:00",
    "+ 2026-12-01T03:50:01,918237112+00:00",
  ]);
  assert.deepEqual(d?.sources, ["clock"]);
});

test("the sources named: randomness, network addresses and MACs, ordering", () => {
  assert.deepEqual(sourcesOf(["id 3f2a9c1b7d4e"], ["id 9a8b7c6d5e4f"]), ["randomness"]);
  assert.deepEqual(sourcesOf(["inet 172.20.3.4"], ["inet 172.31.9.4"]), ["network"]);
  assert.deepEqual(sourcesOf(["link/ether 02:42:ac:14:00:02"], ["link/ether 02:42:ac:1f:00:09"]), [
    "network",
  ]);
  assert.deepEqual(sourcesOf(["b", "a"], ["a", "b"]), ["ordering"]);
  assert.deepEqual(sourcesOf(["3 rows"], ["4 rows"]), []);
  assert.deepEqual(sourcesOf(["1796098581123456789"], ["1796098581987654321"]), ["clock"]);
  assert.deepEqual(sourcesOf(["1796098581"], ["1796098583"]), ["clock"]);
  assert.deepEqual(sourcesOf(["b8c1e0f2d93a47aa"], ["0f3e9a1c2b7d6e54"]), ["randomness"]);
  const { before, after } = lineDiff("x\ny\nz", "x\nY\nz\nextra");
  assert.deepEqual(before, ["y"]);
  assert.deepEqual(after, ["Y", "extra"]);
});

test("the steps agree and a volume differs: the volume and its files that differ are named", () => {
  const r = compareRuns([
    run(1, ["a"], {
      pg: vol("p1", [
        ["base/1", "x"],
        ["base/2", "y"],
      ]),
      home: vol("h"),
    }),
    run(2, ["a"], {
      pg: vol("p2", [
        ["base/1", "x"],
        ["base/2", "z"],
        ["base/3", "w"],
      ]),
      home: vol("h"),
    }),
  ]);
  assert.equal(r.first_divergence?.volume, "pg");
  assert.equal(r.first_divergence?.step, null);
  assert.deepEqual(r.first_divergence?.diff, ["~ base/2 (differs)", "+ base/3 (only in this fork)"]);
});

test("an exit code that differs, and a fork that could not run, are divergences too", () => {
  const a = run(1, ["same"]);
  const b = { ...run(2, ["same"]), steps: [step("same", 1)] };
  assert.equal(compareRuns([a, b]).first_divergence?.what, "exit_code");
  const failed: ForkRun = { ...run(2, []), error: "the fork failed: capacity" };
  const r = compareRuns([a, failed]);
  assert.equal(r.identical, false);
  assert.equal(r.failed, 1);
  assert.equal(r.first_divergence?.what, "error");
  assert.deepEqual(r.first_divergence?.diff, ["the fork failed: capacity"]);
  assert.equal(compareRuns([failed]).identical, false, "no run at all is not identical");
});

test("diffs: forks that changed the same agree whatever their stack, time and engine bookkeeping; one that differs is named", () => {
  const counts = { created: 1, deleted: 0, modified: 0, bytes_added: 6, bytes_removed: 0 };
  const diff = (stack: string, ms: number, path: string, walFiles: number): DiffEvidence => ({
    against: "ver_000000000001",
    of: `${stack} (live)`,
    volumes: {
      home: { ...counts, method: "inode-ctime", left_out: [] },
      pg: {
        ...counts,
        created: 0,
        bytes_added: 0,
        method: "inode-ctime",
        left_out: [{ why: "pg_wal/", entries: walFiles }],
      },
    },
    summary: counts,
    entries: [{ volume: "home", path, change: "created", type: "file", bytes_after: 6 }],
    truncated: false,
    bounds: { max_entries: 500, max_text_bytes: 65536, max_diff_bytes: 65536, max_compare_bytes: 1 },
    databases: [
      { service: "db", engine: "postgres", database: "postgres", approximate: true, how: "", tables: [] },
    ],
    ms,
  });
  const withDiff = (index: number, d: DiffEvidence | null): ForkRun => ({ ...run(index, ["a"]), diff: d });
  assert.deepEqual(
    compareDiffs([
      withDiff(1, diff("stk_a", 10, "new.txt", 1)),
      withDiff(2, diff("stk_b", 99, "new.txt", 3)),
      withDiff(3, null),
    ]),
    { identical: true, divergent_forks: [] },
  );
  assert.deepEqual(
    compareDiffs([
      withDiff(1, diff("stk_a", 1, "new.txt", 1)),
      withDiff(2, diff("stk_b", 1, "other.txt", 1)),
    ]),
    { identical: false, divergent_forks: [2] },
  );
  assert.deepEqual(compareDiffs([withDiff(1, diff("stk_a", 1, "new.txt", 1))]), {
    identical: null,
    divergent_forks: [],
  });
});
