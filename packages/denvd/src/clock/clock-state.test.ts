import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import {
  clockMounts,
  clockReadingMs,
  decodeClockState,
  encodeClockState,
  heldReadingMs,
  holdClock,
  readClock,
  releaseClock,
  STEP_ADVANCE_MS,
  STEP_TICK_MS,
  writeClock,
} from "./clock-state.ts";

test("the state record round-trips, and the library's layout is fixed: magic, base, epoch, tick", () => {
  const s = { baseMs: 1_700_000_000_123, epochNs: 5_000_000_000n, tickMs: 1000 };
  const b = encodeClockState(s);
  assert.equal(b.length, 64);
  assert.equal(b.subarray(0, 8).toString("latin1"), "DENVCLK1");
  assert.equal(b.readBigInt64LE(8), 1_700_000_000_123_000_000n);
  assert.equal(b.readBigInt64LE(16), 5_000_000_000n);
  assert.equal(b.readBigInt64LE(24), 1_000_000_000n);
  assert.deepEqual(decodeClockState(b), s);
  assert.deepEqual(decodeClockState(encodeClockState({ ...s, epochNs: null })), { ...s, epochNs: null });
});

test("a record that is short or not ours is no clock", () => {
  assert.equal(decodeClockState(Buffer.alloc(10)), null);
  const b = encodeClockState({ baseMs: 1, epochNs: null, tickMs: 1000 });
  b.write("XXXXXXXX", 0, "latin1");
  assert.equal(decodeClockState(b), null);
});

test("held, the clock reads its base; released, base plus whole ticks since the epoch, never less", () => {
  const held = { baseMs: 1000, epochNs: null, tickMs: 1000 };
  assert.equal(clockReadingMs(held, 99_000_000_000n), 1000);
  const running = { baseMs: 1000, epochNs: 10_000_000_000n, tickMs: 1000 };
  assert.equal(clockReadingMs(running, 10_000_000_000n), 1000);
  assert.equal(clockReadingMs(running, 10_999_999_999n), 1000);
  assert.equal(clockReadingMs(running, 11_000_000_000n), 2000);
  assert.equal(clockReadingMs(running, 13_500_000_000n), 4000);
  // A monotonic reading before the epoch (another CPU's view) does not run the clock backwards.
  assert.equal(clockReadingMs(running, 9_000_000_000n), 1000);
});

test("written held, released in place (the same file every process maps, under its sequence lock), held at its reading", async () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-clock-"));
  try {
    const lib = join(dir, "lib.so");
    writeFileSync(lib, "ELF");
    await writeClock(dir, "stk_000000000001", lib, { baseMs: 5000, held: true });
    const stateFile = join(dir, "clock", "stk_000000000001", "state");
    const before = readFileSync(stateFile);
    assert.equal(before.readBigUInt64LE(32), 0n, "the sequence starts even");
    assert.equal((await readClock(dir, "stk_000000000001"))?.epochNs, null);
    const released = await releaseClock(dir, "stk_000000000001");
    assert.ok(released?.epochNs && released.epochNs > 0n);
    const after = readFileSync(stateFile);
    // The magic, base and tick stayed; the epoch is set; the sequence moved on by two, even again.
    assert.deepEqual(after.subarray(0, 16), before.subarray(0, 16));
    assert.deepEqual(after.subarray(24, 32), before.subarray(24, 32));
    assert.equal(after.readBigInt64LE(16), released.epochNs);
    assert.equal(after.readBigUInt64LE(32), 2n);
    // Released twice: the first epoch stands.
    assert.equal((await releaseClock(dir, "stk_000000000001"))?.epochNs, released.epochNs);
    const held = await holdClock(dir, "stk_000000000001");
    assert.equal(held?.epochNs, null);
    assert.ok(
      held && held.baseMs >= 5000 && (held.baseMs - 5000) % 1000 === 0,
      "held at its whole-second reading",
    );
    assert.deepEqual(await readClock(dir, "stk_000000000001"), held);
    assert.equal(readFileSync(stateFile).readBigUInt64LE(32), 4n);
    assert.equal(await holdClock(dir, "stk_000000000002"), null);
    // A replay's step: released in STEP_TICK_MS ticks, held a second on, back in CLOCK_TICK_MS
    // ticks.
    const step = await releaseClock(dir, "stk_000000000001", STEP_TICK_MS);
    assert.equal(step?.tickMs, STEP_TICK_MS);
    assert.equal(readFileSync(stateFile).readBigInt64LE(24), BigInt(STEP_TICK_MS) * 1_000_000n);
    const afterStep = await holdClock(dir, "stk_000000000001", STEP_ADVANCE_MS);
    assert.equal(afterStep?.baseMs, (held?.baseMs ?? 0) + STEP_ADVANCE_MS);
    assert.equal(afterStep?.tickMs, 1000);
    assert.equal(readFileSync(stateFile).readBigInt64LE(24), 1_000_000_000n);
    // Held already: held again, it stays where it is.
    assert.equal((await holdClock(dir, "stk_000000000001", STEP_ADVANCE_MS))?.baseMs, afterStep?.baseMs);
    // A stack with no clock (its host has no clock library): releasing it is nothing, not ENOENT
    // (a fork of a frozen-clock environment on an installed host failed on exactly this).
    assert.equal(await releaseClock(dir, "stk_000000000002"), null);
    assert.equal(
      readFileSync(join(dir, "clock", "stk_000000000001", "ld.so.preload"), "utf8"),
      "/.denv/clock/libdenv-clock.so\n",
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a container gets the directory and the preload list read-only, its own LD_PRELOAD kept after ours", () => {
  const m = clockMounts("/state/clock/stk_1", { LD_PRELOAD: "/usr/lib/libjemalloc.so", A: "1" });
  assert.deepEqual(m.env, { LD_PRELOAD: "/.denv/clock/libdenv-clock.so:/usr/lib/libjemalloc.so", A: "1" });
  assert.ok(m.mounts.every((x) => x.kind === "bind" && x.readOnly));
  assert.deepEqual(
    m.mounts.map((x) => (x.kind === "bind" ? x.target : "")),
    ["/.denv/clock", "/etc/ld.so.preload"],
  );
  assert.equal(clockMounts("/d", {}).env.LD_PRELOAD, "/.denv/clock/libdenv-clock.so");
});

test("a step's clock stands a second past the last reading its command could see, however long it ran", () => {
  // Released for a step: ticks of STEP_TICK_MS while it runs.
  const released = { baseMs: 1_700_000_000_000, epochNs: 5_000_000_000n, tickMs: STEP_TICK_MS };
  // Held 0.2 s or 9.9 s after the release (a quick step, or the same step on a starved host): the
  // same time after it, so forks on a busy host and a quiet one agree.
  for (const ranNs of [200_000_000n, 9_900_000_000n])
    assert.equal(heldReadingMs(released, STEP_ADVANCE_MS, released.epochNs + ranNs), released.baseMs + 1000);
  // While the step runs it reads its start for STEP_TICK_MS, however slow the command is.
  assert.equal(clockReadingMs(released, 5_000_000_000n + 9_999_000_000n), released.baseMs);
  // A step that ran 25 s read base + 20 s at its end: the clock never goes back on that.
  assert.equal(
    heldReadingMs(released, STEP_ADVANCE_MS, released.epochNs + 25_000_000_000n),
    released.baseMs + 21_000,
  );
  // Held without a step (the digest, a pool's member): what it reads now.
  assert.equal(heldReadingMs(released, 0, released.epochNs + 12_400_000_000n), released.baseMs + 10_000);
  // A clock already held stays where it is.
  const held = { ...released, epochNs: null };
  assert.equal(heldReadingMs(held, STEP_ADVANCE_MS, 99_000_000_000n), released.baseMs);
});
