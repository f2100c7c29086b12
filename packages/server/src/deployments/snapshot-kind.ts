/**
 * snapshot: a running environment's live state captured as a new version. The snapshot phase is
 * also how deploy and verify make their versions.
 */

import { createHash } from "node:crypto";
import { DenvError, type ResolvedSpec } from "@denv/protocol";
import { newId, now } from "../ids.ts";
import { environmentById, updateEnvironment } from "../store/environment-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import { insertVersion, versionSpecJson } from "../store/version-store.ts";
import { hostedTargetNamed } from "../targets/hosted-targets.ts";
import type { LiveMode } from "../targets/stack-lifecycle.ts";
import type { TargetSnapshot } from "../targets/target.ts";
import type { DeploymentRunner, Launched } from "./deployment-runner.ts";
import type { PhaseRecorder } from "./phase-recorder.ts";

/** Its host and stack; conflict when it is not running. */
export function requireRunning(env: EnvironmentsTable): { hostId: string; stackId: string } {
  if (env.status !== "running" || !env.host_id || !env.stack_id)
    throw new DenvError("conflict", `environment ${env.name} is ${env.status}; deploy it first`);
  return { hostId: env.host_id, stackId: env.stack_id };
}

/** The resolved spec of an environment's current version. */
export async function specOf(runner: DeploymentRunner, env: EnvironmentsTable): Promise<ResolvedSpec> {
  const sealed = await versionSpecJson(runner.store, env.current_version_id);
  if (!sealed) throw new DenvError("conflict", `environment ${env.name} has no version yet`);
  return JSON.parse(runner.options.secrets.openText(sealed)) as ResolvedSpec;
}

/** The snapshot phase: the host captures the stack, and the version is recorded with its spec. */
export async function snapshotPhase(
  runner: DeploymentRunner,
  rec: PhaseRecorder,
  env: Pick<EnvironmentsTable, "id" | "team_id" | "project_id">,
  hostId: string,
  stackId: string,
  spec: () => Promise<ResolvedSpec>,
  live?: LiveMode,
): Promise<string> {
  return (await rec.run("snapshot", async () => {
    // Chosen and written down before the host is asked: a restart removes it if it was not recorded.
    rec.state.building_version_id = newId("ver");
    await rec.persist();
    const r = await runner.stacks.snapshot(
      { hostId, stackId },
      rec.state.building_version_id,
      live ? { live } : {},
    );
    const s = await spec();
    await insertVersion(runner.store, {
      id: r.version_id,
      team_id: env.team_id,
      project_id: env.project_id,
      environment_id: env.id,
      host_id: hostId,
      target_id: "denvd", // made by a host's snapshot operation
      // Sealed: the spec holds the values interpolated from the project's .env.
      spec_json: runner.options.secrets.sealText(JSON.stringify(s)),
      spec_hash: s.hash,
      // x-denv.replicas: the copies the keeper keeps of it (replica-keeper.ts).
      replicas: s.replicas ?? null,
      images_json: JSON.stringify(r.images),
      evidence_json: JSON.stringify(r.evidence),
      created_at: now(),
    });
    delete rec.state.building_version_id;
    return { value: r.version_id, evidence: r.evidence };
  })) as string;
}

/**
 * A version that lives on a hosted target: the provider's snapshot of an environment's sandbox,
 * with the spec it was made from (sealed, as every version's is); no host holds it.
 */
export async function recordHostedVersion(
  runner: DeploymentRunner,
  env: Pick<EnvironmentsTable, "id" | "team_id" | "project_id">,
  targetName: string,
  snap: TargetSnapshot,
  spec: unknown,
): Promise<string> {
  const id = newId("ver");
  await insertVersion(runner.store, {
    id,
    team_id: env.team_id,
    project_id: env.project_id,
    environment_id: env.id,
    host_id: null,
    target_id: targetName,
    snapshot_ref: snap.ref,
    spec_json: runner.options.secrets.sealText(JSON.stringify(spec)),
    spec_hash: createHash("sha256").update(JSON.stringify(spec)).digest("hex"),
    images_json: "{}",
    evidence_json: JSON.stringify(snap.evidence),
    created_at: now(),
  });
  return id;
}

/**
 * A snapshot of a sandbox on a hosted target: the provider's own snapshot, where the target's row
 * says it has one (refused before anything is recorded where it has not), recorded as a version
 * that lives on that target (no host; the provider's id of the snapshot is what forks are made from).
 */
async function runHostedSnapshot(runner: DeploymentRunner, env: EnvironmentsTable): Promise<Launched> {
  const { store, options } = runner;
  const target = await hostedTargetNamed(
    { store, secrets: options.secrets, fetchPolicy: options.fetchPolicy },
    env.team_id,
    env.target_id,
  );
  if (!target)
    throw new DenvError(
      "unavailable",
      `environment ${env.name} runs on target ${env.target_id}, which this server does not have`,
    );
  const caps = await target.capabilities(env.team_id);
  if (!caps.consistentSnapshot.supported)
    throw new DenvError(
      "not_supported",
      `target ${target.name} cannot snapshot environment ${env.name}: ${caps.consistentSnapshot.detail}`,
    );
  const rec = await runner.begin(env.team_id, env.id, "snapshot", ["snapshot", "verdict"]);
  return runner.launch(rec, env.id, async () => {
    const versionId = (await rec.run("snapshot", async () => {
      const snap = await target.snapshot({ id: env.id, name: env.name, hostId: null, stackId: env.stack_id });
      // What the version is: the one service of a sandbox at this target, forked from this snapshot.
      const spec = { hosted: { target: target.name, provider: target.kind }, services: { main: {} } };
      const id = await recordHostedVersion(runner, env, target.name, snap, spec);
      return { value: id, evidence: snap.evidence };
    })) as string;
    await updateEnvironment(store, env.id, { current_version_id: versionId });
    await rec.verdict("succeeded", null, { version_id: versionId });
  });
}

export async function runSnapshot(
  runner: DeploymentRunner,
  env: EnvironmentsTable,
  options: { live?: LiveMode } = {},
): Promise<Launched> {
  if (env.target_id !== "denvd") {
    if (options.live)
      throw new DenvError(
        "not_supported",
        `environment ${env.name} runs on target ${env.target_id}, whose snapshots keep no processes; a live snapshot needs a denvd host`,
      );
    return runHostedSnapshot(runner, env);
  }
  const rec = await runner.begin(env.team_id, env.id, "snapshot", ["snapshot", "verdict"]);
  return runner.launch(rec, env.id, async () => {
    const current = await environmentById(runner.store, env.id);
    const { hostId, stackId } = requireRunning(current);
    const versionId = await snapshotPhase(
      runner,
      rec,
      env,
      hostId,
      stackId,
      () => specOf(runner, env),
      options.live,
    );
    await updateEnvironment(runner.store, env.id, { current_version_id: versionId });
    await rec.verdict("succeeded", null, { version_id: versionId });
  });
}
