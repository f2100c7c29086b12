import assert from "node:assert/strict";
import { test } from "node:test";
import { outputEnding, tailLines } from "./last-output.ts";

test("a service's last lines: the last ones, bounded, and no terminal sequence gets through", () => {
  const many = Buffer.from(`${Array.from({ length: 30 }, (_, i) => `line ${i}`).join("\n")}\n\n`);
  assert.deepEqual(tailLines(many, 3), ["line 27", "line 28", "line 29"]);
  const hostile = Buffer.from("ok\r\n\u001b]0;owned\u0007\u001b[2Jcleared\rover\n\u009b31mred\n");
  const lines = tailLines(hostile);
  assert.equal(lines.length, 3);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what must be gone
  for (const l of lines) assert.doesNotMatch(l, /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/, l);
  assert.equal(lines[0], "ok");
  assert.match(lines[1] as string, /^\ufffd\]0;owned\ufffd\ufffd\[2Jclearedover$/);
  const long = tailLines(Buffer.from("x".repeat(5000)));
  assert.equal(long[0]?.length, 301, "cut to 300 characters and an ellipsis");
  assert.deepEqual(tailLines(Buffer.alloc(0)), []);
  assert.equal(outputEnding([]), "; it wrote nothing");
  assert.equal(outputEnding(["a", "b"]), "; its last output:\n  a\n  b");
});
