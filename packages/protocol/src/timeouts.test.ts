import assert from "node:assert/strict";
import { test } from "node:test";
import { commandDeadlineMs, DEADLINE_MARGIN_MS, MAX_COMMAND_TIMEOUT_MS } from "./timeouts.ts";

test("a layer waits for the command's own deadline plus the margin; without one, for the longest a command may run", () => {
  assert.equal(commandDeadlineMs(40 * 60_000), 40 * 60_000 + DEADLINE_MARGIN_MS);
  assert.equal(commandDeadlineMs(undefined), MAX_COMMAND_TIMEOUT_MS + DEADLINE_MARGIN_MS);
  assert.equal(commandDeadlineMs(null), MAX_COMMAND_TIMEOUT_MS + DEADLINE_MARGIN_MS);
  assert.equal(commandDeadlineMs(10 * MAX_COMMAND_TIMEOUT_MS), MAX_COMMAND_TIMEOUT_MS + DEADLINE_MARGIN_MS);
});
