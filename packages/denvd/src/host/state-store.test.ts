import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { type StackRecord, StateStore } from "./state-store.ts";

async function inDir(body: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "denvd-state-"));
  try {
    await body(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const stackRec = (id: string, name: string) =>
  ({ id, name, status: "running", containers: {}, datasets: {} }) as unknown as StackRecord;

test("a state file from before stacks had their name is read into the database and left with the owner id", () =>
  inDir(async (dir) => {
    const stack = stackRec("env_0123456789ab", "old");
    await writeFile(
      join(dir, "state.json"),
      JSON.stringify({
        ownerId: "abcdef012345",
        environments: { [stack.id]: stack },
        versions: { ver_0123456789ab: { id: "ver_0123456789ab", environmentId: stack.id, snapshots: {} } },
      }),
    );
    const store = await StateStore.open(dir);
    assert.equal(store.ownerId, "abcdef012345");
    assert.equal(store.stack("env_0123456789ab")?.name, "old");
    assert.equal(store.version("ver_0123456789ab")?.stackId, "env_0123456789ab");
    assert.equal(store.stack("constructor"), undefined);
    assert.deepEqual(JSON.parse(await readFile(join(dir, "state.json"), "utf8")), {
      ownerId: "abcdef012345",
    });
    // Read again, the records come from the database, under their new names.
    const again = await StateStore.open(dir);
    assert.equal(again.ownerId, "abcdef012345");
    assert.equal(again.stack("env_0123456789ab")?.name, "old");
    assert.equal(again.version("ver_0123456789ab")?.stackId, "env_0123456789ab");
  }));

test("records outlive the store: written, changed and deleted, in the order first written", () =>
  inDir(async (dir) => {
    const store = await StateStore.open(dir);
    const owner = store.ownerId;
    assert.match(owner, /^[0-9a-f]{12}$/);
    const b = stackRec("stk_b", "b");
    await store.putStack(b);
    await store.putStack(stackRec("stk_a", "a"));
    await store.putStack(stackRec("stk_c", "c"));
    // The store keeps its own copy: a caller changing its object afterwards changes nothing stored.
    b.name = "changed by the caller";
    assert.equal(store.stack("stk_b")?.name, "b");
    await store.putStack({ ...stackRec("stk_b", "b2"), status: "failed" });
    await store.deleteStack("stk_c");
    await store.putVersion({ id: "ver_1", stackId: "stk_a" } as never);
    await store.deleteVersion("ver_missing");
    for (const f of ["state.db", "state.db-wal"])
      assert.equal((await stat(join(dir, f))).mode & 0o777, 0o600, `${f} is denvd's alone`);
    const again = await StateStore.open(dir);
    assert.equal(again.ownerId, owner);
    assert.deepEqual(
      again.stacks().map((s) => [s.id, s.name, s.status]),
      [
        ["stk_b", "b2", "failed"],
        ["stk_a", "a", "running"],
      ],
    );
    assert.deepEqual(
      again.versions().map((v) => v.id),
      ["ver_1"],
    );
  }));

test("records a state file still holds take the place of the database's, once; hostile ids stay plain records", () =>
  inDir(async (dir) => {
    const first = await StateStore.open(dir);
    await first.putStack(stackRec("stk_a", "from the database"));
    await first.putStack(stackRec("stk_b", "untouched"));
    // As a kill between the import and the file's rewrite leaves it (or a test writes it): the
    // file's records are read in again and win.
    await writeFile(
      join(dir, "state.json"),
      `{"ownerId":"${first.ownerId}","stacks":{"stk_a":${JSON.stringify(stackRec("stk_a", "from the file"))},"__proto__":${JSON.stringify(stackRec("__proto__", "proto"))},"constructor":${JSON.stringify(stackRec("constructor", "ctor"))}}}`,
    );
    const second = await StateStore.open(dir);
    assert.deepEqual(
      second.stacks().map((s) => [s.id, s.name]),
      [
        ["stk_a", "from the file"],
        ["stk_b", "untouched"],
        ["__proto__", "proto"],
        ["constructor", "ctor"],
      ],
    );
    assert.equal(({} as Record<string, unknown>).name, undefined, "no prototype was written");
    assert.deepEqual(JSON.parse(await readFile(join(dir, "state.json"), "utf8")), { ownerId: first.ownerId });
    const third = await StateStore.open(dir);
    assert.equal(third.stacks().length, 4);
  }));

test("a state file without an owner id gets one, and keeps it", () =>
  inDir(async (dir) => {
    await writeFile(join(dir, "state.json"), "{}");
    const store = await StateStore.open(dir);
    assert.match(store.ownerId, /^[0-9a-f]{12}$/);
    assert.equal((await StateStore.open(dir)).ownerId, store.ownerId);
  }));

test("the owner id lives in the database too: a lost state file gets it back, another host's file is refused", () =>
  inDir(async (dir) => {
    const first = await StateStore.open(dir);
    await first.putStack(stackRec("stk_a", "kept"));
    const owner = first.ownerId;
    first.close();
    await assert.rejects(stat(join(dir, "state.db-wal")), /ENOENT/, "close folds the log into the database");
    await rm(join(dir, "state.json"));
    const again = await StateStore.open(dir);
    assert.equal(again.ownerId, owner);
    assert.equal(again.stack("stk_a")?.name, "kept");
    assert.deepEqual(JSON.parse(await readFile(join(dir, "state.json"), "utf8")), { ownerId: owner });
    again.close();
    const stranger = '{"ownerId":"0123456789ab"}';
    await writeFile(join(dir, "state.json"), stranger);
    await assert.rejects(
      StateStore.open(dir),
      new RegExp(`names the owner 0123456789ab but ${owner} made the records in .*state\\.db`),
    );
    assert.equal(await readFile(join(dir, "state.json"), "utf8"), stranger, "the file is left as it was");
  }));

test("a state file that is not JSON, or a database that is not one, stops the open naming the file; nothing is written over it", () =>
  inDir(async (dir) => {
    await writeFile(join(dir, "state.json"), "{not json");
    await assert.rejects(StateStore.open(dir), /state\.json cannot be read: .*JSON/);
    assert.equal(await readFile(join(dir, "state.json"), "utf8"), "{not json");
    for (const hostile of ['"abc"', "[1]", '{"stk_a":null}', '{"stk_a":{"id":"stk_b"}}']) {
      await writeFile(join(dir, "state.json"), `{"ownerId":"abcdef012345","stacks":${hostile}}`);
      await assert.rejects(StateStore.open(dir), /state\.json: stacks\.\S+ is not a record with the id/);
    }
    await writeFile(join(dir, "state.json"), '{"ownerId":"abcdef012345"}');
    assert.deepEqual((await StateStore.open(dir)).stacks(), [], "nothing of the refused files was kept");
    // A database whose file was overwritten, its log gone with it.
    await rm(join(dir, "state.db-wal"), { force: true });
    await rm(join(dir, "state.db-shm"), { force: true });
    const garbage = Buffer.alloc(8192, 0x41);
    await writeFile(join(dir, "state.db"), garbage);
    await assert.rejects(StateStore.open(dir), /state\.db cannot be read: file is not a database/);
    assert.deepEqual(await readFile(join(dir, "state.db")), garbage);
  }));
