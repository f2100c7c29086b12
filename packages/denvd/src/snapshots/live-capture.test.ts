import assert from "node:assert/strict";
import { test } from "node:test";
import { holdsSysResource, printableComm, processRefusal } from "./live-capture.ts";

const proc = (over: Partial<Parameters<typeof processRefusal>[0]>) => ({
  pid: 7,
  comm: "worker",
  tracerPid: 0,
  fds: ["/dev/null", "pipe:[123]", "socket:[456]", "/data/log"],
  ...over,
});

test("an ordinary process (files, pipes, sockets) is one CRIU can take", () => {
  assert.equal(processRefusal(proc({})), null);
});

test("a GPU, io_uring, a traced process and devices CRIU cannot restore are refused, saying which", () => {
  assert.match(processRefusal(proc({ fds: ["/dev/nvidia0"] })) ?? "", /GPU device \(\/dev\/nvidia0\)/);
  assert.match(processRefusal(proc({ fds: ["/dev/dri/renderD128"] })) ?? "", /GPU device/);
  assert.match(processRefusal(proc({ fds: ["anon_inode:[io_uring]"] })) ?? "", /io_uring/);
  assert.match(processRefusal(proc({ tracerPid: 42 })) ?? "", /traced by process 42/);
  assert.match(processRefusal(proc({ fds: ["/dev/kvm"] })) ?? "", /\/dev\/kvm/);
});

test("a file merely named like a device elsewhere is not mistaken for one", () => {
  assert.equal(processRefusal(proc({ fds: ["/data/dev/nvidia0", "/tmp/io_uring"] })), null);
});

test("where root lacks CAP_SYS_RESOURCE, another user's process is refused saying why; root's is taken", () => {
  const noRes = { sysResource: false };
  const asUser = proc({ ids: { uids: [1000, 1000, 1000], gids: [1000, 1000, 1000] } });
  assert.match(processRefusal(asUser, noRes) ?? "", /uid 1000.*lacks CAP_SYS_RESOURCE/);
  assert.equal(processRefusal(asUser, { sysResource: true }), null);
  // denv's CRIU wrapper reads the limits from /proc where it was built: then nothing is refused.
  assert.equal(processRefusal(asUser, { sysResource: false, limitsFromProc: true }), null);
  assert.equal(processRefusal(proc({ ids: { uids: [0, 0, 0], gids: [0, 0, 0] } }), noRes), null);
  // A root process that kept another group is another user's to the kernel's check.
  assert.match(
    processRefusal(proc({ ids: { uids: [0, 0, 0], gids: [0, 0, 5] } }), noRes) ?? "",
    /CAP_SYS_RESOURCE/,
  );
});

test("CAP_SYS_RESOURCE is read from the effective capabilities' bit 24", () => {
  assert.equal(holdsSysResource("Name:\tnode\nCapEff:\t000001ffffffffff\n"), true);
  assert.equal(holdsSysResource("CapEff:\t000001fffeffffff\n"), false);
  assert.equal(holdsSysResource("no capabilities here"), false);
});

test("a process name a container chose is quoted printable and bounded", () => {
  assert.equal(printableComm("py\u001b[31mthon\n"), "py?[31mthon?");
  assert.equal(printableComm("x".repeat(200)).length, 64);
  assert.equal(printableComm("python3"), "python3");
});

test("a process holding a TCP connection to outside the stack is refused naming the peer; one inside is taken", () => {
  const outside = new Map([["456", "10.231.0.1:41000"]]);
  assert.match(
    processRefusal(proc({}), { sysResource: true }, outside) ?? "",
    /TCP connection to 10\.231\.0\.1:41000, outside the stack/,
  );
  assert.equal(processRefusal(proc({ fds: ["socket:[789]"] }), { sysResource: true }, outside), null);
  // A file whose name looks like a socket's link is not one.
  assert.equal(processRefusal(proc({ fds: ["/data/socket:[456]"] }), { sysResource: true }, outside), null);
});
