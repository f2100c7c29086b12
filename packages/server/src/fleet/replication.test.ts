/**
 * The replicator's checks before any byte moves, against a real SQLite store and a stand-in for the
 * hosts' port that records what was asked of it: a sending host that describes another version
 * than the one asked for is not believed; a host of another team is no destination; drivers that
 * share no stream format are refused; and the format chosen between drivers.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { openStore } from "../store/open-store.ts";
import type { StackLifecycle } from "../targets/stack-lifecycle.ts";
import { Replicator, transferFormat } from "./replication.ts";

test("a transfer's format: the driver's own between equals, a tar between btrfs and dir, none into zfs", () => {
  assert.equal(
    transferFormat({ storage: "btrfs", formats: ["btrfs-send", "tar"] }, { storage: "btrfs" }),
    "btrfs-send",
  );
  assert.equal(
    transferFormat({ storage: "btrfs", formats: ["btrfs-send", "tar"] }, { storage: "dir" }),
    "tar",
  );
  assert.equal(transferFormat({ storage: "dir", formats: ["tar"] }, { storage: "btrfs" }), "tar");
  assert.equal(transferFormat({ storage: "zfs", formats: ["zfs-send"] }, { storage: "zfs" }), "zfs-send");
  assert.equal(transferFormat({ storage: "zfs", formats: ["zfs-send"] }, { storage: "btrfs" }), null);
  assert.equal(
    transferFormat({ storage: "btrfs", formats: ["btrfs-send", "tar"] }, { storage: "zfs" }),
    null,
  );
});

test("a copy is refused before any byte moves: another team's host, a sender describing another version, no shared format", async () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-repl-"));
  const store = await openStore(join(dir, "store"));
  try {
    const at = new Date().toISOString();
    for (const t of ["team_a", "team_b"])
      await store.insertInto("teams").values({ id: t, name: t, created_at: at }).execute();
    const host = (id: string, team: string, storage: string) => ({
      id,
      team_id: team,
      name: id,
      secret_hash: `h-${id}`,
      arch: "x86_64",
      storage,
      capacity_json: JSON.stringify({ free_bytes: 1e12 }),
      version: null,
      last_seen: at,
      connected: 1,
      draining: 0,
      created_at: at,
    });
    await store
      .insertInto("hosts")
      .values([
        host("host_src", "team_a", "btrfs"),
        host("host_dst", "team_a", "btrfs"),
        host("host_zfs", "team_a", "zfs"),
        host("host_other", "team_b", "btrfs"),
      ])
      .execute();
    const version = {
      id: "ver_0123456789ab",
      team_id: "team_a",
      project_id: "prj_1",
      environment_id: "env_1",
      host_id: "host_src",
      target_id: "denvd",
      snapshot_ref: null,
      replicas: null,
      spec_json: "{}",
      spec_hash: "sha256:x",
      images_json: "{}",
      evidence_json: "{}",
      created_at: at,
    };
    await store.insertInto("versions").values(version).execute();
    const asked: string[] = [];
    let describedId = "ver_ba9876543210";
    let adoptedOn = "";
    // A stand-in for the hosts at the lifecycle port: each verb asked is written down; only
    // descriptions are answered (the sender's, and a host's that adopted a copy earlier).
    const describeVersion = async (host: string) => {
      if (host !== "host_src" && host !== adoptedOn)
        throw Object.assign(new Error("no version"), { code: "not_found" });
      return {
        version: { id: describedId, snapshots: { data: `${describedId}-data` } },
        storage: "btrfs",
        formats: ["btrfs-send", "tar"],
      };
    };
    const hosts = new Proxy({} as StackLifecycle, {
      get: (_t, verb: string) => {
        if (verb === "hostConnected") return () => true;
        return async (host: string) => {
          asked.push(verb);
          if (verb === "describeVersion") return describeVersion(host);
          throw new Error(`${verb} was not expected`);
        };
      },
    });
    const replicator = new Replicator({ store, hosts, secrets: { openText: (s: string) => s } as never });

    await assert.rejects(replicator.replicate(version, "host_other"), /no host host_other/);
    await assert.rejects(
      replicator.replicate(version, "host_dst"),
      /described ver_ba9876543210 when asked for ver_0123456789ab/,
    );
    describedId = version.id;
    await assert.rejects(replicator.replicate(version, "host_zfs"), /no stream format both drivers share/);
    // Only descriptions were asked for: no stream was opened, nothing was received anywhere.
    assert.deepEqual([...new Set(asked)], ["describeVersion"]);
    assert.deepEqual(await store.selectFrom("version_replicas").selectAll().execute(), []);
    // A host that adopted a copy whose record here was lost: recorded from its word, nothing sent.
    adoptedOn = "host_dst";
    asked.length = 0;
    assert.equal(await replicator.replicate(version, "host_dst"), null);
    assert.deepEqual(asked, ["describeVersion"]);
    assert.deepEqual(
      (await store.selectFrom("version_replicas").select(["host_id", "format"]).execute()).map((r) => [
        r.host_id,
        r.format,
      ]),
      [["host_dst", "adopted"]],
    );
    // The host that took it already holds it: nothing is asked at all.
    asked.length = 0;
    assert.equal(await replicator.replicate(version, "host_src"), null);
    assert.deepEqual(asked, []);
  } finally {
    await store.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
});
