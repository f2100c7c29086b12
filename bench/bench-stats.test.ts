import assert from "node:assert/strict";
import { test } from "node:test";
import {
  atLeast,
  atMost,
  interval,
  medianInterval,
  metricOf,
  percentile,
  ratioInterval,
  shuffled,
  withSpread,
} from "./bench-stats.ts";

test("percentiles interpolate: the median of two is their mean, not the lower one", () => {
  assert.equal(percentile([10, 20], 0.5), 15);
  assert.equal(percentile([1, 2, 3, 4], 0.5), 2.5);
  assert.equal(percentile([5, 1, 3], 0.5), 3);
  assert.equal(percentile([0, 100], 0.05), 5);
  assert.equal(percentile([0, 100], 0.95), 95);
  assert.ok(Number.isNaN(percentile([], 0.5)));
});

test("the median's interval holds the median and narrows with more samples", () => {
  const few = [100, 140, 90, 180, 120];
  const many = Array.from({ length: 60 }, (_, i) => few[i % few.length] as number);
  const [lo5, hi5] = medianInterval(few);
  const [lo60, hi60] = medianInterval(many);
  assert.ok(lo5 <= 120 && 120 <= hi5);
  assert.ok(hi60 - lo60 < hi5 - lo5, `${[lo60, hi60]} vs ${[lo5, hi5]}`);
  assert.deepEqual(medianInterval(few), medianInterval(few), "seeded: the same samples, the same interval");
});

test("a goal is met only when the whole interval clears it", () => {
  const m = metricOf([400, 450, 480, 520, 610, 490, 470, 505, 460, 515], "ms");
  assert.equal(m.value, 485);
  const [lo, hi] = interval(m);
  assert.ok(lo < 485 && hi > 485);
  assert.equal(atMost(interval(m), 1000), true);
  assert.equal(atMost(interval(m), 485), false, "the median alone under the goal is not enough");
  assert.equal(atLeast(interval(m), 300), true);
  assert.equal(atLeast(interval(m), 485), false);
  assert.equal(atMost(interval(undefined), 1), false, "not measured is not met");
});

test("a ratio's interval spans both intervals; spread is added to bare samples", () => {
  const a = { value: 10, unit: "ms", ci: [9, 11] as [number, number] };
  const b = { value: 5, unit: "ms", ci: [4, 5] as [number, number] };
  assert.deepEqual(ratioInterval(a, b), [9 / 5, 11 / 4]);
  const bare = withSpread({ value: 3, unit: "ms", samples: [1, 2, 3, 4, 5] });
  assert.equal(bare.value, 3);
  assert.equal(bare.p5, 1.2);
  assert.equal(bare.p95, 4.8);
  assert.ok(bare.ci);
});

test("interleaving shuffles deterministically and keeps every contestant", () => {
  const order = shuffled(["denv", "floor", "peer"], 7);
  assert.deepEqual([...order].sort(), ["denv", "floor", "peer"]);
  assert.deepEqual(shuffled(["denv", "floor", "peer"], 7), order);
  const seen = new Set(Array.from({ length: 20 }, (_, i) => shuffled(["a", "b", "c"], i).join("")));
  assert.ok(seen.size > 1, "rounds run in different orders");
});
