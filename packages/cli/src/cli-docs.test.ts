import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { renderCliDocs } from "./cli-docs.ts";

test("docs/cli.md is what the command tree generates (regenerate: node packages/cli/src/cli-docs.ts)", () => {
  const file = join(import.meta.dirname, "..", "..", "..", "docs", "cli.md");
  assert.equal(readFileSync(file, "utf8"), renderCliDocs());
});
