/**
 * Live versions under SIGKILL (issue 71): a denvd killed while it writes a live snapshot's process
 * images (the stack frozen), or while a fork restores a live version's processes, then opened
 * again on the same state. Nothing may stay frozen, no process image may outlive an unrecorded
 * version, and no half-restored fork may remain: the fork is whole and running, or gone with all
 * it made. The parent's process goes on throughout.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { StackRecord } from "@denv/denvd";
import { pinSpec, RegistryPinner, validateCompose } from "@denv/spec";
import { assertNoOrphans as assertNoOrphansOn, frozenServices } from "../harness/host-leftovers.ts";
import { hostOp, openTestHost, type TestHost } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
/** Holds a token drawn at its start in memory, and writes it with its count every tick. */
const TICKER =
  't=$(cat /proc/sys/kernel/random/uuid); i=0; while :; do i=$((i+1)); echo "$t $i" > /srv/count.new; mv /srv/count.new /srv/count; sleep 0.1; done';
/** Memory enough that a dump takes a while to write (the kill lands inside it). */
const HOLDER =
  "import time; b = bytearray(256 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); time.sleep(1e9)";

let host: TestHost;
let stack: StackRecord;

async function tick(h: TestHost, stackId: string): Promise<{ token: string; count: number }> {
  const r = await h.denvd.exec(stackId, "ticker", { command: ["cat", "/srv/count"] });
  const [token = "", count = "0"] = r.stdout.toString().trim().split(" ");
  return { token, count: Number(count) };
}

before(async () => {
  host = await openTestHost({});
  const compose = `x-denv: { kind: service }
services:
  ticker:
    image: ${OPSBOX}
    command: ["sh", "-c", ${JSON.stringify(TICKER.replaceAll("$", "$$$$"))}]
    volumes: ["data:/data"]
  holder:
    image: ${OPSBOX}
    command: ["python3", "-c", ${JSON.stringify(HOLDER)}]
volumes:
  data: {}
`;
  const r = validateCompose(compose, { env: {}, projectName: "crash" });
  if (!r.ok) throw new Error(JSON.stringify(r.errors));
  const prepared = await hostOp(host.denvd, "prepare", {
    spec: await pinSpec(r.spec, new RegistryPinner()),
    name: "parent",
    operation_id: "op_parent",
  });
  await hostOp(host.denvd, "start", { stack_id: prepared.stack_id });
  stack = host.denvd.stack(prepared.stack_id);
  await waitFor("the ticker to tick", async () => (await tick(host, stack.id)).count >= 2);
});

after(async () => {
  await host?.close();
});

/** Runs the child and SIGKILLs it once `reached` says so (or it finishes first). */
async function killWhen(
  args: string[],
  reached: () => boolean,
): Promise<{ reached: boolean; finished: boolean }> {
  // This process lets the state go: the child opens it as a restarted denvd would.
  await host.denvd.close();
  const child = spawn(
    process.execPath,
    [join(import.meta.dirname, "fixtures", "live-child.ts"), host.stateDir, host.runId, ...args],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let out = "";
  const exited = new Promise<void>((r) => child.on("exit", () => r()));
  child.stdout.on("data", (c: Buffer) => {
    out += c.toString();
  });
  let seen = false;
  await waitFor(
    "the child to reach the kill point or finish",
    async () => {
      seen = out.includes("started") && reached();
      return seen || out.includes("done") || child.exitCode !== null;
    },
    { intervalMs: 2 },
  );
  child.kill("SIGKILL");
  await exited;
  host = await openTestHost({ stateDir: host.stateDir, runId: host.runId });
  return { reached: seen, finished: out.includes("done") };
}

/** Nothing no record holds: engine objects, datasets, and process images of unrecorded versions. */
async function assertNoOrphans(): Promise<void> {
  await assertNoOrphansOn(host);
  const versions = new Set(host.denvd.versions().map((v) => v.id));
  const live = join(host.stateDir, "live");
  for (const v of existsSync(live) ? readdirSync(live) : [])
    assert.ok(versions.has(v), `process images of unrecorded version ${v}`);
}

test("SIGKILL while a live snapshot writes its process images: thawed, the images and the version gone, the process going on", async () => {
  const versionId = "ver_00000000c0de";
  const images = join(host.stateDir, "live", versionId, "holder", "images");
  const before = await tick(host, stack.id);
  const { reached } = await killWhen(["snapshot", stack.id, versionId], () => {
    try {
      return readdirSync(images).some((f) => f.startsWith("pages-"));
    } catch {
      return false;
    }
  });
  assert.ok(reached, "the kill landed while the images were written");
  assert.deepEqual(await frozenServices(host, stack.id), [], "nothing stays frozen");
  assert.equal(
    host.denvd.versions().find((v) => v.id === versionId),
    undefined,
    "no version was recorded",
  );
  assert.equal(existsSync(join(host.stateDir, "live", versionId)), false, "its images were removed");
  await assertNoOrphans();
  // The same process, ticking on.
  await waitFor("the ticker to go on", async () => (await tick(host, stack.id)).count > before.count);
  assert.equal((await tick(host, stack.id)).token, before.token);
});

test("SIGKILL while a fork restores a live version: the fork is whole or gone, nothing of it left half-made", async () => {
  const snap = await hostOp(host.denvd, "snapshot", { stack_id: stack.id, live: "on" });
  assert.deepEqual(Object.keys(snap.evidence.live?.services ?? {}).sort(), ["holder", "ticker"]);
  const parent = await tick(host, stack.id);
  // The restore's images copied into a fork container's own directory: the engine is restoring it.
  const restoring = () => {
    try {
      return readdirSync("/var/lib/docker/containers").some((c) =>
        existsSync(join("/var/lib/docker/containers", c, "checkpoints", "denv-live")),
      );
    } catch {
      return false;
    }
  };
  const { reached, finished } = await killWhen(["fork", snap.version_id], restoring);
  assert.ok(reached || finished, "the fork was seen restoring");
  const doomed = host.denvd.stacks().find((s) => s.name === "doomed");
  if (doomed) {
    // Kept only whole: every service running, the restored ticker the parent's process.
    assert.equal(doomed.status, "running");
    assert.equal((await tick(host, doomed.id)).token, parent.token);
    await host.denvd.destroy(doomed.id);
  }
  await assertNoOrphans();
  assert.deepEqual(await frozenServices(host, stack.id), []);
  // The version is whole: a fork of it now restores the parent's process.
  const again = await hostOp(host.denvd, "fork", {
    version_id: snap.version_id,
    name: "after",
    operation_id: "op_after",
  });
  assert.equal((await tick(host, again.stack_id)).token, parent.token);
});
