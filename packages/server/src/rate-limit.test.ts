import assert from "node:assert/strict";
import { test } from "node:test";
import { clientBucketOf, RateLimiter } from "./rate-limit.ts";

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

test("client addresses count by IPv4 address and by IPv6 /64", () => {
  assert.equal(clientBucketOf("203.0.113.7"), "203.0.113.7");
  assert.equal(clientBucketOf("::ffff:203.0.113.7"), "203.0.113.7");
  const a = clientBucketOf("2001:db8:1:2:aaaa:bbbb:cccc:dddd");
  assert.equal(a, "2001:db8:1:2::/64");
  // Every address of one /64, however written, is one bucket; the next /64 is another.
  assert.equal(clientBucketOf("2001:0DB8:0001:0002::1"), a);
  assert.equal(clientBucketOf("[2001:db8:1:2::ffff]"), a);
  assert.equal(clientBucketOf("2001:db8:1:2::1.2.3.4"), a);
  assert.equal(clientBucketOf("fe80::1%eth0"), "fe80:0:0:0::/64");
  assert.notEqual(clientBucketOf("2001:db8:1:3::1"), a);
  assert.equal(clientBucketOf("::1"), "0:0:0:0::/64");
  assert.equal(clientBucketOf("2001:db8::"), "2001:db8:0:0::/64");
});
