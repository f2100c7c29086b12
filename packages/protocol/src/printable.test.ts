import assert from "node:assert/strict";
import { test } from "node:test";
import { printableLine, replaceTerminalControls } from "./printable.ts";

test("control characters and reordering marks show as U+FFFD; tab and text stay", () => {
  assert.equal(
    printableLine("a\tb \u001b]0;owned\u0007 \u009b31m\r\n"),
    "a\tb \ufffd]0;owned\ufffd \ufffd31m\ufffd\ufffd",
  );
  assert.equal(printableLine("evil\u202etxt.sh \u2066x\u2069"), "evil\ufffdtxt.sh \ufffdx\ufffd");
  assert.equal(printableLine("plain ünïcode ✓"), "plain ünïcode ✓");
  assert.equal(
    replaceTerminalControls("a\u001bb", (c) => `<${c.charCodeAt(0)}>`),
    "a<27>b",
  );
});
