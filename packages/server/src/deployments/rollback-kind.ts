/** rollback: an environment restored to one of its own versions (or its parent), healthy again. */
import { DenvError } from "@denv/protocol";
import { environmentById, updateEnvironment } from "../store/environment-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import { findVersion } from "../store/version-store.ts";
import { requireHostsTarget } from "../targets/target.ts";
import type { DeploymentRunner, Launched } from "./deployment-runner.ts";
import { requireRunning } from "./snapshot-kind.ts";

export async function runRollback(
  runner: DeploymentRunner,
  env: EnvironmentsTable,
  versionId: string,
): Promise<Launched> {
  requireHostsTarget(env, "a rollback");
  const version = await findVersion(runner.store, env.team_id, versionId);
  // Only this environment's own versions, or the one it was forked from: another environment's
  // version is another world (another spec, other data), not a state this one was ever in.
  if (version.environment_id !== env.id && version.id !== env.parent_version_id) {
    throw new DenvError(
      "invalid_argument",
      `version ${versionId} is not a version of environment ${env.name}; fork it instead (denv fork --name NAME ${versionId})`,
    );
  }
  const rec = await runner.begin(env.team_id, env.id, "rollback", ["restore", "health", "verdict"]);
  return runner.launch(rec, env.id, async () => {
    // A paused environment may be restored too (its checkpoints go with its containers).
    const current = await environmentById(runner.store, env.id);
    const { hostId, stackId } = requireRunning(
      current.status === "paused" ? { ...current, status: "running" } : current,
    );
    if (version.host_id !== hostId)
      throw new DenvError("conflict", `version ${versionId} is on another host`);
    // Written down before the host begins: a stopped server finishes the restore on restart.
    rec.state.host_id = hostId;
    rec.state.target_version_id = versionId;
    await rec.persist();
    const r = (await rec.run("restore", async () => {
      const out = await runner.stacks.rollback({ hostId, stackId }, versionId);
      return { value: out, evidence: { version_id: versionId, ms: out.ms } };
    })) as { health: unknown };
    // Restored: what follows records it, and a cancel asked now cannot undo it.
    rec.commit();
    // The stack restarts in dependency order on the host; this records what it measured.
    await rec.run("health", async () => ({ evidence: r.health }));
    await rec.carve("restore", "health", (r.health as { ms?: number }).ms ?? 0);
    await updateEnvironment(runner.store, env.id, { current_version_id: versionId, status: "running" });
    await rec.verdict("succeeded", null, { version_id: versionId });
  });
}
