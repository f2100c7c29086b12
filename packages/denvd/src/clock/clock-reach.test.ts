import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { isRuntimeInit } from "../services/service-starter.ts";
import { elfInterpreter, linkageOf, serviceClockReach } from "./clock-reach.ts";

const head = (path: string) => readFileSync(path).subarray(0, 4096);

test("the loader a program names: glibc's for a dynamic program, none for a static one", () => {
  assert.match(String(elfInterpreter(head(process.execPath))), /ld-linux/);
  assert.equal(linkageOf(elfInterpreter(head(process.execPath))), "glibc");
  // ldconfig is statically linked in Debian's glibc.
  assert.equal(elfInterpreter(head("/sbin/ldconfig")), null);
  assert.equal(linkageOf(null), "static");
  assert.equal(linkageOf("/lib/ld-musl-x86_64.so.1"), "musl");
  assert.equal(linkageOf("/opt/weird/loader"), "other");
});

test("a hostile or broken ELF header is 'unknown', never an exception or a read out of bounds", () => {
  const good = head(process.execPath);
  assert.equal(elfInterpreter(Buffer.from("#!/bin/sh\necho hi\n")), "unknown");
  assert.equal(elfInterpreter(good.subarray(0, 40)), "unknown");
  const bigEndian = Buffer.from(good);
  bigEndian[5] = 2;
  assert.equal(elfInterpreter(bigEndian), "unknown");
  const manyHeaders = Buffer.from(good);
  manyHeaders.writeUInt16LE(65535, 56);
  assert.equal(elfInterpreter(manyHeaders), "unknown");
  const farHeaders = Buffer.from(good);
  farHeaders.writeBigUInt64LE(1n << 40n, 32);
  assert.equal(elfInterpreter(farHeaders), "unknown");
  // PT_INTERP pointing past what was read, or absurdly long.
  const interpAt = (b: Buffer) => {
    const phoff = Number(b.readBigUInt64LE(32));
    for (let i = 0; i < b.readUInt16LE(56); i++)
      if (b.readUInt32LE(phoff + i * 56) === 3) return phoff + i * 56;
    throw new Error("no PT_INTERP");
  };
  const farInterp = Buffer.from(good);
  farInterp.writeBigUInt64LE(1n << 32n, interpAt(farInterp) + 8);
  assert.equal(elfInterpreter(farInterp), "unknown");
  const longInterp = Buffer.from(good);
  longInterp.writeBigUInt64LE(100_000n, interpAt(longInterp) + 32);
  assert.equal(elfInterpreter(longInterp), "unknown");
});

test("a process that is not running, or not there, is reported so", async () => {
  assert.equal((await serviceClockReach(0)).reason, "its program is not running");
  assert.equal((await serviceClockReach(2 ** 22 + 17, { settleMs: 200 })).frozen, false);
});

test("the engine's runtime, before it execs the program, is not taken for the service's program", () => {
  for (const exe of ["/", "/memfd:runc_cloned:/proc/self/exe (deleted)", "/usr/bin/runc"])
    assert.equal(isRuntimeInit(exe), true, exe);
  for (const exe of ["/usr/bin/busybox", "/usr/lib/postgresql/15/bin/postgres"])
    assert.equal(isRuntimeInit(exe), false, exe);
});

test("this test's own process: running, glibc, and not on a frozen clock (the library is not mapped)", async () => {
  const r = await serviceClockReach(process.pid);
  assert.equal(r.frozen, false);
  assert.equal(r.linkage, "glibc");
  assert.equal(r.program, process.execPath);
  assert.match(String(r.reason), /did not load the clock library/);
});
