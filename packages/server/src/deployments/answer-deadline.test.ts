import assert from "node:assert/strict";
import { test } from "node:test";
import { DenvError } from "@denv/protocol";
import { awaitVerdict } from "./answer-deadline.ts";

test("a verdict within the deadline is awaited; a failed run is a verdict too", async () => {
  let finish = () => {};
  const done = new Promise<void>((resolve) => {
    finish = resolve;
  });
  let answered = false;
  const waiting = awaitVerdict({ deploymentId: "dep_1", done }, "snapshot", 60_000).then(() => {
    answered = true;
  });
  // Every pending callback run: the caller is still held while the deployment has no verdict.
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(answered, false, "answered before the deployment's verdict");
  finish();
  await waiting;
  assert.equal(answered, true);
  await assert.doesNotReject(
    awaitVerdict({ deploymentId: "dep_1", done: Promise.reject(new Error("x")) }, "snapshot", 60_000),
  );
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
