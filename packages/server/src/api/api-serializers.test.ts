import assert from "node:assert/strict";
import { test } from "node:test";
import { deploymentSchema } from "./api-schemas.ts";
import { serializeDeployment } from "./api-serializers.ts";

test("a deployment whose phase failed before any evidence answers in its schema, every field there", () => {
  const d = serializeDeployment({
    id: "dep_1",
    team_id: "team_1",
    environment_id: "env_1",
    kind: "deploy",
    status: "rolled_back",
    reason: "no target nowhere",
    // As phase-recorder.ts stores a phase it failed at once, and one it never reached.
    phases_json: JSON.stringify([
      {
        name: "resolve",
        status: "succeeded",
        started_at: "t0",
        finished_at: "t1",
        duration_ms: 3,
        evidence: {},
      },
      {
        name: "place",
        status: "failed",
        started_at: "t1",
        finished_at: "t2",
        duration_ms: 1,
        reason: "no target",
      },
      { name: "provision", status: "skipped", reason: "skipped: an earlier phase failed" },
    ]),
    created_at: "t0",
    finished_at: "t2",
  } as never);
  assert.equal(deploymentSchema.safeParse(JSON.parse(JSON.stringify(d))).success, true);
  assert.deepEqual(d.phases[2], {
    name: "provision",
    status: "skipped",
    started_at: null,
    finished_at: null,
    duration_ms: null,
    evidence: null,
    reason: "skipped: an earlier phase failed",
  });
});
