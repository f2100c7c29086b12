/**
 * An environment's egress policy, read and changed while it runs (docs/egress.md). Only an
 * environment deployed with a policy has a gateway to take a new one; on a denvd host only. A
 * change waits its turn behind the environment's deployments (never under a fork or a verify of
 * it), and the host keeps it: the next connection follows it, open ones it no longer allows close.
 */
import { DenvError } from "@denv/protocol";
import { parseEgressPolicy } from "@denv/spec";
import { environmentById } from "../store/environment-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import type { EgressLogOutcome, SetEgressOutcome } from "../targets/stack-lifecycle.ts";
import type { DeploymentRunner } from "./deployment-runner.ts";

export type EgressPolicy = { allow: string[]; deny: string[] };

/** The environment's stack on its host, or why there is none to ask. */
function stackOf(env: EnvironmentsTable, what: string) {
  if (env.target_id !== "denvd")
    throw new DenvError(
      "not_supported",
      `environment ${env.name} runs on target ${env.target_id}; ${what} needs a denvd host (its proxy is denvd's)`,
    );
  if ((env.status !== "running" && env.status !== "paused") || !env.host_id || !env.stack_id)
    throw new DenvError("conflict", `environment ${env.name} is ${env.status}, not running`);
  return { hostId: env.host_id, stackId: env.stack_id };
}

/** The policy's rules checked here first: a bad one is refused naming its list, index and why. */
export function checkedPolicy(policy: EgressPolicy): EgressPolicy {
  const parsed = parseEgressPolicy(policy);
  if ("errors" in parsed)
    throw new DenvError("invalid_argument", `egress policy: ${parsed.errors.join("; ")}`);
  return {
    allow: [...new Set(parsed.allow.map((r) => r.text))],
    deny: [...new Set(parsed.deny.map((r) => r.text))],
  };
}

export function runSetEgress(
  runner: DeploymentRunner,
  env: EnvironmentsTable,
  policy: EgressPolicy,
): Promise<SetEgressOutcome & { policy: EgressPolicy }> {
  const checked = checkedPolicy(policy);
  return runner.serialize(env.id, async () => {
    const at = stackOf(await environmentById(runner.store, env.id), "changing its egress");
    const r = await runner.stacks.setEgress(at, checked);
    return { ...r, policy: checked };
  });
}

export async function readEgress(
  runner: DeploymentRunner,
  env: EnvironmentsTable,
  limit?: number,
): Promise<EgressLogOutcome> {
  return runner.stacks.egressLog(
    stackOf(await environmentById(runner.store, env.id), "its egress log"),
    limit,
  );
}
