import assert from "node:assert/strict";
import { test } from "node:test";
import { interpolate, parseDotenv } from "./interpolate.ts";

const env = { SET: "yes", EMPTY: "", PORT: "8080" };

test("plain and braced variables", () => {
  assert.equal(interpolate("$SET-${PORT}", env).value, "yes-8080");
  assert.equal(interpolate("a$SET.b", env).value, "ayes.b");
});

test("defaults distinguish unset from empty", () => {
  assert.equal(interpolate("${EMPTY:-d}", env).value, "d");
  assert.equal(interpolate("${EMPTY-d}", env).value, "");
  assert.equal(interpolate("${NOPE-d}", env).value, "d");
  assert.equal(interpolate("${NOPE:-${PORT}}", env).value, "8080");
});

test("required variables report their message", () => {
  const r = interpolate("${NOPE:?set NOPE to the db password}", env);
  assert.deepEqual(r.problems, [
    { kind: "required", variable: "NOPE", message: "set NOPE to the db password" },
  ]);
  assert.equal(interpolate("${EMPTY?x}", env).problems.length, 0);
  assert.equal(interpolate("${EMPTY:?x}", env).problems.length, 1);
});

test("alternatives, $$ and stray dollars", () => {
  assert.equal(interpolate("${SET:+on}", env).value, "on");
  assert.equal(interpolate("${EMPTY:+on}", env).value, "");
  assert.equal(interpolate("${EMPTY+on}", env).value, "on");
  assert.equal(interpolate("$$HOME costs 5$", env).value, "$HOME costs 5$");
});

test("unset variables become empty with a warning; bad syntax is reported", () => {
  assert.deepEqual(interpolate("${NOPE}", env), {
    value: "",
    problems: [{ kind: "unset", variable: "NOPE" }],
  });
  assert.equal(interpolate("${", env).problems[0]?.kind, "syntax");
  assert.equal(interpolate("${1X}", env).problems[0]?.kind, "syntax");
  assert.equal(interpolate("${X:=y}", env).problems[0]?.kind, "syntax");
});

test(".env files", () => {
  const parsed = parseDotenv("# c\nA=1\nexport B=\"two words\"\nC='$lit'\nD=x # comment\n\nbad line\n");
  assert.deepEqual(parsed, { A: "1", B: "two words", C: "$lit", D: "x" });
});
