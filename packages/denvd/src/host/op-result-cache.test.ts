import assert from "node:assert/strict";
import { test } from "node:test";
import { OpResultCache } from "./op-result-cache.ts";

const settle = () => new Promise((r) => setImmediate(r));

test("results are kept within the byte budget, oldest out first, the newest always", async () => {
  const cache = new OpResultCache<string>({ maxBytes: 100, maxCount: 1000, maxForgotten: 10 });
  for (const id of ["a", "b", "c"]) cache.add(id, Promise.resolve("x".repeat(40)), (r) => r.length);
  await settle();
  assert.equal(cache.bytes, 80);
  assert.equal(cache.get("a"), undefined);
  assert.equal(cache.forgotten("a"), true);
  assert.equal(await cache.get("c"), "x".repeat(40));
  // One result larger than the whole budget is still kept: it is the newest.
  cache.add("huge", Promise.resolve("y".repeat(500)), (r) => r.length);
  await settle();
  assert.deepEqual(cache.ids(), ["huge"]);
  assert.equal(cache.forgotten("b") && cache.forgotten("c"), true);
});

test("a run under way is always there, whatever the budget; forgotten ids are bounded too", async () => {
  const cache = new OpResultCache<string>({ maxBytes: 1, maxCount: 1, maxForgotten: 2 });
  let finish!: (v: string) => void;
  cache.add("running", new Promise((r) => (finish = r)), (r) => r.length);
  for (const id of ["p", "q", "r", "s"]) cache.add(id, Promise.resolve(id), () => 10);
  await settle();
  assert.ok(cache.get("running"));
  assert.equal(cache.forgotten("p"), false, "the oldest forgotten ids go too");
  assert.equal(cache.forgotten("r"), true);
  finish("done");
  await settle();
  // Now the newest finished result, it is the one kept.
  assert.equal(await cache.get("running"), "done");
  assert.equal(cache.forgotten("s"), true);
});
