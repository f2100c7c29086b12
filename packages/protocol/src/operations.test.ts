import assert from "node:assert/strict";
import { test } from "node:test";
import { OP_METHODS, OPERATIONS } from "./operations.ts";

test("every operation has a params and a result schema, and the message schema names them all", () => {
  assert.ok(OP_METHODS.length >= 20);
  for (const m of OP_METHODS) {
    assert.ok(OPERATIONS[m].params, m);
    assert.ok(OPERATIONS[m].result, m);
  }
});

test("params are strict: unknown fields, wrong ids and missing fields are refused", () => {
  const ok = OPERATIONS.exec.params.safeParse({ stack_id: "stk_0123456789ab", command: ["true"] });
  assert.ok(ok.success);
  for (const bad of [
    { stack_id: "stk_0123456789ab", command: ["true"], environment_id: "x" },
    { stack_id: "env/../x", command: ["true"] },
    { stack_id: "stk_0123456789ab" },
  ])
    assert.equal(OPERATIONS.exec.params.safeParse(bad).success, false, JSON.stringify(bad));
  // Stacks an older host made (env_…) are still addressed.
  assert.ok(OPERATIONS.destroy.params.safeParse({ stack_id: "env_0123456789ab" }).success);
});

test("results are checked: a host's answer of the wrong shape is refused, extra fields dropped", () => {
  const r = OPERATIONS.snapshot.result.safeParse({
    version_id: "ver_0123456789ab",
    images: { db: "sha256:x" },
    evidence: {
      version_id: "ver_0123456789ab",
      frozen_ms: 40,
      checkpoint: [],
      datasets: {},
      health_after_ms: 3,
      surprise: true,
    },
  });
  assert.ok(r.success);
  assert.equal("surprise" in r.data.evidence, false);
  assert.equal(OPERATIONS.snapshot.result.safeParse({ version_id: "ver_../x" }).success, false);
  assert.equal(OPERATIONS.verify_grade.result.safeParse({ reward: "1" }).success, false);
});
