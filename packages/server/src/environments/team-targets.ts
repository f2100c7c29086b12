/**
 * The targets a team can run on, by name (its sidecar hosts, `denvd`, and each hosted provider it
 * connected, by the cloud's name). Routes find a target here and read its row before they act,
 * and reach into a running environment through the target that placed it.
 */
import { DenvError } from "@denv/protocol";
import type { EnvironmentsTable } from "../store/schema.ts";
import { resolveVersionRef } from "../store/version-store.ts";
import type { DenvdTarget } from "../targets/denvd/denvd-target.ts";
import { hostedTargets } from "../targets/hosted-targets.ts";
import type { PlacedEnvironment, Target } from "../targets/target.ts";
import { createSandbox, type EnvironmentDeps } from "./environment-creation.ts";

/** The team's sidecar hosts as a target. */
function denvdTarget(deps: EnvironmentDeps): DenvdTarget {
  return deps.stacks.target(deps.store, async (teamId, spec) => {
    if ("fromVersion" in spec) {
      const v = await resolveVersionRef(deps.store, teamId, spec.fromVersion);
      if (!v.host_id)
        throw new DenvError(
          "invalid_argument",
          `target denvd cannot fork ${v.id}: it is a snapshot at target ${v.target_id}; fork it there (POST /v1/targets/${v.target_id}/sandboxes)`,
        );
    }
    const made = await createSandbox(deps, teamId, spec);
    return { environmentId: made.env.id, deploymentId: made.deploymentId };
  });
}

export async function teamTargets(deps: EnvironmentDeps, teamId: string): Promise<Target[]> {
  return [denvdTarget(deps), ...(await hostedTargets(deps, teamId))];
}

/** The team's target of that name; not_found, naming the ones there are, when it has none. */
export async function targetNamed(deps: EnvironmentDeps, teamId: string, name: string): Promise<Target> {
  const all = await teamTargets(deps, teamId);
  const t = all.find((x) => x.name === name);
  if (!t)
    throw new DenvError(
      "not_found",
      `no target ${JSON.stringify(name)}: this team's are ${all.map((x) => x.name).join(", ")} (GET /v1/targets); a hosted provider is connected with \`denv cloud connect e2b|daytona|modal|prime\``,
    );
  return t;
}

/**
 * The target a running environment is on, and the environment as the target knows it
 * (`runningOn` has checked it runs). An environment on a target this server no longer has is
 * unavailable, saying which.
 */
export async function environmentTarget(
  deps: EnvironmentDeps,
  e: EnvironmentsTable,
): Promise<{ target: Target; placed: PlacedEnvironment }> {
  // The sidecar hosts' without a look at the team's clouds: an exec pays for no query it needs not.
  const target =
    e.target_id === "denvd"
      ? denvdTarget(deps)
      : (await hostedTargets(deps, e.team_id)).find((t) => t.name === e.target_id);
  if (!target)
    throw new DenvError(
      "unavailable",
      `environment ${e.name} runs on target ${e.target_id}, which this server does not have`,
    );
  return { target, placed: { id: e.id, name: e.name, hostId: e.host_id, stackId: e.stack_id } };
}
