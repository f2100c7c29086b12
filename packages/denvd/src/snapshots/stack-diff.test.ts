import assert from "node:assert/strict";
import { test } from "node:test";
import { parseTableCounts } from "./stack-diff.ts";

const hex = (s: string) => Buffer.from(s).toString("hex");

test("table counts: names come as hex, so a table named with a tab or a newline is one row, escaped", () => {
  const out = [
    `${hex("public.orders")}\t7\t3\t5`,
    `${hex("public.evil\t1\t2\n3")}\t1\t0\t0`,
    "not hex\t1\t2\t3",
    `${hex("public.x")}\t-1\t0\t0`,
    `${hex("public.y")}\t1\t2`,
    "",
  ].join("\n");
  assert.deepEqual(parseTableCounts(out), [
    { table: "public.orders", inserted: 7, updated: 3, deleted: 5 },
    { table: "public.evil\\t1\\t2\\n3", inserted: 1, updated: 0, deleted: 0 },
  ]);
});
