import assert from "node:assert/strict";
import { test } from "node:test";
import { timeKey } from "./service-logs.ts";

test("engine times sort as time does, whatever trailing zeros the engine dropped", () => {
  const times = [
    "2026-12-06T14:00:00.1Z",
    "2026-12-06T14:00:00Z",
    "2026-12-06T14:00:00.12Z",
    "2026-12-06T14:00:00.000000001Z",
    "2026-12-06T14:00:01Z",
  ];
  const sorted = [...times].sort((a, b) => (timeKey(a) < timeKey(b) ? -1 : timeKey(a) > timeKey(b) ? 1 : 0));
  assert.deepEqual(sorted, [
    "2026-12-06T14:00:00Z",
    "2026-12-06T14:00:00.000000001Z",
    "2026-12-06T14:00:00.1Z",
    "2026-12-06T14:00:00.12Z",
    "2026-12-06T14:00:01Z",
  ]);
  assert.equal(timeKey(""), "", "no time keeps its text");
});
