/**
 * After a restart: deployments that were running when the server died are rolled back. The stack
 * each was building is removed (once its host is connected), a machine it created and that never
 * joined is deleted, and the reason is recorded.
 */
import { runningDeployments } from "../store/deployment-store.ts";
import { environmentById, updateEnvironment } from "../store/environment-store.ts";
import type { DeploymentRunner } from "./deployment-runner.ts";
import { PhaseRecorder } from "./phase-recorder.ts";

export async function recoverDeployments(runner: DeploymentRunner): Promise<string[]> {
  const stuck = await runningDeployments(runner.store);
  for (const d of stuck) {
    const rec = PhaseRecorder.resume(d, { store: runner.store, events: runner.events });
    rec.failRunning("the server stopped during this phase");
    const env = await environmentById(runner.store, d.environment_id).catch(() => undefined);
    const provisioner = runner.options.provisioner;
    if (rec.state.machine_id && provisioner) await provisioner.remove(rec.state.machine_id).catch(() => {});
    const building = rec.state.building_stack_id;
    const hostId = rec.state.host_id;
    if (building && hostId) {
      // The host may still be reconnecting; the destroy is queued until it does.
      void runner.hub
        .call(
          hostId,
          "destroy",
          { stack_id: building },
          { timeoutMs: 10 * 60_000, waitForHostMs: 10 * 60_000 },
        )
        .catch(() => {});
    }
    await rec.skipRest("skipped: the server stopped during the deployment");
    if (env && !env.current_version_id && env.status === "pending")
      await updateEnvironment(runner.store, env.id, { status: "failed" });
    await rec.verdict(
      "rolled_back",
      "the server stopped during the deployment; what it was building was removed",
      {
        restored_version: env?.current_version_id ?? null,
      },
    );
  }
  return stuck.map((d) => d.id);
}
