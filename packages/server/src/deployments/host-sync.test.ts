import assert from "node:assert/strict";
import { test } from "node:test";
import { statusOnHost } from "./host-sync.ts";

test("an environment's status follows its stack on the host", () => {
  assert.equal(statusOnHost(undefined), "lost");
  assert.equal(statusOnHost({ status: "running" }), "running");
  assert.equal(statusOnHost({ status: "running", frozen: [] }), "running");
  assert.equal(statusOnHost({ status: "running", frozen: ["opsbox"] }), "frozen");
  assert.equal(statusOnHost({ status: "lost" }), "lost");
  assert.equal(statusOnHost({ status: "failed" }), "failed");
  // Under way on the host: the operation doing it says what it becomes.
  for (const s of ["creating", "restoring", "destroying", "anything else"])
    assert.equal(statusOnHost({ status: s }), null);
});
