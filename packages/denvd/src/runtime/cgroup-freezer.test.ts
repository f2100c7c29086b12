import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { findFreezer, freeze, freezerFromProcCgroup, isFrozen, thaw } from "./cgroup-freezer.ts";

const ID = "3f1c0d9e8b7a65432f1c0d9e8b7a65432f1c0d9e8b7a65432f1c0d9e8b7a6543";

test("the freezer is found from /proc/PID/cgroup: v1's freezer line first, else v2's unified path", () => {
  const hybrid = [
    `12:pids:/docker/${ID}`,
    `5:freezer:/docker/${ID}`,
    `1:name=systemd:/docker/${ID}`,
    `0::/docker/${ID}`,
  ].join("\n");
  assert.deepEqual(freezerFromProcCgroup(hybrid, ID, "/sys/fs/cgroup"), {
    version: 1,
    dir: `/sys/fs/cgroup/freezer/docker/${ID}`,
  });
  assert.deepEqual(freezerFromProcCgroup(`0::/system.slice/docker-${ID}.scope\n`, ID, "/sys/fs/cgroup"), {
    version: 2,
    dir: `/sys/fs/cgroup/system.slice/docker-${ID}.scope`,
  });
});

test("a cgroup that does not name the container, or climbs out of the tree, is not taken", () => {
  // A pid reused by a host process, another container's cgroup, a path with "..".
  assert.equal(freezerFromProcCgroup("5:freezer:/user.slice\n0::/user.slice\n", ID, "/c"), null);
  assert.equal(freezerFromProcCgroup(`5:freezer:/docker/${"0".repeat(64)}\n`, ID, "/c"), null);
  assert.equal(freezerFromProcCgroup(`0::/docker/${ID}/../../etc\n`, ID, "/c"), null);
  // v1's freezer naming another cgroup is final: the unified line is not a way around it.
  assert.equal(freezerFromProcCgroup(`5:freezer:/other\n0::/docker/${ID}\n`, ID, "/c"), null);
  assert.equal(freezerFromProcCgroup("garbage\n\n::\n", ID, "/c"), null);
});

test("findFreezer takes the cgroup only when the process is listed in it; freeze, isFrozen and thaw write its file", async () => {
  const root = await mkdtemp(join(tmpdir(), "freezer-"));
  try {
    const proc = join(root, "proc");
    const cgroup = join(root, "cgroup");
    const dir = join(cgroup, "freezer", "docker", ID);
    await mkdir(join(proc, "4242"), { recursive: true });
    await mkdir(dir, { recursive: true });
    await writeFile(join(proc, "4242", "cgroup"), `7:freezer:/docker/${ID}\n`);
    await writeFile(join(dir, "cgroup.procs"), "4243\n");
    await writeFile(join(dir, "freezer.state"), "THAWED\n");
    assert.equal(await findFreezer(4242, ID, { proc, cgroup }), null, "its pid is not in the cgroup");
    await writeFile(join(dir, "cgroup.procs"), "4242\n4250\n");
    const f = await findFreezer(4242, ID, { proc, cgroup });
    assert.deepEqual(f, { version: 1, dir });
    assert.equal(await findFreezer(0, ID, { proc, cgroup }), null);
    assert.equal(await findFreezer(9999, ID, { proc, cgroup }), null, "no such process");
    if (!f) return;
    assert.equal(await isFrozen(f), false);
    await freeze(f);
    assert.equal(await readFile(join(dir, "freezer.state"), "utf8"), "FROZEN");
    assert.equal(await isFrozen(f), true);
    await thaw(f);
    assert.equal(await isFrozen(f), false);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});

test("a v2 cgroup that never reports frozen is thawed again and the freeze rejects", async () => {
  const dir = await mkdtemp(join(tmpdir(), "freezer-"));
  try {
    await writeFile(join(dir, "cgroup.freeze"), "0\n");
    await writeFile(join(dir, "cgroup.events"), "populated 1\nfrozen 0\n");
    const f = { version: 2 as const, dir };
    await assert.rejects(freeze(f, 3), /did not freeze/);
    assert.equal(await readFile(join(dir, "cgroup.freeze"), "utf8"), "0", "left thawed");
    await writeFile(join(dir, "cgroup.events"), "populated 1\nfrozen 1\n");
    await freeze(f, 3);
    assert.equal(await isFrozen(f), true);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
