import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { openApiDocument } from "@denv/server";
import { generateSdkSource } from "./generate-sdk.ts";

test("schema.gen.ts is what the server's OpenAPI document generates (regenerate: node packages/sdk/src/generate-sdk.ts)", () => {
  const committed = readFileSync(join(import.meta.dirname, "schema.gen.ts"), "utf8");
  assert.equal(committed, generateSdkSource(openApiDocument() as never));
});

test("the generator maps zod's JSON Schema shapes to TypeScript", async () => {
  const { schemaToTs } = await import("./generate-sdk.ts");
  assert.equal(
    schemaToTs({ anyOf: [{ type: "string" }, { type: "array", items: { type: "string" } }] }),
    "string | Array<string>",
  );
  assert.equal(schemaToTs({ type: ["string", "null"] }), "string | null");
  assert.equal(
    schemaToTs({ type: "object", properties: { a: { type: "number" } }, required: [] }),
    "{\n  a?: number;\n}",
  );
  assert.equal(schemaToTs({ enum: ["deny", "allow"] }), '"deny" | "allow"');
});
