import assert from "node:assert/strict";
import { test } from "node:test";
import { ServerMetrics } from "./server-metrics.ts";

const metrics = (pools = { ready: 2, hits: 5, misses: 1 }) =>
  new ServerMetrics({ hostsConnected: () => 3, pools: async () => pools });

test("a deployment's verdict counts by kind and status, and its finished phases are timed", async () => {
  const m = metrics();
  m.deploymentEnded("fork", "succeeded", [
    { name: "fork", status: "succeeded", duration_ms: 800 },
    { name: "join", status: "skipped", duration_ms: null },
    { name: "verdict", status: "succeeded", duration_ms: 0 },
  ]);
  m.deploymentEnded("fork", "rolled_back", [{ name: "fork", status: "failed", duration_ms: 20 }]);
  const { body } = await m.scrape();
  assert.match(body, /^denv_deployments_total\{kind="fork",status="succeeded"\} 1$/m);
  assert.match(body, /^denv_deployments_total\{kind="fork",status="rolled_back"\} 1$/m);
  assert.match(
    body,
    /^denv_deployment_phase_seconds_sum\{kind="fork",phase="fork",status="succeeded"\} 0\.8$/m,
  );
  assert.match(body, /^denv_deployment_phase_seconds_count\{kind="fork",phase="fork",status="failed"\} 1$/m);
  assert.doesNotMatch(body, /phase="join"/, "a skipped phase has no duration to observe");
});

test("the gauges read their sources at each scrape: hosts, and the pools read once for all three", async () => {
  let reads = 0;
  const m = new ServerMetrics({
    hostsConnected: () => 3,
    pools: async () => {
      reads++;
      return { ready: 2, hits: 5, misses: 1 };
    },
  });
  const { body, contentType } = await m.scrape();
  assert.match(contentType, /^text\/plain/);
  assert.match(body, /^denv_hosts_connected 3$/m);
  assert.match(body, /^denv_pool_ready_members 2$/m);
  assert.match(body, /^denv_pool_hits 5$/m);
  assert.match(body, /^denv_pool_misses 1$/m);
  assert.equal(reads, 1);
  await m.scrape();
  assert.equal(reads, 2, "each scrape reads afresh");
});

test("requests are kept by method, route template and status", async () => {
  const m = metrics();
  m.request("POST", "/v1/envs/:id/exec", 200, 0.003);
  m.request("POST", "/v1/envs/:id/exec", 200, 0.004);
  m.request("GET", "unmatched", 404, 0.001);
  const { body } = await m.scrape();
  assert.match(
    body,
    /^denv_http_request_seconds_count\{method="POST",route="\/v1\/envs\/:id\/exec",status="200"\} 2$/m,
  );
  assert.match(body, /^denv_http_request_seconds_count\{method="GET",route="unmatched",status="404"\} 1$/m);
});

test("the hosts' reported figures are served summed, read once per scrape", async () => {
  let reads = 0;
  const m = new ServerMetrics({
    hostsConnected: () => 2,
    pools: async () => ({ ready: 0, hits: 0, misses: 0 }),
    hostFigures: async () => {
      reads++;
      return {
        disk_total_bytes: 300,
        disk_free_bytes: 100,
        memory_total_bytes: 64,
        memory_free_bytes: 16,
        cpus: 4,
      };
    },
  });
  const { body } = await m.scrape();
  assert.match(body, /^denv_hosts_capacity_bytes\{resource="disk",state="free"\} 100$/m);
  assert.match(body, /^denv_hosts_capacity_bytes\{resource="memory",state="total"\} 64$/m);
  assert.match(body, /^denv_hosts_cpus 4$/m);
  assert.equal(reads, 1);
});
