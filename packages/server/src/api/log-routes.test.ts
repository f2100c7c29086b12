import assert from "node:assert/strict";
import { test } from "node:test";
import { isDenvError } from "@denv/protocol";
import { sinceMsOf } from "./log-routes.ts";

test("?since= a time or a duration back; before the epoch is its start; anything else refused", () => {
  const now = Date.parse("2026-12-06T14:00:00Z");
  assert.equal(sinceMsOf("10m", now), now - 600_000);
  assert.equal(sinceMsOf("90s", now), now - 90_000);
  assert.equal(sinceMsOf("2026-12-06T13:00:00.123456789Z", now), Date.parse("2026-12-06T13:00:00.123Z"));
  assert.equal(sinceMsOf("2026-12-06T15:00:00+01:00", now), Date.parse("2026-12-06T14:00:00Z"));
  assert.equal(sinceMsOf("1960-01-01T00:00:00Z", now), 0);
  assert.equal(sinceMsOf("999999999d", now), 0);
  for (const bad of ["yesterday", "10 m", "-5m", "2026-12-06", "1e3s", ""])
    assert.throws(
      () => sinceMsOf(bad, now),
      (e: unknown) => isDenvError(e) && e.code === "invalid_argument",
      bad,
    );
});
