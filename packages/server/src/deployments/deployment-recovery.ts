/**
 * After a restart: every deployment that was running when the server died is ended, from what it
 * wrote down before each step that changes a host (its state, phase-recorder.ts):
 *
 * - a stack it was building is removed, unless the environment already points at it (the switch
 *   happened: the deployment is finished and succeeds); a stack it was replacing is removed once
 *   the environment no longer points at it; a grader fork is removed, a version it was taking is
 *   deleted from the host unless it was recorded;
 * - a verify that froze a running agent thaws it (no verdict will say "frozen for inspection");
 * - a rollback the host began is finished (the host holds the stack half restored), a destroy is
 *   finished (it cannot be undone);
 * - a machine it created and that never joined is deleted;
 * - a sandbox a deploy made at a hosted target is ended unless the environment points at it, and
 *   one it was replacing is ended once the environment does not (a hosted destroy is finished).
 *
 * The phases that were running are failed at once, with the reason; the work on the host runs in
 * the environment's turn (new deployments of it queue behind), waits for the host to reconnect,
 * and the verdict is written only once it is done: a server killed again meanwhile does it again
 * (every step is idempotent). Every deployment ends succeeded or rolled_back.
 */
import { retiredEnvironmentName } from "@denv/protocol";
import { runningDeployments } from "../store/deployment-store.ts";
import { environmentById, updateEnvironment } from "../store/environment-store.ts";
import { releaseIngressNames } from "../store/ingress-store.ts";
import { revokePortUrls } from "../store/port-url-store.ts";
import type { DeploymentsTable, EnvironmentsTable } from "../store/schema.ts";
import { versionRow } from "../store/version-store.ts";
import { hostedTargetNamed } from "../targets/hosted-targets.ts";
import type { DeploymentRunner } from "./deployment-runner.ts";
import { type HostedSandboxRef, PhaseRecorder } from "./phase-recorder.ts";

/** How long the work on a host waits for it to reconnect after the server restarted. */
const HOST_WAIT_MS = 2 * 60_000;
const STOPPED = "the server stopped during the deployment";

export async function recoverDeployments(
  runner: DeploymentRunner,
  stuck?: DeploymentsTable[],
): Promise<string[]> {
  stuck ??= await runningDeployments(runner.store);
  for (const d of stuck) {
    const rec = PhaseRecorder.resume(d, {
      store: runner.store,
      events: runner.events,
      leaseOwner: runner.options.lease?.owner,
      observer: runner.options.observer,
    });
    rec.failRunning("the server stopped during this phase");
    await rec.skipRest(`skipped: ${STOPPED}`);
    const done = runner.serialize(d.environment_id, () => endDeployment(runner, rec, d));
    done.catch(() => {});
  }
  return stuck.map((d) => d.id);
}

async function endDeployment(
  runner: DeploymentRunner,
  rec: PhaseRecorder,
  d: DeploymentsTable,
): Promise<void> {
  const { store } = runner;
  const s = rec.state;
  let env: EnvironmentsTable | undefined = await environmentById(store, d.environment_id).catch(
    () => undefined,
  );
  const provisioner = runner.options.provisioner;
  if (s.machine_id && provisioner) await provisioner.remove(s.machine_id).catch(() => {});
  const hostId = s.host_id ?? env?.host_id ?? null;
  const done: string[] = [];
  const failed: string[] = [];
  /** One step of the clean-up on the host, with the wait a restart gives a host to come back. */
  const call = async (
    step: (host: string, wait: { waitForHostMs: number }) => Promise<unknown>,
    what: string,
  ) => {
    if (!hostId) return false;
    try {
      await step(hostId, { waitForHostMs: HOST_WAIT_MS });
      done.push(what);
      return true;
    } catch (err) {
      failed.push(`${what}: ${(err as Error).message}`);
      return false;
    }
  };
  const hostedDeps = { store, secrets: runner.options.secrets, fetchPolicy: runner.options.fetchPolicy };
  /** Ends a sandbox at a hosted target (one already gone is gone). */
  const endSandbox = async (at: HostedSandboxRef, what: string) => {
    try {
      const target = await hostedTargetNamed(hostedDeps, d.team_id, at.target);
      if (!target) throw new Error(`target ${at.target} is no longer connected`);
      await target.killService(at.sandbox_id);
      done.push(what);
      return true;
    } catch (err) {
      failed.push(`${what}: ${(err as Error).message}`);
      return false;
    }
  };
  let finished = false;
  if (s.building_sandbox) {
    if (env?.stack_id === s.building_sandbox.sandbox_id) finished = true;
    else
      await endSandbox(
        s.building_sandbox,
        `ended sandbox ${s.building_sandbox.sandbox_id} at ${s.building_sandbox.target}`,
      );
  }
  if (s.retiring_sandbox && env?.stack_id !== s.retiring_sandbox.sandbox_id)
    await endSandbox(
      s.retiring_sandbox,
      `ended replaced sandbox ${s.retiring_sandbox.sandbox_id} at ${s.retiring_sandbox.target}`,
    );
  const { stacks } = runner;
  if (s.building_stack_id) {
    const building = s.building_stack_id;
    if (env?.stack_id === building) finished = true;
    else
      await call((h, w) => stacks.destroy({ hostId: h, stackId: building }, w), `removed stack ${building}`);
  }
  const retiring = s.retiring_stack_id;
  if (retiring && env?.stack_id !== retiring)
    await call(
      (h, w) => stacks.destroy({ hostId: h, stackId: retiring }, w),
      `removed replaced stack ${retiring}`,
    );
  if (s.grader_stack_id) {
    const grader = s.grader_stack_id;
    await call((h, w) => stacks.destroy({ hostId: h, stackId: grader }, w), `removed grader fork ${grader}`);
    await call((h, w) => stacks.verifyCleanup(h, d.id, w), "removed the collected files");
  }
  if (s.building_version_id) {
    const building = s.building_version_id;
    const recorded = await versionRow(store, building);
    if (!recorded)
      await call((h, w) => stacks.deleteVersion(h, building, w), `deleted unrecorded version ${building}`);
  }
  if (d.kind === "verify" && s.froze_agent && env?.stack_id) {
    const stackId = env.stack_id;
    if (await call((h, w) => stacks.resume({ hostId: h, stackId }, w), "thawed the agent verify had frozen"))
      await updateEnvironment(store, env.id, { status: "running" });
  }
  if (d.kind === "rollback" && s.target_version_id && env?.stack_id) {
    const target = s.target_version_id;
    const stackId = env.stack_id;
    if (await call((h, w) => stacks.rollback({ hostId: h, stackId }, target, w), `restored ${target}`)) {
      await updateEnvironment(store, env.id, { current_version_id: target, status: "running" });
      finished = true;
    }
  }
  if (d.kind === "destroy" && env) {
    const stackId = env.stack_id;
    const target = env.target_id;
    const removed = async (id: string) =>
      target === "denvd"
        ? await call((h, w) => stacks.destroy({ hostId: h, stackId: id }, w), `removed stack ${id}`)
        : await endSandbox({ target, sandbox_id: id }, `ended sandbox ${id} at ${target}`);
    if (!stackId || (await removed(stackId))) {
      const revoked = await revokePortUrls(store, env.id);
      await releaseIngressNames(store, env.id);
      await updateEnvironment(store, env.id, {
        status: "destroyed",
        stack_id: null,
        name: retiredEnvironmentName(env.name, env.id),
      });
      done.push(`revoked ${revoked} port URLs`);
      finished = true;
    }
  }
  env = env ? await environmentById(store, env.id).catch(() => undefined) : undefined;
  if (!finished && env && !env.current_version_id && env.status === "pending")
    await updateEnvironment(store, env.id, { status: "failed" });
  const evidence = {
    after_restart: done,
    not_done: failed,
    restored_version: env?.current_version_id ?? null,
  };
  if (finished) await rec.verdict("succeeded", null, { ...evidence, finished_after_restart: true });
  else
    await rec.verdict(
      "rolled_back",
      failed.length
        ? `${STOPPED}; cleaning up on its host failed: ${failed.join("; ")}`
        : `${STOPPED}; what it was building was removed`,
      evidence,
    );
}
