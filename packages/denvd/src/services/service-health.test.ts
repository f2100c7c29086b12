import assert from "node:assert/strict";
import { test } from "node:test";
import type { ResolvedService } from "@denv/protocol";
import type { StackRecord } from "../host/state-store.ts";
import type { StackContext } from "../stack/stack-context.ts";
import { waitServiceHealthy } from "./service-health.ts";

const FLOOR_MS = 300;

/**
 * A one-service stack whose healthcheck passes once `passes()` says so. Its container id is not an
 * engine's, so its CPU time cannot be read and it always counts as idle: past the deadline the
 * wait decides at once.
 */
function world(passes: () => boolean) {
  const service = {
    healthcheck: {
      test: ["CMD", "check"],
      interval_ms: 10,
      timeout_ms: 1000,
      retries: 0,
      start_period_ms: 0,
    },
    healthcheck_disabled: false,
  } as unknown as ResolvedService;
  const stack = {
    spec: { services: { app: service } },
    containers: { app: "no-cgroup" },
  } as unknown as StackRecord;
  let checks = 0;
  const ctx = {
    options: { healthPollMs: 20, healthDeadline: { floorMs: FLOOR_MS, progressWindowMs: 50 } },
    runtime: { inspectContainer: async () => ({ running: true, exitCode: null }) },
    runIn: async () => {
      checks++;
      const ok = passes();
      return { exitCode: ok ? 0 : 1, stdout: Buffer.alloc(0), stderr: Buffer.from(ok ? "" : "not yet") };
    },
  } as unknown as StackContext;
  return { ctx, stack, checks: () => checks };
}

test("a service that turns healthy as it goes idle, past its deadline, counts as healthy", async () => {
  const startedAt = performance.now();
  // Healthy from the deadline on: every check before it failed, and past it the service is idle.
  const { ctx, stack } = world(() => performance.now() - startedAt >= FLOOR_MS);
  const h = await waitServiceHealthy(ctx, stack, "app", startedAt);
  assert.equal(h.method, "healthcheck");
  assert.ok(h.healthy_ms >= FLOOR_MS, JSON.stringify(h));
  assert.ok(h.checks >= 2, JSON.stringify(h));
});

test("an idle service still unhealthy after its last check fails, with the check's output", async () => {
  const { ctx, stack, checks } = world(() => false);
  await assert.rejects(waitServiceHealthy(ctx, stack, "app", performance.now()), (err: Error) => {
    assert.match(err.message, /its deadline 300 ms\), and it was idle at the end \(last check: not yet\)/);
    return true;
  });
  assert.ok(checks() >= 2);
});
