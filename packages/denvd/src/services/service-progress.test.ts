import assert from "node:assert/strict";
import { test } from "node:test";
import { BUSY_SHARE, CpuProgress, cpuDemandReader, cpuUsageMs, threadState } from "./service-progress.ts";

/** A CpuProgress over a CPU counter and a clock the test drives. */
function driven(windowMs: number) {
  const state = { cpuMs: 0, nowMs: 0 };
  const p = new CpuProgress(
    async () => state.cpuMs,
    windowMs,
    () => state.nowMs,
  );
  return { state, p };
}

test("a service using CPU over the window is busy; one that stops is not, once the window passes", async () => {
  const { state, p } = driven(1000);
  assert.equal(p.busy(), false, "one sample says nothing");
  await p.sample();
  assert.equal(p.busy(), false);
  for (let i = 0; i < 10; i++) {
    state.nowMs += 100;
    state.cpuMs += 50; // half a core
    await p.sample();
  }
  assert.equal(p.busy(), true);
  // It goes idle: within the window the earlier work still shows, after it no more.
  for (let i = 0; i < 5; i++) {
    state.nowMs += 100;
    await p.sample();
  }
  assert.equal(p.busy(), true, "half the window still holds work");
  for (let i = 0; i < 10; i++) {
    state.nowMs += 100;
    await p.sample();
  }
  assert.equal(p.busy(), false, "a whole window idle");
});

test("just under and at the busy share", async () => {
  const under = driven(1000);
  await under.p.sample();
  under.state.nowMs = 1000;
  under.state.cpuMs = 1000 * BUSY_SHARE - 1;
  await under.p.sample();
  assert.equal(under.p.busy(), false);
  const at = driven(1000);
  await at.p.sample();
  at.state.nowMs = 1000;
  at.state.cpuMs = 1000 * BUSY_SHARE;
  await at.p.sample();
  assert.equal(at.p.busy(), true);
});

test("what denvd runs in the container (its healthcheck) does not count as the service's work", async () => {
  const { state, p } = driven(1000);
  await p.sample();
  for (let i = 0; i < 20; i++) {
    await p.excluding(async () => {
      state.cpuMs += 10; // a check costing 10 ms of CPU every 100 ms: 10% of a core
    });
    state.nowMs += 100;
    await p.sample();
  }
  assert.equal(p.busy(), false);
  state.cpuMs += 100;
  state.nowMs += 100;
  await p.sample();
  assert.equal(p.busy(), true, "the service's own work still counts");
});

test("a check that takes long on a starved host does not thin a busy service's share", async () => {
  const { state, p } = driven(1000);
  await p.sample();
  for (let i = 0; i < 5; i++) {
    // A 2 s check (the service keeps working through it, left out), then a 100 ms gap in which
    // the service gets a third of a core.
    await p.excluding(async () => {
      state.nowMs += 2000;
      state.cpuMs += 600;
    });
    state.nowMs += 100;
    state.cpuMs += 33;
    await p.sample();
  }
  assert.equal(p.busy(), true);
});

test("watched for less than a window, an idle service is not known yet; unreadable counts as idle", async () => {
  const { state, p } = driven(1000);
  assert.equal(p.verdict(), "idle", "nothing read yet");
  await p.sample();
  assert.equal(p.verdict(), "unknown", "one sample");
  state.nowMs += 300;
  await p.sample();
  assert.equal(p.verdict(), "unknown", "idle for 300 ms of a 1000 ms window");
  state.nowMs += 700;
  await p.sample();
  assert.equal(p.verdict(), "idle", "idle for a whole window");
  const unreadable = new CpuProgress(async () => null, 1000);
  await unreadable.sample();
  assert.equal(unreadable.verdict(), "idle");
});

test("a counter that cannot be read leaves no sample; hostile container ids read nothing", async () => {
  const p = new CpuProgress(async () => null, 1000);
  await p.sample();
  await p.sample();
  assert.equal(p.busy(), false);
  assert.equal(await p.excluding(async () => 7), 7);
  for (const id of ["../../../../etc", "abc/../../x", "", "0123456789ab/../../..", "ABCDEF012345"]) {
    assert.equal(await cpuUsageMs(id), null, id);
    assert.equal(await cpuDemandReader(id)(), null, id);
  }
});

test("a thread's state is read past a command that holds spaces and parentheses", () => {
  assert.equal(threadState("4242 (sh) R 1 4242"), "R");
  assert.equal(threadState("4242 (a) S (b) D 1 2"), "D", "the last closing parenthesis ends the command");
  assert.equal(threadState("4242 (x"), "", "a line cut short says nothing");
  assert.equal(threadState(""), "");
});
