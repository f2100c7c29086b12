import assert from "node:assert/strict";
import { test } from "node:test";
import { bytesText, printableLine, replaceTerminalControls } from "./printable.ts";

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

test("bytes are said in binary units, whole where they are whole", () => {
  assert.equal(bytesText(0), "0 B");
  assert.equal(bytesText(512), "512 B");
  assert.equal(bytesText(4294967296), "4 GiB");
  assert.equal(bytesText(12.3 * 1024 ** 2), "12.3 MiB");
  assert.equal(bytesText(1536), "1.50 KiB");
  assert.equal(bytesText(null), "unknown");
  assert.equal(bytesText(-1), "unknown");
});
