import assert from "node:assert/strict";
import { test } from "node:test";
import { type Datasheet, datasheetMarkdown } from "./datasheet.ts";

const sheet: Datasheet = {
  version: {
    id: "ver_0123456789ab",
    project: "shop",
    environment: "alpha",
    kind: "rl-environment",
    host_id: "host_1",
    spec_hash: "sha256:x",
    created_at: "2026-12-06T10:00:00Z",
    images: { db: "postgres@sha256:a", box: "box@sha256:b" },
  },
  clock: { mode: "frozen", at: "2026-12-06T10:00:00Z", reach: null, warnings: [] },
  volumes: {
    pg: { bytes: 48 * 1024 ** 2, snapshot_id: "snp_1" },
    home: { bytes: 4096, snapshot_id: "snp_2" },
  },
  frozen_ms: 16,
  live: null,
  caps: { db: { memory_bytes: 4294967296, pids: 512, cpus: 2 } },
  egress: "deny",
  agent: "box",
  verifier: null,
  replays: [
    {
      id: "rpl_old",
      status: "diverged",
      forks: 2,
      identical: false,
      first_divergence: null,
      diff: null,
      created_at: "2026-12-06T10:01:00Z",
    },
    {
      id: "rpl_new",
      status: "identical",
      forks: 4,
      identical: true,
      first_divergence: null,
      diff: null,
      created_at: "2026-12-06T10:05:00Z",
    },
  ],
  promotes: [
    {
      deployment_id: "dep_1",
      target: "staging",
      status: "succeeded",
      reason: null,
      created_at: "2026-12-06T10:06:00Z",
      gates: [
        {
          name: "consistency",
          status: "succeeded",
          reason: null,
          evidence: {
            amcheck: { db: { exit_code: 0 } },
            volumes: { pg: {}, home: {} },
            ms: 812,
            note: "x".repeat(300),
          },
        },
      ],
    },
  ],
  verifies: [
    { deployment_id: "dep_2", environment: "rollout-01", status: "succeeded", reward: 1, created_at: "t" },
    { deployment_id: "dep_3", environment: "rollout-02", status: "succeeded", reward: 0, created_at: "t" },
  ],
};

test("the data sheet for people: a summary first, sizes in units, a gate's evidence a line a field", () => {
  const md = datasheetMarkdown(sheet);
  const summary = md.split("\n## ")[0] ?? "";
  assert.match(summary, /- services: 2 \(db, box\)/);
  assert.match(summary, /- volumes: 2, 48\.0 MiB in all; frozen for 16 ms/);
  assert.match(summary, /- replays: 2, the last identical/);
  assert.match(summary, /- promotes: 1, the last to staging succeeded/);
  assert.match(summary, /- verifies on its forks: 2, mean reward 0\.50/);
  assert.match(md, /\| pg \| 48 MiB \| snp_1 \|/);
  assert.match(md, /\| db \| 4 GiB \| 512 \| 2 \|/);
  assert.ok(!md.includes("4294967296"), "no raw byte counts");
  // The gate's evidence: scalars as they are (long ones cut), records by their keys, no JSON dump.
  assert.match(md, /- ms: ` 812 `/);
  assert.match(md, /- volumes: 2 fields \(pg, home\)/);
  assert.match(md, /- note: ` x{160}… `/);
  assert.ok(!md.includes('```json\n{\n  "amcheck"'), "no raw JSON of the evidence");
});

test("a live version's data sheet lists each service's processes and what was kept disk-only; a name is a cell", () => {
  const md = datasheetMarkdown({
    ...sheet,
    live: {
      services: { db: { checkpoint_bytes: 3 * 1024 ** 2, layer_bytes: 10_240, dump_ms: 212 } },
      skipped: { "box|x": "process python3 (pid 9): it uses io_uring" },
    },
  });
  assert.match(md, /## Processes \(a live version\)/);
  assert.match(md, /\| db \| 3(\.0)? MiB \| 10(\.0)? KiB \| 212 ms \|/);
  assert.match(md, /\| box\\\|x \| disk-only: process python3 \(pid 9\): it uses io_uring \| \| \|/);
  assert.doesNotMatch(datasheetMarkdown(sheet), /Processes/);
});
