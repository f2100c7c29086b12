import assert from "node:assert/strict";
import { test } from "node:test";
import { hashPassword, verifyPassword } from "./password-hash.ts";

test("a password verifies against its hash and nothing else does", async () => {
  const stored = await hashPassword("correct horse battery");
  assert.match(stored, /^scrypt\$32768\$8\$1\$[\w-]{22}\$[\w-]{43}$/);
  assert.equal(await verifyPassword("correct horse battery", stored), true);
  assert.equal(await verifyPassword("correct horse batterY", stored), false);
  assert.equal(await verifyPassword("", stored), false);
  // The same password twice: two salts, two hashes.
  assert.notEqual(await hashPassword("correct horse battery"), stored);
});

test("a stored value that is malformed or asks for an unbounded cost is false, not an error", async () => {
  const stored = await hashPassword("correct horse battery");
  const [, , r, p, salt, hash] = stored.split("$");
  for (const bad of [
    "",
    "plain",
    `bcrypt$32768$${r}$${p}$${salt}$${hash}`,
    `scrypt$1073741824$${r}$${p}$${salt}$${hash}`,
    `scrypt$32768$${r}$${p}$${salt}$${hash?.slice(0, 10)}`,
    `scrypt$x$${r}$${p}$${salt}$${hash}`,
  ])
    assert.equal(await verifyPassword("correct horse battery", bad), false, bad);
});
