/**
 * Processes dying mid-operation, as real processes: the server SIGKILLed in the middle of a deploy
 * (it comes back, rolls the deployment back, and what was being built is removed from the host),
 * and denvd SIGKILLed in the middle of a fork (it comes back, the server sends the same operation
 * again, and the fork completes once, with nothing left over); the server SIGKILLed in the middle of
 * a deploy to a hosted target (Modal's double): the sandbox it made there is ended on its restart.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, test } from "node:test";
import { LABEL } from "@denv/denvd";
import { type ModalDouble, startModalDouble } from "../doubles/modal-double.ts";
import { kill, type ProcessWorld, processWorld, until } from "./process-world.ts";

const worlds: ProcessWorld[] = [];

after(async () => {
  for (const w of worlds.reverse()) await w.close().catch(() => {});
});

async function world(opts: Parameters<typeof processWorld>[0] = {}): Promise<ProcessWorld> {
  const w = await processWorld(opts);
  worlds.push(w);
  return w;
}

test("the server killed mid-deploy comes back, rolls the deployment back, and the host is left clean", async () => {
  const w = await world();
  const started = await w.api("POST", "/v1/projects/ops-world/deploy", { env: "alpha" });
  assert.equal(started.status, 202);
  const depId = started.data.id as string;
  await until("the deploy to reach its start phase", async () => {
    const d = await w.api("GET", `/v1/deployments/${depId}`);
    return d.data.phases.some(
      (p: any) => ["start", "health", "warm"].includes(p.name) && p.status === "running",
    )
      ? true
      : undefined;
  });
  await kill(w.server);
  await w.restartServer();
  // The phases that were running fail at once; the verdict comes once the host removed the stack.
  const first = (await w.api("GET", `/v1/deployments/${depId}`)).data;
  assert.ok(first.phases.some((p: any) => p.status === "failed" && /server stopped/.test(p.reason)));
  const d = await until("the verdict", async () => {
    const x = (await w.api("GET", `/v1/deployments/${depId}`)).data;
    return x.status === "running" ? undefined : x;
  });
  assert.equal(d.status, "rolled_back");
  assert.match(d.reason, /server stopped/);
  assert.ok(d.phases.some((p: any) => p.status === "failed" && /server stopped/.test(p.reason)));
  assert.equal((await w.api("GET", "/v1/envs/alpha")).data.status, "failed");
  // denvd reconnects and is told to remove what the deploy was building.
  const h = await until("the host to be clean", async () => {
    const s = w.hostState();
    return Object.keys(s.stacks).length === 0 ? s : undefined;
  });
  const owner = `${LABEL.owner}=${h.ownerId}`;
  const left = spawnSync(
    "sh",
    ["-c", `docker ps -aq --filter label=${owner}; docker network ls -q --filter label=${owner}`],
    { encoding: "utf8" },
  );
  assert.equal(left.stdout.trim(), "");
  // And the next deploy succeeds.
  const again = await w.api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
  assert.equal(again.data.status, "succeeded", again.data.reason);
});

test("denvd killed mid-fork comes back and the fork completes once, with nothing left over", async () => {
  const w = await world();
  const dep = await w.api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
  assert.equal(dep.data.status, "succeeded", dep.data.reason);
  const fork = w.api("POST", "/v1/envs/alpha/fork", { name: "rollout-017" });
  const stackId = await until("the fork to reach the host", async () => {
    const s = w.hostState();
    return Object.values<any>(s.stacks).find((e) => e.name.endsWith("rollout-017"))?.id as string | undefined;
  });
  // Killed once the engine holds a container of the fork: mid-start, by what happened, not a sleep.
  await until("a container of the fork", async () => {
    const ps = spawnSync("docker", ["ps", "-aq", "--filter", `label=${LABEL.stack}=${stackId}`], {
      encoding: "utf8",
    });
    return ps.stdout.trim() ? true : undefined;
  });
  await kill(w.denvd);
  await w.startDenvd();
  const r = await fork;
  assert.equal(r.status, 201, JSON.stringify(r.data));
  assert.equal(r.data.status, "running");
  const count = await w.api("POST", `/v1/envs/${r.data.id}/exec`, {
    service: "opsbox",
    command: ["psql", "-tAc", "select count(*) from orders"],
  });
  assert.equal(count.data.stdout.trim(), "100000");
  const s = w.hostState();
  const names = Object.values<any>(s.stacks)
    .map((e) => e.name)
    .sort();
  assert.deepEqual(names, ["ops-world-alpha", "ops-world-rollout-017"]);
  const owner = `${LABEL.owner}=${s.ownerId}`;
  const containers = spawnSync("sh", ["-c", `docker ps -aq --filter label=${owner} | wc -l`], {
    encoding: "utf8",
  });
  assert.equal(containers.stdout.trim(), "6");
});

test("the server killed mid-deploy to a hosted target comes back and ends the sandbox the deploy made there", async () => {
  const modal: ModalDouble = await startModalDouble();
  try {
    const w = await world({ allowFetch: [new URL(modal.url).host] });
    const connected = await w.api("POST", "/v1/clouds", {
      provider: "modal",
      name: "modal",
      token: modal.token,
      api_url: modal.url,
    });
    assert.equal(connected.status, 201, JSON.stringify(connected.data));
    // A service whose healthcheck never passes within a long budget: the deploy sits in health.
    const compose = [
      "x-denv: { kind: service }",
      "services:",
      "  web:",
      "    image: 127.0.0.1:5000/denv/opsbox:bookworm",
      '    command: ["sleep", "infinity"]',
      '    healthcheck: { test: ["CMD", "false"], interval: 30s, retries: 100 }',
      "",
    ].join("\n");
    await w.api("POST", "/v1/projects", {
      name: "hosted",
      kind: "service",
      source: "./hosted",
      pinned_target: "modal",
    });
    assert.equal((await w.api("PUT", "/v1/projects/hosted/source", { compose })).status, 200);
    const started = await w.api("POST", "/v1/projects/hosted/deploy", { env: "alpha" });
    assert.equal(started.status, 202, JSON.stringify(started.data));
    const depId = started.data.id as string;
    await until("the deploy to reach its health phase", async () => {
      const d = await w.api("GET", `/v1/deployments/${depId}`);
      return d.data.phases.some((p: any) => p.name === "health" && p.status === "running") ? true : undefined;
    });
    const made = modal.sandboxes().filter((s) => !s.terminated);
    assert.equal(made.length, 1, "the deploy made its sandbox at the provider");
    await kill(w.server);
    await w.restartServer();
    const d = await until("the verdict", async () => {
      const x = (await w.api("GET", `/v1/deployments/${depId}`)).data;
      return x.status === "running" ? undefined : x;
    });
    assert.equal(d.status, "rolled_back", JSON.stringify(d).slice(0, 600));
    assert.match(d.reason, /server stopped/);
    const verdict = d.phases.find((p: any) => p.name === "verdict");
    assert.deepEqual(
      verdict?.evidence?.after_restart,
      [`ended sandbox ${made[0]?.id} at modal`],
      JSON.stringify(verdict),
    );
    assert.equal(modal.sandboxes().filter((s) => !s.terminated).length, 0, "nothing is left at the provider");
  } finally {
    await modal.close();
  }
});
