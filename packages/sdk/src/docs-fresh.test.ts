import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { extract, renderDocs } from "./generate-docs.ts";

test("docs/sdk/typescript.md is what the doc comments generate (regenerate: node packages/sdk/src/generate-docs.ts)", () => {
  const committed = readFileSync(
    join(import.meta.dirname, "..", "..", "..", "docs", "sdk", "typescript.md"),
    "utf8",
  );
  assert.equal(committed, renderDocs());
});

test("the extractor takes a declaration's comment, its signature, and its public members only", () => {
  const items = extract(
    [
      "/** A thing. */",
      "export class Thing {",
      "  /** Its size. */",
      "  readonly size: number;",
      "  private secret = 1;",
      "  /** Grows it. */",
      "  async grow(by: number): Promise<void> {",
      "  }",
      "}",
      "export function helper(a: string): string {",
      "  return a;",
      "}",
    ].join("\n"),
  );
  assert.deepEqual(
    items.map((i) => [i.signature, i.doc, i.members.map((m) => `${m.signature}|${m.doc}`)]),
    [
      [
        "export class Thing",
        "A thing.",
        ["readonly size: number|Its size.", "async grow(by: number): Promise<void>|Grows it."],
      ],
      ["export function helper(a: string): string", "", []],
    ],
  );
});

test("a class whose body ends on its own line has no members: an object literal after it is not read as them", () => {
  const items = extract(
    [
      "/** Refused. */",
      "export class Refused extends Base {}",
      "const FAMILIES: Record<string, unknown> = {",
      "  not_found: NotFound,",
      "  conflict: Conflict,",
      "};",
    ].join("\n"),
  );
  assert.deepEqual(
    items.map((i) => [i.signature, i.members.length]),
    [["export class Refused extends Base", 0]],
  );
});
