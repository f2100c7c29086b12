import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { test } from "node:test";
import { processChildren } from "./process-children.ts";

test("a process's children are read from /proc; a pid that is not a positive integer or is gone has none", async () => {
  const child = spawn("sleep", ["30"]);
  try {
    assert.ok((await processChildren(process.pid)).includes(child.pid as number));
  } finally {
    child.kill();
  }
  for (const pid of [0, -1, 1.5, Number.NaN, 2 ** 22 + 12345])
    assert.deepEqual(await processChildren(pid), []);
});
