import assert from "node:assert/strict";
import { test } from "node:test";
import { closestName, editDistance } from "./closest-name.ts";

test("edits between names count inserts, deletes, replacements and swapped neighbours", () => {
  assert.equal(editDistance("egress", "egress"), 0);
  assert.equal(editDistance("egres", "egress"), 1);
  assert.equal(editDistance("servcie", "service"), 1);
  assert.equal(editDistance("verfier", "verifier"), 1);
  assert.equal(editDistance("abc", "xyz"), 3);
});

test("a misspelt key is matched to the one meant; a name unlike any is matched to none", () => {
  const keys = ["kind", "egress", "agent", "verifier", "warm", "clock", "pool"];
  assert.equal(closestName("egres", keys), "egress");
  assert.equal(closestName("Egress", keys), "egress");
  assert.equal(closestName("verfier", keys), "verifier");
  assert.equal(closestName("colck", keys), "clock");
  assert.equal(closestName("replicas_count", keys), null);
  // Two letters are too few to guess from one edit away.
  assert.equal(closestName("po", keys), null);
});
