import assert from "node:assert/strict";
import { test } from "node:test";
import { ageOf, hintFor, tableText } from "./output.ts";

test("a table's columns are as wide as their widest cell, the last left ragged", () => {
  assert.equal(
    tableText(
      ["ID", "STATUS", "ENVIRONMENT"],
      [
        ["dep_1", "succeeded", "shop/alpha"],
        ["dep_22", "running", "a/b"],
      ],
    ),
    "ID      STATUS     ENVIRONMENT\ndep_1   succeeded  shop/alpha\ndep_22  running    a/b\n",
  );
});

test("a not-found's hint is the list of the noun it names, and none where it names none", () => {
  assert.equal(hintFor("not_found", "no version ver_000000000001"), "`denv version list` shows what exists");
  assert.equal(hintFor("not_found", "no environment shop/beta"), "`denv env list` shows what exists");
  assert.equal(hintFor("not_found", "no deployment dep_1"), "`denv deployment list` shows what exists");
  assert.equal(hintFor("not_found", 'environment a has no service "x"; it has web, db'), undefined);
  assert.equal(hintFor("unavailable", "the host went"), "is the server up? (`denv up` starts a local one)");
});

test("an age is said as people say it in a table; a time that cannot be read is -", () => {
  const now = Date.parse("2026-12-06T12:00:00Z");
  const ago = (ms: number) => new Date(now - ms).toISOString();
  assert.equal(ageOf(ago(42_000), now), "42s");
  assert.equal(ageOf(ago(5 * 60_000 + 10_000), now), "5m");
  assert.equal(ageOf(ago(3 * 3_600_000), now), "3h");
  assert.equal(ageOf(ago(2 * 86_400_000 + 5), now), "2d");
  assert.equal(ageOf(ago(-5_000), now), "0s", "a clock a little ahead is now");
  assert.equal(ageOf("not a time", now), "-");
});
