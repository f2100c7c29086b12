import assert from "node:assert/strict";
import { test } from "node:test";
import {
  atLeast,
  atMost,
  interval,
  medianInterval,
  metricOf,
  pairedRatioInterval,
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

test("a paired ratio rests on the rounds' own ratios, so a slow round slows both contestants", () => {
  // The machine's pace swings round to round; denv is 0.81 to 0.86 of the peer in every round.
  const peer = { value: 0, unit: "/s", samples: [2.0, 3.0, 2.5, 1.5, 2.8] };
  const denv = { value: 0, unit: "/s", samples: [1.64, 2.43, 2.15, 1.23, 2.38] };
  const paired = pairedRatioInterval(withSpread(denv), withSpread(peer));
  assert.ok(paired);
  assert.equal(Math.round(paired.median * 100) / 100, 0.82);
  // Five rounds: the interval of the median is the lowest and the highest round.
  assert.deepEqual(
    paired.interval.map((x) => Math.round(x * 1000) / 1000),
    [0.81, 0.86],
  );
  assert.equal(atLeast(paired.interval, 0.8), true);
  // The extremes of the two intervals set the best round of one against the worst of the other.
  assert.ok(ratioInterval(withSpread(denv), withSpread(peer))[0] < 0.7);
  // One round under the goal is enough to miss it.
  const slow = { ...denv, samples: [1.64, 2.43, 2.15, 1.1, 2.38] };
  assert.equal(
    atLeast((pairedRatioInterval(slow, peer) as { interval: [number, number] }).interval, 0.8),
    false,
  );
  // Not pairable: no samples, different counts, a zero to divide by.
  assert.equal(pairedRatioInterval({ value: 1, unit: "ms" }, peer), undefined);
  assert.equal(pairedRatioInterval(denv, { ...peer, samples: [2, 3] }), undefined);
  assert.equal(pairedRatioInterval(denv, { ...peer, samples: [2, 3, 0, 1, 2] }), undefined);
});

test("interleaving shuffles deterministically and keeps every contestant", () => {
  const order = shuffled(["denv", "floor", "peer"], 7);
  assert.deepEqual([...order].sort(), ["denv", "floor", "peer"]);
  assert.deepEqual(shuffled(["denv", "floor", "peer"], 7), order);
  const seen = new Set(Array.from({ length: 20 }, (_, i) => shuffled(["a", "b", "c"], i).join("")));
  assert.ok(seen.size > 1, "rounds run in different orders");
});
