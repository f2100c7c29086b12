/**
 * start: a stack's volumes, networks and containers, created up front and started in depends_on
 * order until every service is healthy. With the agent, each container's socket is listened on
 * before the container exists (it mounts the socket's directory) and the agent is registered once
 * the container is created; the agent service is then read back to prove it is not root.
 */
import type { ClockEvidence, HealthEvidence, ResolvedService, ServiceStartEvidence } from "@denv/protocol";
import { clockDirFor, clockStartEvidence } from "../clock/stack-clock.ts";
import { egressPolicyOf, proxyEnvironment } from "../egress/egress-gateways.ts";
import { assertAgentNotRoot } from "../services/agent-root-check.ts";
import { startInOrder } from "../services/service-health.ts";
import { readBackCaps } from "./caps-readback.ts";
import { containerSpecFor, type ServiceIdentity } from "./container-spec.ts";
import { LABEL } from "./labels.ts";
import type { StackContext } from "./stack-context.ts";
import { startEgressGateway } from "./stack-egress-gateway.ts";
import { writeStackSecrets } from "./stack-secrets.ts";
import { seedFileSource } from "./stack-seeds.ts";

export interface StartResult {
  evidence: Record<string, ServiceStartEvidence>;
  ms: number;
  health: HealthEvidence;
  clock: ClockEvidence;
}

export async function startStack(
  ctx: StackContext,
  stackId: string,
  hooks: {
    onStarted?: (service: string) => void;
    settleMs?: number;
    /** Starts a service another way (a fork restoring its processes); null: started as usual. */
    restore?: (service: string, containerId: string) => Promise<void> | null;
    /** Subnets the stack's networks must not take (a fork's restored processes' old ones). */
    avoidSubnets?: readonly string[];
  } = {},
): Promise<StartResult> {
  const stack = ctx.stack(stackId);
  const started = performance.now();
  const stackLabels = ctx.labels({ [LABEL.stack]: stack.id, [LABEL.operation]: stack.operationId });
  const spec = stack.spec;
  const gpuMode = Object.values(spec.services).some((s) => s.gpus) ? await ctx.gpuMode() : "none";
  const networkNames = Object.keys(spec.networks);
  // One engine network per compose network; the first keeps the stack's own name.
  const networkName = (n: string) => (n === networkNames[0] ? stack.network : `${stack.network}-${n}`);
  const volumes = Promise.all(
    Object.entries(stack.datasets).map(([vol, ds]) =>
      ctx.runtime.createVolume({
        name: `${stack.network}-${vol}`,
        hostPath: ctx.storage.datasetPath(ds),
        labels: stackLabels,
      }),
    ),
  );
  volumes.catch(() => {}); // awaited below, after the networks
  for (const n of networkNames) {
    await ctx.networks.create(
      { name: networkName(n), internal: spec.networks[n]?.internal ?? true, labels: stackLabels },
      hooks.avoidSubnets,
    );
  }
  await volumes;
  // With an egress policy, its gateway runs before any service: a service's first command may
  // already fetch through it.
  await startEgressGateway(
    ctx,
    stack,
    spec.networks ? Object.keys(spec.networks).map(networkName) : [],
    stackLabels,
  );
  const order = spec.start_order;
  // Each agent's socket exists before its container does (the container mounts its directory),
  // and each service's user and command are known: the agent starts the command as that user.
  const agents = new Map<string, { runDir: string; identity: ServiceIdentity }>();
  const agentBinary = ctx.options.agentBinary;
  if (agentBinary) {
    await Promise.all(
      order.map(async (svc) => {
        const runDir = await ctx.agents.listen(stack.id, svc);
        agents.set(svc, {
          runDir,
          identity: await ctx.agents.identityOf(svc, spec.services[svc] as ResolvedService),
        });
      }),
    );
  }
  const containerIds: Record<string, string> = {};
  const clockDir = clockDirFor(ctx, stack);
  const secrets = await writeStackSecrets(ctx.options.stateDir, stack.id, spec);
  const fileSeeds: Record<string, string> = {};
  for (const [vol, d] of Object.entries(spec.datasets))
    if (d.seed?.type === "file" && stack.datasets[vol])
      fileSeeds[vol] = await seedFileSource(ctx.storage.datasetPath(stack.datasets[vol]), d.seed);
  const create = async (svc: string) => {
    const agent = agents.get(svc);
    containerIds[svc] = await ctx.runtime.createContainer(
      containerSpecFor({
        stack: { ...stack, egress: spec.egress },
        service: svc,
        s: spec.services[svc] as ResolvedService,
        networkName,
        containerIds,
        labels: (extra) => ctx.labels(extra),
        agent: agent && agentBinary ? { binary: agentBinary, ...agent } : null,
        clockDir,
        secrets: secrets[svc],
        fileSeeds,
        gpus: { assigned: stack.gpus?.[svc] ?? null, mode: gpuMode },
        proxyEnv: egressPolicyOf(stack) ? proxyEnvironment(spec) : null,
      }),
    );
  };
  // Every container is created up front (creation needs no ordering), in parallel; services that
  // join another service's namespaces follow, once it exists. Starting goes by depends_on.
  const joinsAnother = (s: ResolvedService) =>
    [s.network_mode, s.pid_mode, s.ipc_mode].some((m) => m?.startsWith("service:"));
  await Promise.all(order.filter((svc) => !joinsAnother(spec.services[svc] as ResolvedService)).map(create));
  for (const svc of order) if (!containerIds[svc]) await create(svc);
  stack.containers = containerIds;
  await ctx.store.putStack(stack);
  for (const [svc, agent] of agents)
    ctx.agents.register(stack, svc, containerIds[svc] as string, agent.identity);

  const restore = hooks.restore;
  const startOne = restore
    ? async (svc: string, id: string) => {
        const restoring = restore(svc, id);
        if (!restoring) return ctx.runtime.startContainer(id);
        await restoring;
        // Its restored agent redials by itself (backing off at most 160 ms): commands go through it.
        if (agents.has(svc)) await ctx.agents.waitConnected(stack.id, svc, 5000);
      }
    : undefined;
  const health = await startInOrder(ctx, stack, hooks.onStarted, hooks.settleMs, startOne);
  await assertAgentNotRoot(ctx, stack);
  // Read once every service is healthy: an entrypoint script has exec'd its program by then.
  const clock = await clockStartEvidence(ctx, stack);
  const evidence: Record<string, ServiceStartEvidence> = {};
  await Promise.all(
    order.map(async (svc) => {
      const state = await ctx.runtime.inspectContainer(containerIds[svc] as string);
      evidence[svc] = {
        container_id: state.id,
        image: spec.services[svc]?.image_pinned ?? spec.services[svc]?.image ?? "",
        caps: await readBackCaps(state),
        ...(spec.services[svc]?.gpus
          ? {
              gpus: {
                assigned: stack.gpus?.[svc] ?? null,
                mode: gpuMode,
                seen: await gpusSeen(ctx, containerIds[svc] as string),
              },
            }
          : {}),
      };
    }),
  );
  stack.status = "running";
  delete stack.restoreVersionId;
  await ctx.store.putStack(stack);
  return { evidence, ms: Math.round(performance.now() - started), health, clock };
}

/** What `nvidia-smi -L` in the container lists (one line a GPU); null where it cannot be run. */
async function gpusSeen(ctx: StackContext, containerId: string): Promise<string[] | null> {
  const r = await ctx
    .runIn(containerId, { command: ["nvidia-smi", "-L"], timeoutMs: 15_000 })
    .catch(() => null);
  if (r?.exitCode !== 0) return null;
  return r.stdout
    .toString()
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean)
    .slice(0, 64);
}
