import assert from "node:assert/strict";
import { test } from "node:test";
import { splitShellWords } from "./shell-words.ts";

test("splits like a POSIX shell without expanding", () => {
  assert.deepEqual(splitShellWords("redis-server --appendonly yes"), ["redis-server", "--appendonly", "yes"]);
  assert.deepEqual(splitShellWords(`sh -c "echo 'a b' \\"c\\""`), ["sh", "-c", `echo 'a b' "c"`]);
  assert.deepEqual(splitShellWords("a\\ b '' $HOME"), ["a b", "", "$HOME"]);
  assert.deepEqual(splitShellWords("   "), []);
  assert.equal(splitShellWords("echo 'open"), undefined);
});
