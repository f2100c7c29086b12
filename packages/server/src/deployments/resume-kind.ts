/**
 * resume: an environment a verify froze for inspection (its services paused after the agent
 * stopped, verify-kind.ts) thawed and running again, as `verify --resume` would have left it; or
 * one paused with its memory (pause below) started again from its checkpoints, carrying on where
 * it was. Neither is a deployment of its own (nothing is built, moved or graded): each waits its
 * turn behind the environment's deployments, so it never thaws one a verify is still reading.
 */
import { DenvError } from "@denv/protocol";
import { now } from "../ids.ts";
import { environmentById, updateEnvironment } from "../store/environment-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import type { DeploymentRunner } from "./deployment-runner.ts";

export function runResume(runner: DeploymentRunner, env: EnvironmentsTable): Promise<EnvironmentsTable> {
  return runner.serialize(env.id, async () => {
    const current = await environmentById(runner.store, env.id);
    if (current.status !== "frozen" && current.status !== "paused")
      throw new DenvError(
        "conflict",
        `environment ${env.name} is ${current.status}: only one paused, or one a verify froze for inspection, is resumed`,
      );
    if (!current.host_id || !current.stack_id)
      throw new DenvError("conflict", `environment ${env.name} has no stack on a host to resume`);
    const at = { hostId: current.host_id, stackId: current.stack_id };
    if (current.status === "paused") await runner.stacks.unpause(at);
    else await runner.stacks.resume(at);
    await updateEnvironment(runner.store, env.id, { status: "running", idle_paused: null, active_at: now() });
    return environmentById(runner.store, env.id);
  });
}

/**
 * The environment, resumed first when the idle timer paused it (x-denv.idle_pause_s): what a
 * request that reaches into it runs before it goes on. One paused by hand stays paused; one
 * already resumed (by a request alongside) is answered as it is.
 */
export function runWake(runner: DeploymentRunner, env: EnvironmentsTable): Promise<EnvironmentsTable> {
  return runner.serialize(env.id, async () => {
    const current = await environmentById(runner.store, env.id);
    if (current.status !== "paused" || !current.idle_paused || !current.host_id || !current.stack_id)
      return current;
    await runner.stacks.unpause({ hostId: current.host_id, stackId: current.stack_id });
    await updateEnvironment(runner.store, env.id, { status: "running", idle_paused: null, active_at: now() });
    return environmentById(runner.store, env.id);
  });
}

/**
 * pause: a running environment's processes checkpointed with their memory and stopped (its
 * containers, volumes and network stay); `resume` carries on from there. Refused, naming the
 * service and process, where CRIU cannot take one; on a hosted target, where denv has no host.
 */
export function runPause(
  runner: DeploymentRunner,
  env: EnvironmentsTable,
  options: { idle?: boolean } = {},
): Promise<EnvironmentsTable> {
  return runner.serialize(env.id, async () => {
    const current = await environmentById(runner.store, env.id);
    if (current.target_id !== "denvd")
      throw new DenvError(
        "not_supported",
        `environment ${env.name} runs on target ${current.target_id}; pause that keeps memory needs a denvd host`,
      );
    if (current.status !== "running" || !current.host_id || !current.stack_id)
      throw new DenvError("conflict", `environment ${env.name} is ${current.status}, not running`);
    await runner.stacks.pause({ hostId: current.host_id, stackId: current.stack_id });
    await updateEnvironment(runner.store, env.id, { status: "paused", idle_paused: options.idle ? 1 : null });
    return environmentById(runner.store, env.id);
  });
}
