import assert from "node:assert/strict";
import { test } from "node:test";
import { poolSizeBytes } from "./main.ts";

test("--pool-size takes a size of at least 1 GiB and refuses the rest, saying so", () => {
  assert.equal(poolSizeBytes("20g"), 20 * 1024 ** 3);
  assert.equal(poolSizeBytes("1536m"), 1536 * 1024 ** 2);
  for (const bad of ["512m", "0", "lots", "-5g", ""])
    assert.throws(() => poolSizeBytes(bad), /--pool-size .* is not a size of at least 1g/, bad);
});
