/**
 * denvd killed with SIGKILL in the middle of a fork, then restarted: reconcile must leave no orphan
 * (no container, network or volume of the interrupted fork; no dataset no record holds), and the
 * environments that were already there keep running. Then, set up exactly as a kill leaves them:
 * a snapshot cut off inside its frozen window (thawed, undone), a verify's frozen agent (kept
 * frozen), a rollback cut off half way (finished, its outcome kept for the server's re-send).
 */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { DockerRuntime } from "@denv/denvd";
import { assertNoOrphans, frozenServices } from "../harness/host-leftovers.ts";
import {
  deployStack,
  openTestHost,
  opsWorldSpec,
  readHostState,
  type TestHost,
  writeHostStack,
} from "../harness/test-host.ts";
import { elapse } from "../harness/wait-for.ts";

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

/**
 * Where a fork is killed: each point is a state the fork has reached, seen from outside (its
 * record in the host's state, its datasets, its network, a container of its own running), polled every few ms,
 * so the kill lands there and not wherever a sleep happened to end.
 */
const OPSBOX_IMAGE = "127.0.0.1:5000/denv/opsbox:bookworm";

const KILL_POINTS: Record<string, () => Promise<boolean>> = {
  // A read that meets the database mid-write is taken as not yet.
  "its record is written": async () => {
    try {
      return Object.values(readHostState(host.stateDir).stacks).some((s) => s.name === "doomed");
    } catch {
      return false;
    }
  },
  "its datasets are cloned": async () => (await host.storage.listDatasets()).length > datasetsBefore,
  "its network exists": async () =>
    (await host.docker.listNetworks({ filters: JSON.stringify({ label: [`dev.denv.test=${host.runId}`] }) }))
      .length > networksBefore,
  "a container of its own runs": async () =>
    (
      await host.docker.listContainers({
        filters: JSON.stringify({ label: [`dev.denv.test=${host.runId}`], status: ["running"] }),
      })
    ).length > runningBefore,
};
let datasetsBefore = 0;
let networksBefore = 0;
let runningBefore = 0;

async function killMidFork(point: string): Promise<{ finished: boolean; reached: boolean }> {
  assert.ok(!(await KILL_POINTS["its record is written"]?.()), "no fork of that name is left from before");
  datasetsBefore = (await host.storage.listDatasets()).length;
  const label = JSON.stringify({ label: [`dev.denv.test=${host.runId}`] });
  networksBefore = (await host.docker.listNetworks({ filters: label })).length;
  runningBefore = (
    await host.docker.listContainers({
      filters: JSON.stringify({ label: [`dev.denv.test=${host.runId}`], status: ["running"] }),
    })
  ).length;
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
  const reachedIt = KILL_POINTS[point] as () => Promise<boolean>;
  let reached = false;
  for (const deadline = Date.now() + 30_000; Date.now() < deadline && !out.includes("forked"); ) {
    if (await reachedIt()) {
      reached = true;
      break;
    }
    await new Promise((r) => setTimeout(r, 3));
  }
  child.kill("SIGKILL");
  await exited;
  return { finished: out.includes("forked"), reached };
}

const removedPerCase: number[] = [];

for (const point of Object.keys(KILL_POINTS)) {
  test(`SIGKILL when a fork's ${point.replace(/^its |^a /, "")}, then a restart, leaves no orphan`, async () => {
    const { finished, reached } = await killMidFork(point);
    assert.ok(reached, `the fork was seen reaching the kill point (${point})`);
    // Restart: a new denvd on the same state directory reconciles on open.
    const again = await openTestHost({ stateDir: host.stateDir, runId: host.runId });
    removedPerCase.push(again.denvd.lastReconcile.removed.length);
    const envs = again.denvd.stacks();
    assert.ok(
      envs.every((e) => e.status === "running"),
      JSON.stringify(envs.map((e) => [e.name, e.status])),
    );
    await assertNoOrphans(again);
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

/** Opens the host again on the same state directory, as a restarted denvd does. */
async function reopen(): Promise<TestHost> {
  return openTestHost({ stateDir: host.stateDir, runId: host.runId });
}

async function pausedServices(h: TestHost, stackId: string): Promise<string[]> {
  const stack = h.denvd.stack(stackId);
  const out: string[] = [];
  for (const [svc, id] of Object.entries(stack.containers))
    if ((await h.denvd.runtime.inspectContainer(id)).paused) out.push(svc);
  return out.sort();
}

test("a snapshot cut off inside its frozen window is thawed and undone at the next open", async () => {
  const stack = host.denvd.stack(alphaId);
  // What a kill inside the frozen window leaves: every service frozen (the engine not told), the
  // operation written down as running, one dataset's snapshot made and no version recorded.
  const opId = "op_0123456789ab";
  const versionId = "ver_0123456789ab";
  await host.denvd.journal.begin({
    opId,
    method: "snapshot",
    params: { stack_id: alphaId, new_version_id: versionId },
    stackVersionId: stack.versionId,
  });
  for (const id of Object.values(stack.containers)) {
    const st = await host.denvd.runtime.inspectContainer(id);
    await host.denvd.runtime.freezeContainer(st.id, st.pid);
  }
  const half = `${versionId}-pg`;
  await host.storage.snapshot(stack.datasets.pg as string, half);
  assert.deepEqual(await frozenServices(host, alphaId), ["db", "opsbox", "queue"]);
  assert.deepEqual(await pausedServices(host, alphaId), [], "the engine was not asked to pause");
  const again = await reopen();
  assert.deepEqual(await frozenServices(again, alphaId), []);
  assert.deepEqual(again.denvd.lastReconcile.thawed.sort(), [
    `${alphaId}/db`,
    `${alphaId}/opsbox`,
    `${alphaId}/queue`,
  ]);
  assert.deepEqual(again.denvd.lastReconcile.interrupted, [`snapshot ${opId}: undone`]);
  assert.ok(!(await again.storage.listSnapshots()).includes(half), "the half-made snapshot is removed");
  assert.equal((await again.denvd.journal.get(opId))?.status, "undone");
  // The environment answers, and the server's re-send of the same operation runs it anew.
  const r = await again.denvd.exec(alphaId, "opsbox", { command: ["psql", "-tAc", "select 1"] });
  assert.equal(r.stdout.toString().trim(), "1");
  const snap = await again.denvd.snapshot(alphaId, { versionId });
  assert.equal(snap.version.id, versionId);
  await again.denvd.deleteVersion(versionId);
});

test("a service verify froze stays frozen across a restart; one recorded frozen but running is cleared", async () => {
  const stack = host.denvd.stack(alphaId);
  await host.denvd.recordFrozen(alphaId, "opsbox", true);
  await host.denvd.runtime.pauseContainer(stack.containers.opsbox as string);
  // Recorded, but cut off before it paused: the record follows the engine.
  await host.denvd.recordFrozen(alphaId, "queue", true);
  const again = await reopen();
  assert.deepEqual(await pausedServices(again, alphaId), ["opsbox"]);
  assert.deepEqual(again.denvd.stack(alphaId).frozen, ["opsbox"]);
  assert.deepEqual(again.denvd.lastReconcile.thawed, []);
  await again.denvd.runtime.unpauseContainer(stack.containers.opsbox as string);
  await again.denvd.recordFrozen(alphaId, "opsbox", false);
});

/** CPU ticks a process has used (utime + stime from /proc/PID/stat). */
function cpuTicks(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  return Number(fields[11]) + Number(fields[12]);
}

async function advances(pid: number): Promise<boolean> {
  const start = cpuTicks(pid);
  for (let i = 0; i < 200; i++) {
    await elapse(25, "CPU ticks are read between turns of the loop");
    if (cpuTicks(pid) > start) return true;
  }
  return false;
}

test("a freeze stops a container's processes without the engine's pause; its thaw, or a restarted denvd's, ends it", async () => {
  // A busy loop as the first process, ending by itself (and labelled for the leftovers' sweep) in
  // case this test dies before it removes it.
  const loop = "while [ $SECONDS -lt 300 ]; do :; done";
  const id = execFileSync(
    "docker",
    [
      "run",
      "-d",
      "--rm",
      "--network",
      "none",
      "--label",
      "dev.denv.test=freezer",
      OPSBOX_IMAGE,
      "bash",
      "-c",
      loop,
    ],
    { encoding: "utf8" },
  ).trim();
  try {
    const rt = host.denvd.runtime;
    const st = await rt.inspectContainer(id);
    assert.ok(await advances(st.pid), "the loop runs");
    await rt.freezeContainer(id, st.pid);
    const ticks = cpuTicks(st.pid);
    await elapse(300, "a frozen loop must be seen to take no CPU (it took some every 25 ms)");
    assert.equal(cpuTicks(st.pid), ticks, "no CPU while frozen");
    assert.equal((await rt.inspectContainer(id)).paused, false, "the engine was not asked");
    assert.equal(await rt.thawContainer(id), true);
    assert.ok(await advances(st.pid), "it runs again");
    assert.equal(await rt.thawContainer(id), false, "nothing left to thaw");
    // A kill inside the window: a new runtime (a restarted denvd) finds the freeze and ends it.
    await rt.freezeContainer(id, st.pid);
    assert.equal(await new DockerRuntime().thawContainer(id), true);
    assert.ok(await advances(st.pid), "it runs after the restart's thaw");
    // The engine's own pause (a service verify froze) is not the thaw's to end.
    await rt.pauseContainer(id);
    assert.equal(await new DockerRuntime().thawContainer(id), false);
    assert.equal((await rt.inspectContainer(id)).paused, true);
    await rt.unpauseContainer(id);
  } finally {
    execFileSync("docker", ["rm", "-f", id], { stdio: "ignore" });
  }
});

test("a rollback cut off after the stack's data was removed is finished at the next open, its outcome kept for the re-send", async () => {
  const before = host.denvd.stack(alphaId);
  const versionId = before.versionId as string;
  const opId = "op_abcdef012345";
  await host.denvd.journal.begin({
    opId,
    method: "rollback",
    params: { stack_id: alphaId, version_id: versionId },
    stackVersionId: versionId,
  });
  // What the first half of a rollback does before a kill: the stack marked restoring, its
  // containers removed, one dataset gone.
  writeStackRecord({ ...before, status: "restoring", restoreVersionId: versionId });
  for (const id of Object.values(before.containers)) await host.denvd.runtime.removeContainer(id);
  await host.storage.destroyDataset(before.datasets.pg as string);
  const again = await reopen();
  assert.deepEqual(again.denvd.lastReconcile.interrupted, [`rollback ${opId}: finished`]);
  const after = again.denvd.stack(alphaId);
  assert.equal(after.status, "running");
  assert.equal(after.restoreVersionId, undefined);
  const entry = await again.denvd.journal.get(opId);
  assert.equal(entry?.status, "done");
  assert.equal(entry?.outcome?.ok, true);
  const r = await again.denvd.exec(alphaId, "opsbox", {
    command: ["psql", "-tAc", "select count(*) from orders"],
  });
  assert.equal(r.stdout.toString().trim(), "100000");
});

/** Writes a stack record into the host's database, as a kill mid-operation leaves it. */
function writeStackRecord(rec: ReturnType<TestHost["denvd"]["stack"]>): void {
  writeHostStack(host.stateDir, rec as { id: string });
}
