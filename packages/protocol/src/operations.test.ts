import assert from "node:assert/strict";
import { test } from "node:test";
import { hostMessageSchema } from "./messages.ts";
import {
  DEFAULT_OP_DEADLINE_MS,
  OP_METHODS,
  OPERATIONS,
  operationDeadlineMs,
  operationEntry,
} from "./operations.ts";

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

test("a host's GPU inventory: a UUID that is not nvidia-smi's form, or too many GPUs, refuses the hello whole", () => {
  const hello = (gpus: unknown) => ({
    type: "hello",
    protocol: 1,
    arch: "x86_64",
    storage: "btrfs",
    capacity: { total_bytes: 1, free_bytes: 1, cpus: 2, memory_bytes: 8 },
    version: "x",
    known_ops: [],
    gpus,
  });
  const gpu = (uuid: string, index = 0) => ({ index, uuid, model: "NVIDIA H200", memory_bytes: 1 });
  const inv = (devices: unknown[]) => ({
    driver_version: "580",
    devices,
    device_nodes: [],
    cdi_devices: [],
    runtime: { nvidia: true, cdi: false },
    mode: "nvidia",
    note: null,
  });
  assert.ok(hostMessageSchema.safeParse(hello(inv([gpu("GPU-8a3c2b1e-1111")]))).success);
  for (const bad of ["GPU-1; rm -rf /", "", "GPU-\n1", "x".repeat(81)])
    assert.equal(hostMessageSchema.safeParse(hello(inv([gpu(bad)]))).success, false, JSON.stringify(bad));
  assert.equal(
    hostMessageSchema.safeParse(hello(inv([...Array(65).keys()].map((i) => gpu(`GPU-${i}`, i))))).success,
    false,
  );
  assert.equal(hostMessageSchema.safeParse(hello({ ...inv([]), mode: "rocm" })).success, false);
});

test("each operation's facts are in its entry, and agree with its schemas", () => {
  for (const m of OP_METHODS) {
    const e = operationEntry(m);
    // Journaled and told what a restart does with it, together or not at all.
    assert.equal(Boolean(e.journaled), e.afterCrash !== undefined, m);
    // Every param naming a byte stream is listed, and nothing else is.
    const shape = (e.params as unknown as { shape?: Record<string, unknown> }).shape ?? {};
    const streamKeys = Object.keys(shape).filter((k) => k.endsWith("_stream") || k === "stream_id");
    assert.deepEqual([...(e.streams ?? [])].sort(), streamKeys.sort(), m);
    const d = operationDeadlineMs(m);
    assert.ok(d > 0 && d <= DEFAULT_OP_DEADLINE_MS, `${m}: ${d}`);
  }
  // A restart goes forward only where going back is impossible.
  assert.equal(operationEntry("rollback").afterCrash, "finish");
  assert.equal(operationEntry("fork").afterCrash, "remove_stack_made");
  assert.equal(operationEntry("exec").journaled, undefined, "a command is not journaled");
});
