import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { openStore } from "../store/open-store.ts";
import { markLostHosts } from "./host-watch.ts";

test("only a host unseen past the deadline and not connected loses its environments, and not those a deployment holds", async () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-watch-"));
  const store = await openStore(join(dir, "store"));
  try {
    // The clock is the test's: "now" is 10 minutes after every row's time.
    const t0 = Date.parse("2026-01-01T00:00:00.000Z");
    const at = (ms: number) => new Date(t0 + ms).toISOString();
    await store
      .insertInto("teams")
      .values({ id: "team_1", name: "t", created_at: at(0) })
      .execute();
    await store
      .insertInto("projects")
      .values({
        id: "prj_1",
        team_id: "team_1",
        name: "p",
        kind: "service",
        source_type: "local",
        source: ".",
        compose_text: null,
        dotenv_text: null,
        pinned_target: null,
        created_at: at(0),
      })
      .execute();
    const host = (id: string, lastSeen: string | null) => ({
      id,
      team_id: "team_1",
      name: id,
      secret_hash: `h-${id}`,
      arch: null,
      storage: null,
      capacity_json: null,
      version: null,
      last_seen: lastSeen,
      connected: 0,
      draining: 0,
      created_at: at(0),
    });
    await store
      .insertInto("hosts")
      .values([host("gone", at(0)), host("recent", at(9 * 60_000)), host("here", at(0)), host("never", null)])
      .execute();
    const env = (id: string, hostId: string, status = "running") => ({
      id,
      team_id: "team_1",
      project_id: "prj_1",
      name: id,
      status,
      host_id: hostId,
      stack_id: `stk_${id}`,
      current_version_id: null,
      parent_version_id: null,
      sandbox: 1,
      target_id: "denvd",
      pool_id: null,
      created_at: at(0),
    });
    await store
      .insertInto("environments")
      .values([
        env("e_gone", "gone"),
        env("e_frozen", "gone", "frozen"),
        env("e_busy", "gone"),
        env("e_destroyed", "gone", "destroyed"),
        env("e_recent", "recent"),
        env("e_here", "here"),
        env("e_never", "never"),
      ])
      .execute();
    await store
      .insertInto("deployments")
      .values({
        id: "dep_1",
        team_id: "team_1",
        environment_id: "e_busy",
        kind: "snapshot",
        status: "running",
        phases_json: "[]",
        reason: null,
        state_json: "{}",
        created_at: at(0),
        finished_at: null,
      })
      .execute();
    const hosts = { hostConnected: (id: string) => id === "here" };
    const changed = await markLostHosts({ store, hosts }, 5 * 60_000, t0 + 10 * 60_000);
    assert.deepEqual(changed.sort(), [
      "gone: 2 environment(s) lost (last seen 2026-01-01T00:00:00.000Z)",
      "never: 1 environment(s) lost (last seen never)",
    ]);
    const statuses = Object.fromEntries(
      (await store.selectFrom("environments").select(["id", "status"]).execute()).map((e) => [
        e.id,
        e.status,
      ]),
    );
    assert.deepEqual(statuses, {
      e_gone: "lost",
      e_frozen: "lost",
      e_busy: "running",
      e_destroyed: "destroyed",
      e_recent: "running",
      e_here: "running",
      e_never: "lost",
    });
    // Run again, nothing more changes.
    assert.deepEqual(await markLostHosts({ store, hosts }, 5 * 60_000, t0 + 10 * 60_000), []);
  } finally {
    await store.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
});
