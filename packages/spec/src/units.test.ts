import assert from "node:assert/strict";
import { test } from "node:test";
import { parseBytes, parseCpus, parseDurationMs } from "./units.ts";

test("durations in Go's syntax become milliseconds", () => {
  assert.equal(parseDurationMs("2s"), 2000);
  assert.equal(parseDurationMs("1m30s"), 90_000);
  assert.equal(parseDurationMs("500ms"), 500);
  assert.equal(parseDurationMs("1.5h"), 5_400_000);
  assert.equal(parseDurationMs("0"), 0);
  assert.equal(parseDurationMs(10), 10_000);
  for (const bad of ["", "2", "s", "2 s", "1m30", "-1s", "1d", "abc"])
    assert.equal(parseDurationMs(bad), undefined, bad);
});

test("memory sizes are binary multiples in any of Compose's spellings", () => {
  assert.equal(parseBytes("2g"), 2 * 1024 ** 3);
  assert.equal(parseBytes("2G"), 2 * 1024 ** 3);
  assert.equal(parseBytes("2gb"), 2 * 1024 ** 3);
  assert.equal(parseBytes("2GiB"), 2 * 1024 ** 3);
  assert.equal(parseBytes("512m"), 512 * 1024 ** 2);
  assert.equal(parseBytes("1.5k"), 1536);
  assert.equal(parseBytes(1048576), 1048576);
  assert.equal(parseBytes("100"), 100);
  for (const bad of ["", "g", "2x", "-1g", "2 gigs", 1.5, -1])
    assert.equal(parseBytes(bad), undefined, String(bad));
});

test("cpus accept numbers and numeric strings", () => {
  assert.equal(parseCpus("0.5"), 0.5);
  assert.equal(parseCpus(2), 2);
  assert.equal(parseCpus("0"), undefined);
  assert.equal(parseCpus("two"), undefined);
});
