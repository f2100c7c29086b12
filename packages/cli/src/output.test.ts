import assert from "node:assert/strict";
import { test } from "node:test";
import { tableText } from "./output.ts";

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
