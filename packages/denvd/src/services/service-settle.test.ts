import assert from "node:assert/strict";
import { test } from "node:test";
import { SETTLE_IDLE_MS, type SettleProbe, settleService, waitingFrom } from "./service-settle.ts";

/** A probe on a clock the test drives: CPU time from a function of the clock, waiting as told. */
function fakeProbe(
  cpuAt: (t: number) => number | null,
  waiting: (t: number) => boolean,
): SettleProbe & { t: number } {
  const p = {
    t: 0,
    cpuMs: async () => cpuAt(p.t),
    waiting: async () => waiting(p.t),
    now: () => p.t,
    sleep: async (ms: number) => {
      p.t += ms;
    },
  };
  return p;
}

test("a service that uses no CPU and sleeps waiting is settled once it has been quiet a whole idle window", async () => {
  const p = fakeProbe(
    () => 40,
    () => true,
  );
  assert.equal(await settleService(p, 1000), "idle");
  assert.ok(p.t >= SETTLE_IDLE_MS && p.t < 1000, `${p.t}`);
});

test("a service at work (its CPU time growing) is given the whole window", async () => {
  const p = fakeProbe(
    (t) => t / 2,
    () => true,
  );
  assert.equal(await settleService(p, 1000), "window");
  assert.ok(p.t >= 1000, `${p.t}`);
});

test("quiet but not waiting (a parent waiting on its child, a process gone) is given the whole window", async () => {
  const p = fakeProbe(
    () => 40,
    () => false,
  );
  assert.equal(await settleService(p, 1000), "window");
  assert.ok(p.t >= 1000);
});

test("the idle window restarts whenever CPU is used: work then quiet settles a window after the work", async () => {
  const p = fakeProbe(
    (t) => Math.min(t, 500),
    () => true,
  );
  assert.equal(await settleService(p, 1000), "idle");
  assert.ok(p.t >= 500 + SETTLE_IDLE_MS && p.t < 1000, `${p.t}`);
});

test("a cgroup that cannot be read proves nothing: the whole window is waited out", async () => {
  const p = fakeProbe(
    () => null,
    () => true,
  );
  assert.equal(await settleService(p, 1000), "window");
  assert.ok(p.t >= 1000);
});

test("waiting is state S in a kernel wait other than for a child", () => {
  const stat = (comm: string, state: string) => `42 (${comm}) ${state} 1 42 42 0 -1 4194560 100`;
  assert.equal(waitingFrom(stat("sleep", "S"), "__do_sys_pause\n"), true);
  assert.equal(waitingFrom(stat("node", "S"), "ep_poll"), true);
  assert.equal(waitingFrom(stat("sh", "S"), "do_wait"), false);
  assert.equal(waitingFrom(stat("sh", "S"), "kernel_wait4"), false);
  assert.equal(
    waitingFrom(stat("cat", "D"), "folio_wait_bit_common"),
    false,
    "a disk read is work in progress",
  );
  assert.equal(waitingFrom(stat("sh", "R"), "0"), false);
  assert.equal(waitingFrom(stat("sh", "Z"), ""), false, "an exited process");
  assert.equal(waitingFrom(stat("sleep", "S"), "0"), false, "a kernel that does not say where");
  // A command named to look like another state: the state is read after the last parenthesis.
  assert.equal(waitingFrom(stat("x) S (y", "R"), "ep_poll"), false);
  assert.equal(waitingFrom("", "ep_poll"), false);
});
