import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { END, START, savedRuns, withTable } from "./benchmark-table.ts";

/** The table block with layout left out: cells trimmed, separator rows alike, spaces collapsed. */
function block(page: string): string {
  const body = page.slice(page.indexOf(START) + START.length, page.indexOf(END));
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

test("docs/benchmarks.md's tables are the ones the saved runs generate (node bench/benchmark-table.ts --write)", () => {
  const files = savedRuns();
  assert.ok(files.length > 0, "a saved full run with a commit is in bench/results/");
  const page = readFileSync(join(import.meta.dirname, "..", "docs", "benchmarks.md"), "utf8");
  assert.ok(page.includes(START) && page.includes(END), "docs/benchmarks.md has the table's markers");
  assert.equal(block(page), block(withTable(page, files)));
});
