/**
 * Data integrity under load: a writer keeps inserting into ops-world's PostgreSQL (one committed row
 * per statement, each acknowledged on stdout) while 20 snapshots are taken; every fork of them must
 * start cleanly and hold exactly the rows committed before its freeze: ids 1..N with no gap, N at
 * least the last id acknowledged before the snapshot began and at most the live table's last id
 * just after it ended; and the writer is seen committing past that bound after each snapshot, so
 * each one was taken while it ran.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deployStack, openTestHost, opsWorldSpec, type TestHost } from "../harness/test-host.ts";

const SNAPSHOTS = 20;
let host: TestHost;

before(async () => {
  host = await openTestHost({});
});

after(async () => {
  await host?.close();
});

test(`${SNAPSHOTS} snapshots under a running writer each fork to exactly the rows committed before the freeze`, async () => {
  const { denvd } = host;
  const d = await deployStack(denvd, await opsWorldSpec(), { name: "writer" });
  const env = d.stack.id;
  const create = await denvd.exec(env, "opsbox", {
    command: ["psql", "-qc", "create table writes (id int primary key)"],
  });
  assert.equal(create.exitCode, 0, create.stderr.toString());

  let acked = 0;
  let pending = "";
  const writer = denvd.exec(env, "opsbox", {
    command:
      'i=0; while [ ! -e /tmp/stop ]; do i=$((i+1)); psql -qc "insert into writes values ($i)" >/dev/null || exit 1; echo $i; done',
    onStdout: (c) => {
      pending += c.toString();
      const lines = pending.split("\n");
      pending = lines.pop() ?? "";
      for (const l of lines) if (l) acked = Number(l);
    },
  });
  let writerEnded = false;
  void writer.finally(() => {
    writerEnded = true;
  });
  /**
   * Waits for the writer's acknowledgements to reach `n`; fails if the writer ended first. No fixed
   * budget: on a busy machine each insert may take a while, and progress is what is watched.
   */
  const ackedAtLeast = async (n: number, what: string) => {
    while (acked < n) {
      assert.ok(!writerEnded, `the writer ended at ${acked} (waiting for ${n}: ${what})`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  const liveMax = async () => {
    const r = await denvd.exec(env, "opsbox", {
      command: ["psql", "-tAc", "select coalesce(max(id), 0) from writes"],
    });
    assert.equal(r.exitCode, 0, r.stderr.toString());
    return Number(r.stdout.toString().trim());
  };
  const windows: { version: string; low: number; high: number; frozenMs: number }[] = [];
  try {
    await ackedAtLeast(5, "the first rows");
    for (let i = 0; i < SNAPSHOTS; i++) {
      const low = acked;
      const s = await denvd.snapshot(env);
      // Every row committed before the freeze is in the live table now: its max is the bound.
      const high = await liveMax();
      windows.push({ version: s.version.id, low, high, frozenMs: s.evidence.frozen_ms });
      // The writer was running across this snapshot: it commits rows past the bound after the
      // thaw (a stalled writer would make the bounds prove nothing).
      await ackedAtLeast(high + 2, `after snapshot ${i + 1}`);
    }
  } finally {
    await denvd.exec(env, "opsbox", { command: "touch /tmp/stop" });
    const w = await writer;
    assert.equal(w.exitCode, 0, w.stderr.toString());
  }
  assert.ok(
    (windows.at(-1)?.high ?? 0) - (windows[0]?.low ?? 0) >= SNAPSHOTS,
    "the writer committed rows across every snapshot",
  );
  for (const w of windows) {
    const f = await denvd.fork(w.version, { name: `check-${w.version}` });
    const r = await denvd.exec(f.stack.id, "opsbox", {
      command: ["psql", "-tAc", "select count(*), coalesce(max(id), 0), coalesce(min(id), 0) from writes"],
    });
    assert.equal(r.exitCode, 0, r.stderr.toString());
    const [count, max, min] = r.stdout.toString().trim().split("|").map(Number) as [number, number, number];
    assert.equal(count, max, `rows 1..${max} with no gap (${count} rows)`);
    assert.ok(max === 0 || min === 1);
    assert.ok(
      max >= w.low,
      `fork of ${w.version} holds ${max} rows; ${w.low} were acknowledged before its freeze`,
    );
    assert.ok(
      max <= w.high,
      `fork of ${w.version} holds ${max} rows; only ${w.high} were committed when it ended`,
    );
    await denvd.destroy(f.stack.id);
  }
  const frozen = windows.map((w) => w.frozenMs).sort((a, b) => a - b);
  process.stdout.write(
    `# ${SNAPSHOTS} snapshots under load: frozen window p50 ${frozen[Math.floor(frozen.length / 2)]} ms, max ${frozen.at(-1)} ms; rows ${windows[0]?.low}..${windows.at(-1)?.high}\n`,
  );
});
