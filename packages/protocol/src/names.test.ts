import assert from "node:assert/strict";
import { test } from "node:test";
import {
  NAME_MAX_LENGTH,
  nameProblem,
  nameSchema,
  retiredEnvironmentName,
  STACK_NAME_MAX_LENGTH,
  stackName,
} from "./names.ts";

const samples = [
  "alpha",
  "Alpha",
  "rollout-017",
  "db_1",
  "a.b",
  "a..b",
  ".hidden",
  "-dash",
  "trailing.",
  "with space",
  "slash/name",
  "tilde~x",
  "ünïcode",
  "",
  "a".repeat(NAME_MAX_LENGTH),
  "a".repeat(NAME_MAX_LENGTH + 1),
];

test("the API's schema and the spec's check are one rule: each accepts exactly what the other does", () => {
  for (const s of samples)
    assert.equal(nameSchema.safeParse(s).success, nameProblem(s) === null, JSON.stringify(s));
  assert.deepEqual(
    samples.filter((s) => nameProblem(s) === null),
    ["alpha", "Alpha", "rollout-017", "db_1", "a.b", "a".repeat(NAME_MAX_LENGTH)],
  );
});

test("composed names: a stack is PROJECT-ENV[-PART], within the host's limit; a retired name is one the rule refuses", () => {
  assert.equal(stackName("ops-world", "alpha"), "ops-world-alpha");
  assert.equal(stackName("ops-world", "promote", "a1b2c3"), "ops-world-promote-a1b2c3");
  const long = "a".repeat(NAME_MAX_LENGTH);
  assert.ok(stackName(long, long, "grader", "123456").length <= STACK_NAME_MAX_LENGTH);
  const retired = retiredEnvironmentName("alpha", "env_0123456789ab");
  assert.equal(retired, "alpha~env_0123456789ab");
  assert.notEqual(nameProblem(retired), null);
});
