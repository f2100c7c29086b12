import assert from "node:assert/strict";
import { test } from "node:test";
import { ERROR_CODES } from "@denv/protocol";
import {
  apiError,
  ConflictError,
  DenvApiError,
  ERROR_FAMILIES,
  InternalError,
  NotFoundError,
} from "./errors.ts";

test("every code of the server's table has its family, and nothing else is named", () => {
  assert.deepEqual(Object.keys(ERROR_FAMILIES).sort(), Object.keys(ERROR_CODES).sort());
});

test("errors are instanceof their family and of DenvApiError, with the code kept", () => {
  const e = apiError("is_directory", "/w is a directory", 409);
  assert.ok(e instanceof ConflictError);
  assert.ok(e instanceof DenvApiError);
  assert.ok(e instanceof Error);
  assert.equal(e.code, "is_directory");
  assert.equal(e.name, "ConflictError");
  assert.ok(apiError("not_found", "x", 404) instanceof NotFoundError);
  // A code this SDK does not know is the server's fault, and keeps its code.
  const unknown = apiError("brand_new", "?", 500);
  assert.ok(unknown instanceof InternalError);
  assert.equal(unknown.code, "brand_new");
});
