/**
 * A service that does its work and exits (a seed job, a migration) beside ones that keep running:
 * the deploy's snapshot, a later snapshot and a fork skip what has exited (there is nothing of it to
 * pause) and keep what it wrote. Issue 34: an exported task's one-shot warm service failed every
 * snapshot with "pausing a container: it is busy or not running". Real server, denvd and engine.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type Lab, openLab } from "../harness/lab.ts";

let lab: Lab;

const COMPOSE = `services:
  app:
    image: 127.0.0.1:5000/denv/opsbox:bookworm
    command: ["sleep", "infinity"]
    volumes: ["data:/data"]
    depends_on:
      seed:
        condition: service_completed_successfully
  seed:
    image: 127.0.0.1:5000/denv/opsbox:bookworm
    user: "0"
    command: ["sh", "-c", "echo seeded > /data/seed.txt && chmod 644 /data/seed.txt"]
    volumes: ["data:/data"]
    restart: "no"
volumes:
  data: {}
x-denv:
  kind: service
`;

before(async () => {
  lab = await openLab();
});

after(async () => {
  if (lab)
    for (const e of (await lab.api("GET", "/v1/envs")).data.environments ?? [])
      await lab.api("DELETE", `/v1/envs/${e.id}`);
  await lab?.close();
});

test("a one-shot service that has exited is skipped by snapshots and forks, and what it wrote is kept", async () => {
  assert.equal(
    (await lab.api("POST", "/v1/projects", { name: "seeded", kind: "service", source: "./seeded" })).status,
    201,
  );
  assert.equal((await lab.api("PUT", "/v1/projects/seeded/source", { compose: COMPOSE })).status, 200);
  const d = await lab.api("POST", "/v1/projects/seeded/deploy?wait=true", { env: "alpha" });
  assert.equal(d.data.status, "succeeded", d.data.reason);
  const snap = await lab.api("POST", `/v1/envs/${encodeURIComponent("seeded/alpha")}/snapshot`);
  assert.equal(snap.data.status, "succeeded", snap.data.reason);
  const fork = await lab.api("POST", `/v1/envs/${encodeURIComponent("seeded/alpha")}/fork`, {
    name: "after-seed",
  });
  assert.equal(fork.status, 201, JSON.stringify(fork.data));
  const read = await lab.api("POST", `/v1/envs/${fork.data.id}/exec`, {
    service: "app",
    command: ["cat", "/data/seed.txt"],
  });
  assert.equal(read.data.stdout, "seeded\n", JSON.stringify(read.data));
});
