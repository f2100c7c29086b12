import assert from "node:assert/strict";
import { test } from "node:test";
import { DenvError } from "@denv/protocol";
import { awaitVerdict } from "./answer-deadline.ts";

test("a verdict within the deadline is awaited; a failed run is a verdict too", async () => {
  await awaitVerdict(
    { deploymentId: "dep_1", done: new Promise((r) => setTimeout(r, 10)) },
    "snapshot",
    1000,
  );
  await awaitVerdict({ deploymentId: "dep_1", done: Promise.reject(new Error("x")) }, "snapshot", 1000);
});

test("past the deadline the caller gets timeout with the deployment to follow", async () => {
  const t = performance.now();
  await assert.rejects(
    awaitVerdict({ deploymentId: "dep_0123456789ab", done: new Promise(() => {}) }, "verify", 50),
    (err: unknown) => {
      assert.ok(err instanceof DenvError);
      assert.equal(err.code, "timeout");
      assert.deepEqual(err.details, { deployment_id: "dep_0123456789ab" });
      assert.match(err.message, /the verify has no verdict after 0 s/);
      assert.match(err.message, /denv deployment show dep_0123456789ab/);
      return true;
    },
  );
  assert.ok(performance.now() - t < 1000);
});
