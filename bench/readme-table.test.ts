import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { END, START, savedRuns, withTable } from "./readme-table.ts";

/** The table block with layout left out: cells trimmed, separator rows alike, spaces collapsed. */
function block(readme: string): string {
  const body = readme.slice(readme.indexOf(START) + START.length, readme.indexOf(END));
  return body
    .split("\n")
    .map((line) =>
      line.trim().startsWith("|")
        ? line
            .split("|")
            .map((c) => (/^\s*:?-+:?\s*$/.test(c) ? "---" : c.trim()))
            .join("|")
        : line.trim(),
    )
    .filter((l) => l !== "")
    .join("\n")
    .replace(/\s+/g, " ");
}

test("README's benchmark tables are the ones the saved runs generate (node bench/readme-table.ts --write)", () => {
  const files = savedRuns();
  assert.ok(files.length > 0, "a saved full run with a commit is in bench/results/");
  const readme = readFileSync(join(import.meta.dirname, "..", "README.md"), "utf8");
  assert.ok(readme.includes(START) && readme.includes(END), "README has the table's markers");
  assert.equal(block(readme), block(withTable(readme, files)));
});
