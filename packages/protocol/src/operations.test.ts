import assert from "node:assert/strict";
import { test } from "node:test";
import { hostMessageSchema } from "./messages.ts";
import { OP_METHODS, OPERATIONS } from "./operations.ts";

test("every operation has a params and a result schema, and the message schema names them all", () => {
  assert.ok(OP_METHODS.length >= 20);
  for (const m of OP_METHODS) {
    assert.ok(OPERATIONS[m].params, m);
    assert.ok(OPERATIONS[m].result, m);
  }
});

test("params are strict: unknown fields, wrong ids and missing fields are refused", () => {
  const streams = { stdout_stream: 1, stderr_stream: 2 };
  const ok = OPERATIONS.exec.params.safeParse({
    stack_id: "stk_0123456789ab",
    command: ["true"],
    ...streams,
  });
  assert.ok(ok.success);
  for (const bad of [
    { stack_id: "stk_0123456789ab", command: ["true"], environment_id: "x", ...streams },
    { stack_id: "env/../x", command: ["true"], ...streams },
    { stack_id: "stk_0123456789ab", ...streams },
    // Output goes on streams: an exec without them, or with a stream id out of range, is refused.
    { stack_id: "stk_0123456789ab", command: ["true"] },
    { stack_id: "stk_0123456789ab", command: ["true"], stdout_stream: 0, stderr_stream: 2 },
    { stack_id: "stk_0123456789ab", command: ["true"], ...streams, stdin_stream: 2 ** 32 },
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

test("a host's capacity with a memory reading that is not a size is refused whole", () => {
  const capacity = { total_bytes: 1, free_bytes: 1, cpus: 2, memory_bytes: 8 };
  assert.ok(
    hostMessageSchema.safeParse({ type: "heartbeat", capacity }).success,
    "older hosts say no free memory",
  );
  assert.ok(
    hostMessageSchema.safeParse({ type: "heartbeat", capacity: { ...capacity, memory_free_bytes: 4 } })
      .success,
  );
  for (const bad of [-1, Number.POSITIVE_INFINITY, "4", null])
    assert.equal(
      hostMessageSchema.safeParse({ type: "heartbeat", capacity: { ...capacity, memory_free_bytes: bad } })
        .success,
      false,
      `memory_free_bytes ${String(bad)}`,
    );
});
