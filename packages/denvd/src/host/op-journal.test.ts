import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { test } from "node:test";
import { OpJournal } from "./op-journal.ts";

async function journal(keep?: number, prepare?: (dir: string) => Promise<void>) {
  const dir = await mkdtemp(join(tmpdir(), "op-journal-"));
  await prepare?.(dir);
  const j = new OpJournal(dir, keep ? { keep } : {});
  await j.open();
  return {
    j,
    dir,
    done: async () => {
      j.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

const rowCount = (dir: string) => {
  const db = new DatabaseSync(join(dir, "state.db"));
  try {
    return (db.prepare("SELECT count(*) AS n FROM ops").get() as { n: number }).n;
  } finally {
    db.close();
  }
};

test("an operation is running from begin until finish, its outcome is kept, and a reopen sees both", async () => {
  const { j, dir, done } = await journal();
  const e = await j.begin({ opId: "op_0123456789ab", method: "fork", params: { version_id: "ver_1" } });
  await j.begin({ opId: "op_cutoff00000", method: "destroy", params: {} });
  assert.deepEqual(
    (await j.running()).map((x) => x.opId),
    ["op_0123456789ab", "op_cutoff00000"],
  );
  await j.finish(e, { ok: true, result: { stack_id: "stk_0123456789ab" } });
  const got = await j.get("op_0123456789ab");
  assert.equal(got?.status, "done");
  assert.deepEqual(got?.outcome, { ok: true, result: { stack_id: "stk_0123456789ab" } });
  // A kill: the journal is opened again over the same directory without a close.
  const again = new OpJournal(dir);
  await again.open();
  assert.deepEqual(
    (await again.running()).map((x) => x.opId),
    ["op_cutoff00000"],
  );
  assert.equal((await again.get("op_0123456789ab"))?.status, "done");
  assert.equal((await stat(join(dir, "state.db"))).mode & 0o777, 0o600);
  again.close();
  await done();
});

test("hostile operation ids are refused and nothing is stored for them", async () => {
  const { j, dir, done } = await journal();
  for (const opId of [
    "../escape",
    "op_../../x",
    "/etc/passwd",
    "op_a/b",
    "",
    "op_a\u0000b",
    "op_a' OR '1'='1",
    "x".repeat(200),
  ]) {
    await assert.rejects(j.begin({ opId, method: "destroy", params: {} }), /operation id/);
    assert.equal(await j.get(opId), undefined, opId);
  }
  assert.equal(rowCount(dir), 0);
  assert.deepEqual(await j.running(), []);
  await done();
});

test("entries an older denvd left as files are read in and removed; a torn or foreign file is never taken for a run", async () => {
  const entry = (opId: string, status: string) =>
    JSON.stringify({ opId, method: "destroy", params: {}, status, startedAt: "2026-12-01T00:00:00.000Z" });
  const { j, dir, done } = await journal(undefined, async (d) => {
    const ops = join(d, "ops");
    await mkdir(ops);
    await writeFile(join(ops, "op_running0000.json"), entry("op_running0000", "running"));
    await writeFile(join(ops, "op_done0000000.json"), entry("op_done0000000", "done"));
    await writeFile(join(ops, "op_torn0000000.json.123.tmp"), '{"opId":');
    await writeFile(join(ops, "op_garbage0000.json"), "not json");
    // Under one id, claiming another: neither id is taken from it.
    await writeFile(join(ops, "op_liar00000000.json"), entry("op_victim000000", "running"));
    await writeFile(join(ops, "op_badstatus00.json"), entry("op_badstatus00", "whatever"));
  });
  assert.deepEqual(
    (await j.running()).map((x) => x.opId),
    ["op_running0000"],
  );
  assert.equal((await j.get("op_done0000000"))?.status, "done");
  assert.equal(await j.get("op_victim000000"), undefined);
  assert.equal(await j.get("op_badstatus00"), undefined);
  assert.deepEqual((await readdir(join(dir, "ops"))).sort(), [
    "op_badstatus00.json",
    "op_garbage0000.json",
    "op_liar00000000.json",
  ]);
  await done();
});

test("undone entries say so; pruning keeps the newest finished ones and every running one", async () => {
  const { j, dir, done } = await journal(3);
  const running = await j.begin({ opId: "op_running0000", method: "snapshot", params: {} });
  for (let i = 0; i < 6; i++) {
    const e = await j.begin({ opId: `op_done${i}`, method: "destroy", params: {} });
    await j.finish(e, { ok: true });
  }
  await j.undone(await j.begin({ opId: "op_undone", method: "fork", params: {} }));
  assert.equal((await j.get("op_undone"))?.status, "undone");
  await j.prune();
  assert.equal(rowCount(dir), 3);
  assert.deepEqual((await j.get("op_running0000"))?.opId, running.opId);
  assert.equal(await j.get("op_done0"), undefined, "the oldest finished entry goes first");
  assert.equal((await j.get("op_done5"))?.status, "done");
  assert.equal((await j.get("op_undone"))?.status, "undone");
  await done();
});
