import assert from "node:assert/strict";
import { test } from "node:test";
import { hintFor, tableText } from "./output.ts";

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
