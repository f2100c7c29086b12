/**
 * denv-criu-limits.so, which the CRIU wrapper preloads (packages/denvd/criu/denv-criu-limits.c):
 * where the kernel refuses root a read of another user's process limits (no CAP_SYS_RESOURCE),
 * it answers the read from /proc/PID/limits. It must give the kernel's own values and nothing
 * more: a set of another user's limits stays refused, a resource out of range stays an error, and
 * a read of a process that is gone fails. Checked with a small program that calls prlimit64 through
 * glibc's syscall(), as CRIU does, against a process of uid 999 that set its own limits.
 */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { waitFor } from "../harness/wait-for.ts";

const LIBRARY = "/var/lib/denv-host/criu/lib/denv-criu-limits.so";
const PROBE = `#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
  pid_t pid = atoi(argv[1]);
  long res = atol(argv[2]);
  struct rlimit64 lim = {0, 0}, set = {1, 1};
  long r = strcmp(argv[3], "set") == 0 ? syscall(SYS_prlimit64, pid, res, &set, NULL)
                                        : syscall(SYS_prlimit64, pid, res, NULL, &lim);
  if (r) { printf("error %s\\n", strerror(errno)); return 0; }
  printf("%llu %llu\\n", (unsigned long long)lim.rlim_cur, (unsigned long long)lim.rlim_max);
  return 0;
}
`;
const RLIMIT_NOFILE = 7;
const RLIMIT_STACK = 3;
let dir: string;
let probe: string;
let other: ReturnType<typeof spawn>;

const ask = (pid: number, res: number, what: "get" | "set", preload: boolean) =>
  execFileSync(probe, [String(pid), String(res), what], {
    env: { PATH: process.env.PATH ?? "", ...(preload ? { LD_PRELOAD: LIBRARY } : {}) },
    encoding: "utf8",
  }).trim();
const rootHoldsSysResource = () =>
  ((BigInt(`0x${/^CapEff:\s*([0-9a-f]+)/m.exec(readFileSync("/proc/self/status", "utf8"))?.[1] ?? "0"}`) >>
    24n) &
    1n) ===
  1n;

before(async () => {
  assert.ok(existsSync(LIBRARY), `${LIBRARY} (scripts/ensure-criu.sh builds it)`);
  dir = mkdtempSync(join(tmpdir(), "denv-criu-limits-"));
  writeFileSync(join(dir, "probe.c"), PROBE);
  probe = join(dir, "probe");
  execFileSync("gcc", ["-O2", "-o", probe, join(dir, "probe.c")]);
  // Another user's process that lowered its own limits (below what it was started with).
  other = spawn(
    "setpriv",
    ["--reuid", "999", "--regid", "999", "--clear-groups", "sh", "-c", "ulimit -n 123; exec sleep 600"],
    { stdio: "ignore" },
  );
  await waitFor("the other user's process to set its limits", async () =>
    /^Max open files\s+123\s+123/m.test(readFileSync(`/proc/${other.pid}/limits`, "utf8")),
  );
});

after(() => {
  other?.kill("SIGKILL");
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("another user's limits are read as the kernel keeps them, from /proc where prlimit is refused", () => {
  const pid = other.pid as number;
  if (!rootHoldsSysResource())
    assert.equal(
      ask(pid, RLIMIT_NOFILE, "get", false),
      "error Operation not permitted",
      "refused without it",
    );
  assert.equal(ask(pid, RLIMIT_NOFILE, "get", true), "123 123");
  const stack = /^Max stack size\s+(\S+)\s+(\S+)/m.exec(readFileSync(`/proc/${pid}/limits`, "utf8"));
  const value = (v = "") => (v === "unlimited" ? "18446744073709551615" : v);
  assert.equal(ask(pid, RLIMIT_STACK, "get", true), `${value(stack?.[1])} ${value(stack?.[2])}`);
  // Root's own process is read by the kernel as before.
  assert.match(ask(process.pid, RLIMIT_NOFILE, "get", true), /^\d+ \d+$/);
});

test("nothing is set or made up: a set stays refused, a resource out of range and a process gone stay errors", () => {
  const pid = other.pid as number;
  if (!rootHoldsSysResource())
    assert.equal(ask(pid, RLIMIT_NOFILE, "set", true), "error Operation not permitted");
  assert.match(readFileSync(`/proc/${pid}/limits`, "utf8"), /^Max open files\s+123\s+123/m, "unchanged");
  // (The kernel checks the caller's right before the resource: either refusal stays one.)
  assert.match(ask(pid, 16, "get", true), /^error (Operation not permitted|Invalid argument)$/);
  assert.match(ask(pid, -1, "get", true), /^error (Operation not permitted|Invalid argument)$/);
  assert.equal(ask(2 ** 22 + 1, RLIMIT_NOFILE, "get", true), "error No such process");
});
