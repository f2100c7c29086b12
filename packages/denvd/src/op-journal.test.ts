import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { OpJournal } from "./op-journal.ts";

async function journal(keep?: number) {
  const dir = await mkdtemp(join(tmpdir(), "op-journal-"));
  const j = new OpJournal(dir, keep ? { keep } : {});
  await j.open();
  return { j, dir, done: () => rm(dir, { recursive: true, force: true }) };
}

test("an operation is running from begin until finish, and its outcome is kept", async () => {
  const { j, done } = await journal();
  const e = await j.begin({ opId: "op_0123456789ab", method: "fork", params: { version_id: "ver_1" } });
  assert.deepEqual(
    (await j.running()).map((x) => x.opId),
    ["op_0123456789ab"],
  );
  await j.finish(e, { ok: true, result: { stack_id: "stk_0123456789ab" } });
  assert.deepEqual(await j.running(), []);
  const got = await j.get("op_0123456789ab");
  assert.equal(got?.status, "done");
  assert.deepEqual(got?.outcome, { ok: true, result: { stack_id: "stk_0123456789ab" } });
  await done();
});

test("hostile operation ids never become paths: refused, nothing written anywhere, nothing read back", async () => {
  const { j, dir, done } = await journal();
  for (const opId of [
    "../escape",
    "op_../../x",
    "/etc/passwd",
    "op_a/b",
    "",
    "op_a\u0000b",
    "x".repeat(200),
  ]) {
    await assert.rejects(j.begin({ opId, method: "destroy", params: {} }), /operation id/);
    assert.equal(await j.get(opId), undefined, opId);
  }
  assert.deepEqual(await readdir(join(dir, "ops")), []);
  assert.deepEqual((await readdir(dir)).sort(), ["ops"]);
  await done();
});

test("a torn temp file a kill left is removed, and an unreadable entry is not taken for a run", async () => {
  const { j, dir, done } = await journal();
  await writeFile(join(dir, "ops", "op_0123456789ab.json.123.tmp"), '{"opId":');
  await writeFile(join(dir, "ops", "op_aaaaaaaaaaaa.json"), "not json");
  assert.deepEqual(await j.running(), []);
  assert.deepEqual(await readdir(join(dir, "ops")), ["op_aaaaaaaaaaaa.json"]);
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
  const left = (await readdir(join(dir, "ops"))).sort();
  assert.ok(left.includes("op_running0000.json"), left.join());
  assert.equal(left.length, 3);
  assert.equal(
    JSON.parse(await readFile(join(dir, "ops", "op_running0000.json"), "utf8")).opId,
    running.opId,
  );
  assert.ok(!left.includes("op_done0.json"), "the oldest finished entry goes first");
  await done();
});
