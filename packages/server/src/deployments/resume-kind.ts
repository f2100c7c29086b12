/**
 * resume: an environment a verify froze for inspection (its services paused after the agent
 * stopped, verify-kind.ts) thawed and running again, as `verify --resume` would have left it. Not
 * a deployment of its own (nothing is built, moved or graded): it waits its turn behind the
 * environment's deployments, so it never thaws one a verify is still reading.
 */
import { DenvError } from "@denv/protocol";
import { environmentById, updateEnvironment } from "../store/environment-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import type { DeploymentRunner } from "./deployment-runner.ts";

export function runResume(runner: DeploymentRunner, env: EnvironmentsTable): Promise<EnvironmentsTable> {
  return runner.serialize(env.id, async () => {
    const current = await environmentById(runner.store, env.id);
    if (current.status !== "frozen")
      throw new DenvError(
        "conflict",
        `environment ${env.name} is ${current.status}: only one a verify froze for inspection is resumed`,
      );
    if (!current.host_id || !current.stack_id)
      throw new DenvError("conflict", `environment ${env.name} has no stack on a host to resume`);
    await runner.stacks.resume({ hostId: current.host_id, stackId: current.stack_id });
    await updateEnvironment(runner.store, env.id, { status: "running" });
    return environmentById(runner.store, env.id);
  });
}
