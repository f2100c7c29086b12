import assert from "node:assert/strict";
import { test } from "node:test";
import type { DiffEvidence } from "@denv/protocol";
import { formatDiff, printable } from "./diff-command.ts";

test("a text diff's lines reach the terminal without the control sequences a container wrote", () => {
  assert.equal(printable("+\u001b]0;owned\u0007title\u001b[2J"), "+\\u{1b}]0;owned\\u{7}title\\u{1b}[2J");
  assert.equal(printable("+evil\u202etxt.sh\tok"), "+evil\\u{202e}txt.sh\tok");
});

test("one line per change, its text diff indented, the rows per table, and what was not listed", () => {
  const counts = { created: 2, deleted: 0, modified: 1, bytes_added: 6, bytes_removed: 0 };
  const d: DiffEvidence = {
    against: "ver_000000000001",
    of: "stk_000000000001 (live)",
    volumes: { home: { ...counts, method: "inode-ctime", left_out: [] } },
    summary: counts,
    entries: [
      {
        volume: "home",
        path: "new.txt",
        change: "created",
        type: "file",
        bytes_after: 6,
        diff: "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,1 @@\n+\u001b[31mred\n",
      },
      {
        volume: "home",
        path: "run.sh",
        change: "modified",
        type: "file",
        changed: ["mode"],
        mode_before: 0o644,
        mode_after: 0o755,
      },
    ],
    truncated: true,
    not_diffed: [{ volume: "home", path: "blind/d/d/\\x1b", why: "depth" }],
    not_diffed_count: 3,
    bounds: { max_entries: 2, max_text_bytes: 65536, max_diff_bytes: 1048576, max_compare_bytes: 1 },
    databases: [
      {
        service: "db",
        engine: "postgres",
        database: "postgres",
        approximate: true,
        how: "",
        tables: [{ table: "public.orders", inserted: 7, updated: 3, deleted: 5 }],
      },
    ],
    ms: 3,
  };
  assert.equal(
    formatDiff(d, { patch: true }),
    [
      "stk_000000000001 (live) against ver_000000000001: 2 created, 0 deleted, 1 modified (+6 B, -0 B)",
      "A  home/new.txt  6 B",
      "     --- /dev/null",
      "     +++ b/new.txt",
      "     @@ -0,0 +1,1 @@",
      "     +\\u{1b}[31mred",
      "M  home/run.sh  mode 0644 → 0755",
      "… 1 more changes counted, not listed (the bound is 2: --max-entries)",
      "?  home/blind/d/d/\\x1b/  not diffed: nested past the depth bound",
      "… 2 more subtrees not diffed, not listed",
      "db (postgres postgres, approximate): public.orders +7 ~3 -5",
      "",
    ].join("\n"),
  );
  assert.doesNotMatch(formatDiff(d, { patch: false }), /@@/);
});
