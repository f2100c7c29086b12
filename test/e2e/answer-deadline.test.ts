/**
 * A request is never held past what an HTTP client waits: a deploy, snapshot, rollback, verify or
 * destroy that asks for the verdict gets it, or a clean `timeout` naming the deployment to follow,
 * within the server's answer deadline (240 s by default, shortened here), and the deployment goes
 * on to its verdict. ?wait=false answers at once with the running deployment. A host that is gone
 * fails the operation with host_unavailable within the host wait, instead of leaving it hanging.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type Lab, openLab } from "../harness/lab.ts";
import { repoRoot } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

const compose = readFileSync(join(repoRoot, "examples/ops-world/docker-compose.yaml"), "utf8");
let lab: Lab;

async function api(method: string, path: string, body?: unknown) {
  const t = performance.now();
  const res = await lab.api(method, path, body);
  return { ...res, ms: performance.now() - t };
}

function verdictOf(id: string): Promise<any> {
  return waitFor(`deployment ${id}'s verdict`, async () => {
    const d = (await api("GET", `/v1/deployments/${id}`)).data;
    return d.status !== "running" && d.status !== "queued" ? d : undefined;
  });
}

before(async () => {
  lab = await openLab({ answerWithinMs: 400, hostWaitMs: 1500, teamHost: { egressProbeTarget: null } });
  await api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
  await api("PUT", "/v1/projects/ops-world/source", { compose });
});

after(async () => {
  await lab?.close();
});

test("a deploy that outlasts the answer deadline is answered timeout with its deployment, which goes on to succeed", async () => {
  const r = await api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
  assert.equal(r.status, 504, JSON.stringify(r.data));
  assert.equal(r.data.error.code, "timeout");
  const id = r.data.error.details.deployment_id as string;
  assert.match(id, /^dep_/);
  assert.match(r.data.error.message, new RegExp(`follow deployment ${id}`));
  const d = await verdictOf(id);
  assert.equal(d.status, "succeeded", d.reason);
  // Answered at the deadline, not at the verdict: the answer came before the deployment ended.
  const tookMs = Date.parse(d.finished_at) - Date.parse(d.created_at);
  assert.ok(r.ms < tookMs, `answered after ${r.ms} ms; the deployment took ${tookMs} ms`);
});

test("?wait=false answers at once with the running deployment; without it, the verdict or timeout", async () => {
  const quick = await api("POST", "/v1/envs/alpha/snapshot?wait=false");
  assert.equal(quick.status, 202);
  assert.equal(quick.data.status, "running");
  assert.equal((await verdictOf(quick.data.id)).status, "succeeded");
  const bad = await api("POST", "/v1/envs/alpha/snapshot?wait=maybe");
  assert.equal(bad.status, 400);
  assert.equal(bad.data.error.code, "invalid_argument");
  // Waiting (the default): the verdict if it comes in time, else timeout with the deployment.
  const waited = await api("POST", "/v1/envs/alpha/verify", { resume: true });
  if (waited.status === 200) assert.equal(waited.data.status, "succeeded");
  else {
    assert.equal(waited.status, 504);
    assert.equal((await verdictOf(waited.data.error.details.deployment_id)).status, "succeeded");
  }
});

test("with its host gone, a snapshot fails host_unavailable within the host wait instead of hanging", async () => {
  await lab.stopSidecar();
  const r = await api("POST", "/v1/envs/alpha/snapshot?wait=false");
  const d = await verdictOf(r.data.id);
  assert.equal(d.status, "failed");
  assert.match(d.reason, /not connected/);
  // host_unavailable is the host wait's answer; a hang would have ended at the operation's own
  // deadline (5 minutes) as timeout.
  assert.equal(d.phases.find((p: any) => p.name === "snapshot").evidence.code, "host_unavailable");
  await lab.restartSidecar();
});
