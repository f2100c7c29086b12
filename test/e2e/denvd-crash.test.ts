/**
 * denvd killed with SIGKILL in the middle of a fork, then restarted: reconcile must leave no orphan
 * (no container, network or volume of the interrupted fork; no dataset no record holds), and the
 * environments that were already there keep running.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { LABEL } from "@denv/denvd";
import { deployStack, openTestHost, opsWorldSpec, type TestHost } from "./denvd-helpers.ts";

let host: TestHost;
let versionId: string;
let alphaId: string;

before(async () => {
  host = await openTestHost({});
  const d = await deployStack(host.denvd, await opsWorldSpec(), { name: "alpha" });
  versionId = d.version.id;
  alphaId = d.stack.id;
});

after(async () => {
  await host?.close();
});

async function killMidFork(delayMs: number): Promise<boolean> {
  const child = spawn(
    process.execPath,
    [join(import.meta.dirname, "fixtures", "fork-child.ts"), host.stateDir, host.runId, versionId],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let out = "";
  const exited = new Promise<void>((r) => child.on("exit", () => r()));
  await new Promise<void>((resolve, reject) => {
    child.stdout.on("data", (c: Buffer) => {
      out += c.toString();
      if (out.includes("forking")) resolve();
    });
    child.on("exit", () => reject(new Error(`child exited before forking: ${out}`)));
  });
  await new Promise((r) => setTimeout(r, delayMs));
  child.kill("SIGKILL");
  await exited;
  return out.includes("forked");
}

const removedPerCase: number[] = [];

for (const delayMs of [30, 150, 400, 700]) {
  test(`SIGKILL ${delayMs} ms into a fork, then a restart, leaves no orphan`, async () => {
    const finished = await killMidFork(delayMs);
    // Restart: a new denvd on the same state directory reconciles on open.
    const again = await openTestHost({ stateDir: host.stateDir, runId: host.runId });
    removedPerCase.push(again.denvd.lastReconcile.removed.length);
    const envs = again.denvd.stacks();
    assert.ok(
      envs.every((e) => e.status === "running"),
      JSON.stringify(envs.map((e) => [e.name, e.status])),
    );
    const known = new Set(envs.map((e) => e.id));
    const owner = { [LABEL.owner]: again.denvd.ownerId };
    for (const list of [
      await again.denvd.runtime.listContainers(owner),
      await again.denvd.runtime.listVolumes(owner),
      await again.denvd.runtime.listNetworks(owner),
    ]) {
      for (const o of list) assert.ok(known.has(o.labels[LABEL.stack] ?? ""), `orphan ${o.name}`);
    }
    const held = new Set(envs.flatMap((e) => Object.values(e.datasets)));
    for (const ds of await again.storage.listDatasets()) assert.ok(held.has(ds), `orphan dataset ${ds}`);
    // The environment that was there before still answers.
    const r = await again.denvd.exec(alphaId, "opsbox", {
      command: ["psql", "-tAc", "select count(*) from orders"],
    });
    assert.equal(r.stdout.toString().trim(), "100000");
    // A fork that finished before the kill is a whole, running environment; clear it for the next case.
    const doomed = envs.find((e) => e.name === "doomed");
    if (finished) assert.ok(doomed, "a fork that finished is kept");
    if (doomed) await again.denvd.destroy(doomed.id);
  });
}

test("at least one kill landed mid-fork and reconcile removed what it had made", () => {
  assert.ok(
    removedPerCase.some((n) => n > 0),
    `objects removed per case: ${removedPerCase.join(", ")}`,
  );
  process.stdout.write(`# objects reconcile removed per kill: ${removedPerCase.join(", ")}\n`);
});
