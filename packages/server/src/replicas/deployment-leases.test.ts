import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { Deployer } from "../deployments/deployer.ts";
import { PhaseRecorder } from "../deployments/phase-recorder.ts";
import { deploymentById, insertDeployment } from "../store/deployment-store.ts";
import { openStore, type Store } from "../store/open-store.ts";
import type { DeploymentsTable } from "../store/schema.ts";
import { DeploymentLeases } from "./deployment-leases.ts";
import { ReplicaRegistry } from "./replica-registry.ts";

let dir: string;
let store: Store;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "denv-leases-"));
  store = await openStore(join(dir, "store"));
  const at = new Date().toISOString();
  await store.insertInto("teams").values({ id: "team_1", name: "t", created_at: at }).execute();
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
      created_at: at,
    })
    .execute();
  await store
    .insertInto("environments")
    .values({
      id: "env_1",
      team_id: "team_1",
      project_id: "prj_1",
      name: "e",
      status: "running",
      host_id: null,
      stack_id: null,
      current_version_id: null,
      parent_version_id: null,
      sandbox: 0,
      target_id: "denvd",
      pool_id: null,
      created_at: at,
    })
    .execute();
});
after(async () => {
  await store.destroy();
  rmSync(dir, { recursive: true, force: true });
});

/** A replica's leases, with what it was handed to end (the recovery itself is tested elsewhere). */
function replica(leaseMs: number) {
  const registry = new ReplicaRegistry(store, { deadAfterMs: leaseMs });
  const recovered: string[] = [];
  const deployer = {
    recover: async (ds: DeploymentsTable[]) => {
      recovered.push(...ds.map((d) => d.id));
      return ds.map((d) => d.id);
    },
  } as unknown as Deployer;
  return { registry, recovered, leases: new DeploymentLeases({ store, registry, deployer }, leaseMs) };
}

async function running(id: string, owner: string | null, leaseUntil: number | null): Promise<void> {
  await insertDeployment(store, {
    id,
    team_id: "team_1",
    environment_id: "env_1",
    kind: "deploy",
    status: "running",
    phases_json: "[]",
    reason: null,
    state_json: "{}",
    created_at: new Date().toISOString(),
    finished_at: null,
    lease_owner: owner,
    lease_until: leaseUntil,
  });
}

test("a replica renews only its own running deployments' leases", async () => {
  const a = replica(60_000);
  await running("dep_renew_a", a.registry.id, Date.now() + 1000);
  await running("dep_renew_b", "rep_other", Date.now() + 1000);
  await a.leases.renew();
  const mine = Number((await deploymentById(store, "dep_renew_a"))?.lease_until);
  const theirs = Number((await deploymentById(store, "dep_renew_b"))?.lease_until);
  assert.ok(mine > Date.now() + 50_000, "renewed to a lease ahead");
  assert.ok(theirs < Date.now() + 2000, "another replica's lease is not touched");
});

test("a lapsed lease is claimed by exactly one of two replicas racing for it; a live one by none", async () => {
  const a = replica(60_000);
  const b = replica(60_000);
  const t = Date.now();
  await store
    .insertInto("server_replicas")
    .values({ id: "rep_alive", url: "http://alive", started_at: t, seen_at: t })
    .execute();
  await running("dep_lapsed", "rep_dead", Date.now() - 1);
  await running("dep_live", "rep_alive", Date.now() + 60_000);
  const [fromA, fromB] = await Promise.all([a.leases.takeOver(false), b.leases.takeOver(false)]);
  const claims = [...fromA, ...fromB].filter((id) => id === "dep_lapsed");
  assert.equal(claims.length, 1, "one claimant wins the compare-and-set");
  assert.ok(![...fromA, ...fromB].includes("dep_live"));
  const row = await deploymentById(store, "dep_lapsed");
  assert.ok([a.registry.id, b.registry.id].includes(row?.lease_owner ?? ""));
  // Claimed now: neither takes it again while its lease is fresh.
  assert.deepEqual(
    (await a.leases.takeOver(false)).filter((id) => id === "dep_lapsed"),
    [],
  );
});

test("a replica whose lease was taken over cannot write the deployment any more", async () => {
  const a = replica(60_000);
  const b = replica(60_000);
  await running("dep_fenced", a.registry.id, Date.now() - 1);
  const rec = PhaseRecorder.resume((await deploymentById(store, "dep_fenced")) as DeploymentsTable, {
    store,
    events: new EventEmitter(),
    leaseOwner: a.registry.id,
  });
  await rec.persist();
  assert.deepEqual(await b.leases.takeOver(false), ["dep_fenced"]);
  await assert.rejects(rec.persist({ status: "succeeded" }), /taken over by another server replica/);
  assert.equal(
    (await deploymentById(store, "dep_fenced"))?.status,
    "running",
    "the old replica wrote nothing",
  );
});

test("a deployment whose replica is gone from the registry is taken over before its lease runs out", async () => {
  const a = replica(60_000);
  const old = new Date(Date.now() - 10_000).toISOString();
  for (const [id, at] of [
    ["dep_orphan", old],
    ["dep_orphan_new", new Date().toISOString()],
  ] as const) {
    await running(id, "rep_restarted", Date.now() + 60_000);
    await store.updateTable("deployments").set({ created_at: at }).where("id", "=", id).execute();
  }
  const taken = await a.leases.takeOver(false);
  assert.ok(taken.includes("dep_orphan"), "its replica stopped (or restarted under another id)");
  assert.ok(!taken.includes("dep_orphan_new"), "one begun just now may be a replica's not yet registered");
});
