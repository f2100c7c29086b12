/**
 * The egress probe of a stack, from inside its network (egress-probe.ts does the probing). A stack
 * whose egress is deny must prove blocked, over IPv4 and IPv6, or the phase fails.
 */
import { DenvError, type ResolvedSpec } from "@denv/protocol";
import {
  bridgeIpv4,
  bridgeLinkLocal,
  type EgressEvidence,
  hostAddress,
  probeEgress,
} from "./egress-probe.ts";
import type { StackContext } from "./stack-context.ts";

/**
 * The service to probe from: the first to start among those on the agent's network (any
 * container on that network sees what the agent sees), so the probe runs early in a fork.
 */
export function probeService(spec: ResolvedSpec): string | undefined {
  const agent = spec.agent?.service ?? spec.start_order[spec.start_order.length - 1];
  const agentNet = agent ? Object.keys(spec.services[agent]?.networks ?? {})[0] : undefined;
  return (
    spec.start_order.find((s) => agentNet !== undefined && spec.services[s]?.networks[agentNet]) ?? agent
  );
}

export async function probeStack(ctx: StackContext, stackId: string): Promise<EgressEvidence> {
  const stack = ctx.stack(stackId);
  const svc = probeService(stack.spec);
  const id = svc ? stack.containers[svc] : undefined;
  if (!id) throw new DenvError("conflict", `environment ${stack.name} has no container to probe from`);
  const st = await ctx.runtime.inspectContainer(id);
  const first = Object.values(st.addresses)[0];
  const gateway = first?.gateway;
  const host = ctx.options.egressProbeTarget ? null : await hostAddress();
  const target =
    ctx.options.egressProbeTarget ?? (host ? { host, port: 9 } : gateway ? { host: gateway, port: 9 } : null);
  if (!target) {
    // No address to aim at (a host with no routes, a service with network_mode none): only
    // loopback is there, so nothing can leave.
    return { result: "blocked", target: "none", outcome: "unreachable", ms: 0 };
  }
  const linkLocal = first?.networkId ? await bridgeLinkLocal(first.networkId) : null;
  const [probed, bridge] = await Promise.all([
    probeEgress(st.pid, target, first?.ip || undefined, linkLocal),
    first?.networkId ? bridgeIpv4(first.networkId) : Promise.resolve(null),
  ]);
  // The connect proves the way off the subnet closed; the bridge's addresses prove the host is not
  // on the link either (a host address there would answer whatever the routes say).
  const onLink = bridge?.length ?? 0;
  const evidence: EgressEvidence = {
    ...probed,
    ...(bridge ? { host_addresses_on_bridge: onLink } : {}),
    ...(onLink > 0 ? { result: "reachable" as const } : {}),
    from: svc as string,
  };
  if (stack.spec.egress === "deny" && evidence.result !== "blocked") {
    const reached = evidence.outcome === "connected" || evidence.outcome === "refused";
    throw new DenvError(
      "forbidden",
      onLink > 0
        ? `egress is deny but this host holds ${bridge?.join(", ")} on ${svc}'s network`
        : `egress is deny but the probe from ${svc} reached ${reached ? evidence.target : evidence.ipv6?.target}`,
      { details: { egress: evidence } },
    );
  }
  return evidence;
}
