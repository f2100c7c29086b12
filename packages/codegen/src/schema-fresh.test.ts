import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { openApiDocument } from "@denv/server";
import { generateSdkSource, SDK_SCHEMA_PATH } from "./generate-sdk.ts";

test("schema.gen.ts is what the server's OpenAPI document generates (regenerate: node packages/codegen/src/generate-sdk.ts)", () => {
  const committed = readFileSync(SDK_SCHEMA_PATH, "utf8");
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

test("python/src/denv/_api_types.py is what the same document generates (regenerate: node packages/codegen/src/generate-python-types.ts)", async () => {
  const { generatePythonTypes, PYTHON_TYPES_PATH } = await import("./generate-python-types.ts");
  assert.equal(readFileSync(PYTHON_TYPES_PATH, "utf8"), generatePythonTypes(openApiDocument() as never));
});

test("the Python generator makes TypedDicts, NotRequired fields, Literals and unions", async () => {
  const { generatePythonTypes } = await import("./generate-python-types.ts");
  const schema = {
    type: "object",
    properties: {
      id: { type: "string" },
      size: { type: "integer" },
      mode: { enum: ["a", "b"] },
      parent: { anyOf: [{ type: "string" }, { type: "null" }] },
      tags: { type: "array", items: { type: "string" } },
      "x-extra": { type: "boolean" },
    },
    required: ["id", "size", "mode", "parent", "tags"],
  };
  const py = generatePythonTypes({
    paths: {
      "/v1/things/{id}": {
        get: {
          operationId: "getThing",
          summary: "",
          responses: { "200": { content: { "application/json": { schema } } } },
        },
      },
    },
  } as never);
  // A key that is not a Python name makes the functional form.
  assert.match(py, /GetThingResponse = TypedDict\(/);
  assert.match(py, /"id": str,/);
  assert.match(py, /"size": int,/);
  assert.match(py, /"mode": Literal\["a", "b"\],/);
  assert.match(py, /"parent": str \| None,/);
  assert.match(py, /"tags": list\[str\],/);
  assert.match(py, /"x-extra": NotRequired\[bool\],/);
});

test("python/src/denv/_api_methods.py is what the same document generates (regenerate: node packages/codegen/src/generate-python-methods.ts)", async () => {
  const { generatePythonTypes } = await import("./generate-python-types.ts");
  const { generatePythonMethods, PYTHON_METHODS_PATH, pythonTypeNames } = await import(
    "./generate-python-methods.ts"
  );
  const doc = openApiDocument() as never;
  assert.equal(
    readFileSync(PYTHON_METHODS_PATH, "utf8"),
    generatePythonMethods(doc, pythonTypeNames(generatePythonTypes(doc))),
  );
});

test("the Python methods take path parameters in order, an optional body, and escape each parameter whole", async () => {
  const { generatePythonMethods } = await import("./generate-python-methods.ts");
  const py = generatePythonMethods(
    {
      paths: {
        "/v1/things/{id}/parts/{part}": {
          post: {
            operationId: "postThingPart",
            "x-denv-method": "things.addPart",
            summary: 'Adds a part """quoted"""',
            requestBody: { content: { "application/json": { schema: { type: "object", properties: {} } } } },
            responses: { "200": { content: { "application/json": { schema: {} } } } },
          },
        },
      },
    } as never,
    new Set(["PostThingPartResponse"]),
  );
  assert.match(py, /class ThingsMethods:/);
  assert.match(
    py,
    /def add_part\(self, id: str, part: str, body: dict\[str, Any\] \| None = None, \*, query: .*\) -> _t\.PostThingPartResponse:/,
  );
  assert.match(
    py,
    /f"\/v1\/things\/\{_p\(id\)\}\/parts\/\{_p\(part\)\}", body=body if body is not None else \{\}/,
  );
  assert.match(py, /Adds a part \\"\\"\\"quoted\\"\\"\\"/);
  assert.match(py, /"things\.add_part": \("POST", "\/v1\/things\/\{id\}\/parts\/\{part\}"\)/);
});
