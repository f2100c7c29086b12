import assert from "node:assert/strict";
import { test } from "node:test";
import { processRefusal } from "./live-capture.ts";

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
