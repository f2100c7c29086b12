/** destroy: an environment's stack and data removed from its host. Its versions stay. */
import { DenvError, retiredEnvironmentName } from "@denv/protocol";
import { environmentById, updateEnvironment } from "../store/environment-store.ts";
import { releaseIngressNames } from "../store/ingress-store.ts";
import { revokePortUrls } from "../store/port-url-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import { hostedTargetNamed } from "../targets/hosted-targets.ts";
import type { DeploymentRunner, Launched } from "./deployment-runner.ts";

export async function runDestroy(runner: DeploymentRunner, env: EnvironmentsTable): Promise<Launched> {
  const rec = await runner.begin(env.team_id, env.id, "destroy", ["destroy", "verdict"]);
  return runner.launch(rec, env.id, async () => {
    const current = await environmentById(runner.store, env.id);
    await rec.run("destroy", async () => {
      if (current.target_id !== "denvd") {
        // A hosted sandbox: its provider kills it (one already gone is gone).
        const target = await hostedTargetNamed(runner.options, current.team_id, current.target_id);
        if (!target)
          throw new DenvError(
            "unavailable",
            `environment ${current.name} runs on target ${current.target_id}, which is no longer connected: its sandbox was not destroyed`,
          );
        await target.destroy({ id: current.id, name: current.name, hostId: null, stackId: current.stack_id });
        return { evidence: { target: current.target_id, sandbox_id: current.stack_id } };
      }
      if (current.host_id && current.stack_id)
        await runner.stacks.destroy({ hostId: current.host_id, stackId: current.stack_id });
      return { evidence: { host_id: current.host_id, stack_id: current.stack_id } };
    });
    // A destroyed environment is gone for good: its port URLs are revoked, and its name is freed
    // (kept, marked, on the record) so that a new environment of that name is a new identity,
    // which nothing minted for the old one can reach.
    const revoked = await revokePortUrls(runner.store, env.id);
    await releaseIngressNames(runner.store, env.id);
    await updateEnvironment(runner.store, env.id, {
      status: "destroyed",
      stack_id: null,
      name: retiredEnvironmentName(current.name, env.id),
    });
    await rec.verdict("succeeded", null, { port_urls_revoked: revoked });
  });
}
