/**
 * Containers are hardened whatever their image says: no privilege gained through setuid binaries,
 * fewer capabilities than the engine's default (raw sockets, device nodes, chroot, file
 * capabilities, audit writes), and a cap on how much each dataset may grow, so one environment
 * cannot fill the pool the others live on. The hardening is read back from the kernel into the
 * evidence.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { pinSpec, RegistryPinner, validateCompose } from "@denv/spec";
import { deployStack, openTestHost, type TestHost } from "../harness/test-host.ts";

let host: TestHost;
const GROWTH = 64 * 1024 * 1024;

async function deploy(extra = "", name = `h-${Date.now()}`) {
  const r = validateCompose(
    `services:\n  box:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    command: [sleep, infinity]\n    volumes: [work:/work]\n${extra}volumes: { work: {} }\n`,
    { projectName: "hardening" },
  );
  assert.ok(r.ok, JSON.stringify(!r.ok && r.errors));
  return deployStack(host.denvd, await pinSpec(r.spec, new RegistryPinner()), { name });
}

const sh = async (envId: string, script: string) => {
  const r = await host.denvd.exec(envId, "box", { command: ["bash", "-c", script], user: "0" });
  return r.stdout.toString() + r.stderr.toString();
};

before(async () => {
  host = await openTestHost({ datasetGrowthBytes: GROWTH });
});

after(async () => {
  await host?.close();
});

describe("hardening", () => {
  test("root in the container gains nothing from setuid, and cannot make devices or chroot", async () => {
    const d = await deploy();
    const security = d.evidence.start.box?.caps.security;
    assert.equal(security?.no_new_privileges, true);
    assert.deepEqual(security?.dropped.sort(), ["AUDIT_WRITE", "MKNOD", "NET_RAW", "SETFCAP", "SYS_CHROOT"]);
    const out = await sh(
      d.stack.id,
      "grep NoNewPrivs /proc/self/status; mknod /tmp/dev c 1 3 2>/dev/null; echo mknod=$?; chroot / true 2>/dev/null; echo chroot=$?; id -u",
    );
    assert.match(out, /NoNewPrivs:\s+1/);
    assert.match(out, /mknod=[1-9]/);
    assert.match(out, /chroot=[1-9]/);
    assert.match(out, /^0$/m, "the image's user (root) is kept; only its powers are not");
    await host.denvd.destroy(d.stack.id);
  });

  test("a service may ask for a dropped capability back, and gets only that one", async () => {
    const d = await deploy("    cap_add: [NET_RAW]\n");
    const security = d.evidence.start.box?.caps.security;
    assert.deepEqual(security?.dropped.sort(), ["AUDIT_WRITE", "MKNOD", "SETFCAP", "SYS_CHROOT"]);
    await host.denvd.destroy(d.stack.id);
  });
});

describe("disk quota", () => {
  test("an environment that writes past its growth limit is stopped; another on the same pool is not", async () => {
    const a = await deploy("", "greedy");
    const b = await deploy("", "neighbour");
    assert.equal(a.evidence.prepare.quota.work?.enforced, "btrfs qgroup");
    assert.ok((a.evidence.prepare.quota.work?.limit_bytes ?? 0) >= GROWTH);
    const freeBefore = (await host.storage.capacity()).freeBytes;
    const out = await sh(
      a.stack.id,
      "dd if=/dev/zero of=/work/big bs=1M count=256 conv=fsync 2>&1; echo dd=$?; du -sm /work/big",
    );
    assert.match(out, /Disk quota exceeded/);
    assert.match(out, /dd=[1-9]/);
    const mb = Number(/^(\d+)\s+\/work\/big/m.exec(out)?.[1]);
    assert.ok(mb <= 70, `${mb} MiB written`);
    // The pool lost no more than the limit; the neighbour writes as usual.
    assert.ok(freeBefore - (await host.storage.capacity()).freeBytes < 128 * 1024 * 1024);
    assert.match(
      await sh(b.stack.id, "dd if=/dev/zero of=/work/ok bs=1M count=32 conv=fsync 2>&1; echo dd=$?"),
      /dd=0/,
    );
    // A fork of a snapshot gets its own limit, counted from the data it starts with.
    const { version } = await host.denvd.snapshot(a.stack.id);
    const fork = await host.denvd.fork(version.id, { name: "greedy-fork" });
    assert.ok((fork.evidence.quota.work?.limit_bytes ?? 0) >= GROWTH + mb * 1024 * 1024 * 0.9);
    await host.denvd.destroy(fork.stack.id);
    await host.denvd.destroy(a.stack.id);
    await host.denvd.destroy(b.stack.id);
  });
});
