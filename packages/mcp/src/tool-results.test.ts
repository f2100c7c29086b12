import assert from "node:assert/strict";
import { test } from "node:test";
import { apiError } from "@denv/sdk";
import { renderPhaseLog } from "./denv-resources.ts";
import { reporter } from "./operation-progress.ts";
import { decodeBytes, ERROR_META_KEY, toolError, toolOk } from "./tool-results.ts";

test("bytes are text when UTF-8, base64 otherwise; a character cut at the end is left out", () => {
  assert.deepEqual(decodeBytes(Buffer.from("héllo\n")), { text: "héllo\n", encoding: "utf8" });
  assert.deepEqual(decodeBytes(Buffer.from([0xff, 0x00, 0x41])), { text: "/wBB", encoding: "base64" });
  const cut = Buffer.from("ab€").subarray(0, 4); // "ab" and two of the euro sign's three bytes
  assert.deepEqual(decodeBytes(cut), { text: "ab", encoding: "utf8" });
});

test("a denv error is a tool error keeping its code and details; anything else is internal", () => {
  const e = toolError(apiError("rate_limited", "slow down", 429, { retry_after_ms: 10 }));
  assert.equal(e.isError, true);
  assert.deepEqual(e.content, [{ type: "text", text: "rate_limited: slow down" }]);
  assert.equal(e.structuredContent, undefined, "an error is never checked against the output schema");
  assert.deepEqual(e._meta?.[ERROR_META_KEY], {
    code: "rate_limited",
    message: "slow down",
    details: { retry_after_ms: 10 },
  });
  assert.deepEqual(toolError(new Error("boom"))._meta?.[ERROR_META_KEY], {
    code: "internal",
    message: "boom",
  });
  const ok = toolOk({ a: 1 });
  assert.deepEqual(ok.structuredContent, { a: 1 });
  assert.deepEqual(JSON.parse((ok.content[0] as { text: string }).text), { a: 1 });
});

test("progress is sent only when asked for, and only when it increases", async () => {
  const sent: unknown[] = [];
  const extra = (token?: string) => ({
    signal: new AbortController().signal,
    ...(token ? { _meta: { progressToken: token } } : {}),
    sendNotification: async (n: unknown) => {
      sent.push(n);
    },
  });
  await reporter(extra())(1, 2, "x");
  assert.equal(sent.length, 0, "no token, no notification");
  const report = reporter(extra("t1"));
  await report(0, undefined, "creating");
  await report(0, 11, "again");
  await report(3, 11, "fork: start");
  await report(2, 11, "back");
  assert.deepEqual(
    sent.map((n) => (n as { params: { progress: number; message: string } }).params),
    [
      { progressToken: "t1", progress: 0, message: "creating" },
      { progressToken: "t1", progress: 3, total: 11, message: "fork: start" },
    ],
  );
});

test("the phase log reads as text: each phase, its time, its reason and evidence", () => {
  const text = renderPhaseLog({
    id: "dep_1",
    kind: "verify",
    status: "rolled_back",
    reason: "grade failed",
    version_id: null,
    phases: [
      { name: "stop", status: "succeeded", duration_ms: 12, reason: null, evidence: { frozen: true } },
      { name: "grade", status: "failed", duration_ms: null, reason: "exit 2", evidence: null },
    ],
  });
  assert.equal(
    text,
    [
      "deployment dep_1 (verify): rolled_back",
      "reason: grade failed",
      "",
      "1. stop: succeeded 12 ms",
      "   {",
      '     "frozen": true',
      "   }",
      "",
      "2. grade: failed",
      "   reason: exit 2",
      "",
    ].join("\n"),
  );
});
