import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { escapeName } from "./escape-name.ts";

describe("escapeName", () => {
  it("keeps UTF-8 and escapes what would change how a name reads", () => {
    assert.deepEqual(escapeName(Buffer.from("données/été.txt")), { text: "données/été.txt", escaped: false });
    assert.deepEqual(escapeName(Buffer.from("a\nb\tc\\d")), { text: "a\\nb\\tc\\\\d", escaped: true });
    assert.deepEqual(escapeName(Buffer.from([0x61, 0xff, 0xc3, 0x62, 0x01])), {
      text: "a\\xff\\xc3b\\x01",
      escaped: true,
    });
    // An overlong encoding of "/" and a lone surrogate are not UTF-8.
    assert.equal(escapeName(Buffer.from([0xc0, 0xaf])).text, "\\xc0\\xaf");
    assert.equal(escapeName(Buffer.from([0xed, 0xa0, 0x80])).text, "\\xed\\xa0\\x80");
    // A right-to-left override would show the name reversed.
    assert.equal(escapeName(Buffer.from("evil\u202Etxt.sh")).text, "evil\\u{202e}txt.sh");
  });
});
