import assert from "node:assert/strict";
import { test } from "node:test";
import { RateLimiter } from "./rate-limit.ts";

test("a key spends its burst, then gets tokens back at its rate; other keys are not touched", () => {
  const r = new RateLimiter({ perSecond: 10, burst: 3 });
  const t0 = 1000;
  for (let i = 0; i < 3; i++) assert.deepEqual(r.take("a", 1, t0), { ok: true });
  assert.deepEqual(r.take("a", 1, t0), { ok: false, retryAfterMs: 100 });
  assert.deepEqual(r.take("b", 1, t0), { ok: true });
  assert.deepEqual(r.take("a", 1, t0 + 100), { ok: true });
  assert.equal(r.take("a", 1, t0 + 100).ok, false);
  // Idle for long, the bucket is full again, never more than the burst.
  for (let i = 0; i < 3; i++) assert.equal(r.take("a", 1, t0 + 60_000).ok, true);
  assert.equal(r.take("a", 1, t0 + 60_000).ok, false);
});
