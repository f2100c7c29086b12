/**
 * fork: a new environment from a version, on the host that holds the version's snapshots. The
 * host clones every dataset and starts the stack in one step (its fork operation), which probes
 * egress while the services come up: that step is one phase, `fork`, with the clone, start, health
 * and egress evidence of the host inside it.
 */
import { DenvError, type OpResult, type ResolvedSpec, stackName } from "@denv/protocol";
import { now } from "../ids.ts";
import type { AdmissionWait } from "../placement/admission.ts";
import {
  assignGpus,
  describeInventory,
  describeNeed,
  type GpuAssignment,
  gpuNeedOf,
  heldGpus,
  hostInventory,
} from "../placement/gpu-placement.ts";
import { environmentNamed, findOrCreateEnvironment, updateEnvironment } from "../store/environment-store.ts";
import { hostById } from "../store/host-store.ts";
import { projectById } from "../store/project-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import { findVersion, versionHost } from "../store/version-store.ts";
import type { DeploymentRunner, Launched } from "./deployment-runner.ts";
import { PhaseFailure } from "./phase-recorder.ts";

export interface ForkOptions {
  teamId: string;
  name: string;
  sandbox?: boolean;
  poolId?: string;
  holdClock?: boolean;
  /** Start every service afresh, even from a live version. */
  cold?: boolean;
  /**
   * Where it runs (fork-placement.ts), and why: a host holding the version, perhaps a replica made
   * for this fork. None: the host that took the version.
   */
  placed?: { hostId: string; evidence: Record<string, unknown> };
  /** The create turn it waited for on that host (admission.ts), recorded in the place phase. */
  admission?: AdmissionWait;
}

/**
 * What the kinds that make forks of their own (replays, promote's replay gate) ask of the
 * deployer: a fork of a version, and its destroy. Here, beside the fork's options, so those kinds
 * need not import the deployer that launches them.
 */
export interface ForkDeployer {
  fork(versionId: string, options: ForkOptions): Promise<Launched & { environmentId: string }>;
  destroy(env: EnvironmentsTable): Promise<Launched>;
}

export async function runFork(
  runner: DeploymentRunner,
  versionId: string,
  options: ForkOptions,
): Promise<Launched & { environmentId: string }> {
  const version = await findVersion(runner.store, options.teamId, versionId);
  const origin = versionHost(version, "a fork on a denvd host");
  const hostId = options.placed?.hostId ?? origin;
  const project = await projectById(runner.store, version.project_id);
  if (await environmentNamed(runner.store, project.id, options.name))
    throw new DenvError("conflict", `an environment named ${options.name} already exists in ${project.name}`);
  const env = await findOrCreateEnvironment(
    runner.store,
    project,
    options.name,
    options.sandbox,
    options.poolId ?? null,
  );
  await updateEnvironment(runner.store, env.id, { parent_version_id: versionId });
  const rec = await runner.begin(options.teamId, env.id, "fork", ["place", "join", "fork", "verdict"]);
  const launched = runner.launch(
    rec,
    env.id,
    async () => {
      const gpus = (await rec.run("place", async () => {
        const evidence = {
          ...(options.placed?.evidence ?? {
            host_id: hostId,
            reason: "holds the version's snapshots (snapshot locality)",
          }),
          ...(options.admission ? { admission: options.admission } : {}),
        };
        // A version whose services ask for GPUs: GPUs of this fork's own on that host, held from now.
        const spec = JSON.parse(runner.options.secrets.openText(version.spec_json)) as ResolvedSpec;
        const need = gpuNeedOf(spec);
        if (!need) return { value: null, evidence };
        const host = await hostById(runner.store, hostId);
        const inv = host ? hostInventory(host) : null;
        const held = (await heldGpus(runner.store, env.id)).get(hostId) ?? new Set<string>();
        const r = assignGpus(inv, held, need);
        if ("why" in r)
          throw new PhaseFailure(
            `the version's services ask for GPUs (${describeNeed(need)}) and ${host?.name ?? hostId}, which holds it, cannot give them: ${r.why}`,
            {
              gpus: {
                request: need,
                host: host?.name ?? hostId,
                inventory: describeInventory(inv, held.size),
              },
            },
          );
        await updateEnvironment(runner.store, env.id, { gpus_json: JSON.stringify(r.assignment) });
        return { value: r.assignment, evidence: { ...evidence, gpus: r.assignment } };
      })) as GpuAssignment | null;
      rec.state.host_id = hostId;
      await runner.joinPhase(rec, hostId);
      const forked = (await rec.run("fork", async () => {
        const newStackId = await rec.building();
        const out = await runner.stacks.fork(hostId, {
          versionId,
          name: stackName(project.name, options.name),
          operationId: rec.deploymentId,
          newStackId,
          // A pool's member keeps its clock at the version's time until it is taken (pool-keeper.ts),
          // a replay's until its episode starts (replay-runner.ts).
          ...(options.poolId || options.holdClock ? { holdClock: true } : {}),
          ...(gpus ? { gpus } : {}),
          ...(options.cold ? { cold: true } : {}),
        });
        return { value: out, evidence: out.evidence };
      })) as OpResult<"fork">;
      const spec = JSON.parse(runner.options.secrets.openText(version.spec_json)) as ResolvedSpec;
      await updateEnvironment(runner.store, env.id, {
        status: "running",
        host_id: hostId,
        stack_id: forked.stack_id,
        current_version_id: versionId,
        // x-denv.idle_pause_s: the timer counts from now (idle-pause.ts).
        idle_pause_s: spec.idle_pause_s ?? null,
        active_at: now(),
      });
      delete rec.state.building_stack_id;
      await rec.verdict("succeeded", null, {
        environment_id: env.id,
        from_version: versionId,
        total_ms: forked.evidence.total_ms,
      });
    },
    (err) => runner.rollBack(rec, { ...env, current_version_id: null }, err),
  );
  return { ...launched, environmentId: env.id };
}
