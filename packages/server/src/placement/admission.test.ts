import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import type { DenvError } from "@denv/protocol";
import { elapse } from "../../../../test/harness/wait-for.ts";
import { SecretBox } from "../clouds/secret-box.ts";
import { redeemJoinToken } from "../store/host-store.ts";
import { openStore } from "../store/open-store.ts";
import { createJoinToken, createTeam } from "../store/team-store.ts";
import { Admission } from "./admission.ts";

const dir = mkdtempSync(join(tmpdir(), "denv-admission-"));
after(() => rmSync(dir, { recursive: true, force: true }));

test("a ticket says how long its create waited for a turn, and behind how many", async () => {
  const store = await openStore(join(dir, "store"));
  const teamId = await createTeam(store, "admission-team", true);
  const { hostId } = await redeemJoinToken(store, (await createJoinToken(store, teamId, 60_000)).token, "h1");
  const GIB = 1024 ** 3;
  await store
    .updateTable("hosts")
    .set({
      capacity_json: JSON.stringify({
        memory_bytes: 64 * GIB,
        memory_free_bytes: 32 * GIB,
        free_bytes: 100 * GIB,
      }),
    })
    .where("id", "=", hostId)
    .execute();
  const admission = new Admission(
    { store, secrets: SecretBox.open(join(dir, "store")) },
    { parallelPerHost: 2 },
  );
  const need = (label: string) => ({ memoryBytes: 0, label });
  const [a, b] = [await admission.admit(hostId, need("a")), await admission.admit(hostId, need("b"))];
  for (const t of [a, b]) assert.deepEqual(t.wait, { host_id: hostId, waited_ms: 0, queued_behind: 0 });
  // Two more while both turns are taken: they queue, behind 2 and then 3.
  const c = admission.admit(hostId, need("c"));
  const d = admission.admit(hostId, need("d"));
  // Their turns come only when a running create ends: nothing else hands one out.
  while ((await admission.hosts([hostId]))[0]?.queued.length !== 2) await new Promise((r) => setImmediate(r));
  await elapse(5, "c's wait is measured: it must have waited at least a millisecond");
  a.release();
  const tc = await c;
  assert.equal(tc.wait.queued_behind, 2);
  assert.ok(tc.wait.waited_ms >= 1, `c waited ${tc.wait.waited_ms} ms`);
  b.release();
  const td = await d;
  assert.equal(td.wait.queued_behind, 3);
  assert.ok(td.wait.waited_ms >= 1, `d waited ${td.wait.waited_ms} ms`);
  tc.release();
  td.release();
  await store.destroy();
});

test("a host short of storage refuses a new environment as insufficient_storage, saying what frees space", async () => {
  const store = await openStore(join(dir, "store-full"));
  const teamId = await createTeam(store, "full-team", true);
  const { hostId } = await redeemJoinToken(
    store,
    (await createJoinToken(store, teamId, 60_000)).token,
    "h-full",
  );
  const MIB = 1024 ** 2;
  await store
    .updateTable("hosts")
    .set({
      capacity_json: JSON.stringify({
        memory_bytes: 64 * 1024 * MIB,
        memory_free_bytes: 32 * 1024 * MIB,
        free_bytes: 300 * MIB,
      }),
    })
    .where("id", "=", hostId)
    .execute();
  const admission = new Admission(
    { store, secrets: SecretBox.open(join(dir, "store-full")) },
    { parallelPerHost: 2 },
  );
  await assert.rejects(admission.checkRoom(hostId, 0), (err: DenvError) => {
    assert.equal(err.code, "insufficient_storage");
    assert.match(err.message, /300 MiB free; it needs 1024 MiB/);
    assert.match(err.message, /denv env destroy ENV/);
    assert.match(err.message, /denv version prune --keep 1/);
    assert.deepEqual(err.details, { host_id: hostId, free_bytes: 300 * MIB, needed_bytes: 1024 * MIB });
    return true;
  });
  // With room, the same check passes.
  await store
    .updateTable("hosts")
    .set({
      capacity_json: JSON.stringify({
        memory_bytes: 64 * 1024 * MIB,
        memory_free_bytes: 32 * 1024 * MIB,
        free_bytes: 2048 * MIB,
      }),
    })
    .where("id", "=", hostId)
    .execute();
  await admission.checkRoom(hostId, 0);
  await store.destroy();
});
