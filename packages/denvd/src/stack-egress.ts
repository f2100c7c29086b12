/**
 * The egress probe of a stack, from inside its network (egress-probe.ts does the probing). A stack
 * whose egress is deny must prove blocked, over IPv4 and IPv6, or the phase fails.
 */
import { DenvError, type ResolvedSpec } from "@denv/protocol";
import { bridgeLinkLocal, type EgressEvidence, probeEgress } from "./egress-probe.ts";
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
  const target = ctx.options.egressProbeTarget ?? (gateway ? { host: gateway, port: 9 } : null);
  if (!target) {
    // network_mode none: no interface but loopback, so nothing can leave.
    return { result: "blocked", target: "none", outcome: "unreachable", ms: 0 };
  }
  const linkLocal = first?.networkId ? await bridgeLinkLocal(first.networkId) : null;
  const evidence = {
    ...(await probeEgress(st.pid, target, first?.ip || undefined, linkLocal)),
    from: svc as string,
  };
  if (stack.spec.egress === "deny" && evidence.result !== "blocked") {
    const reached = evidence.outcome === "connected" || evidence.outcome === "refused";
    throw new DenvError(
      "forbidden",
      `egress is deny but the probe from ${svc} reached ${reached ? evidence.target : evidence.ipv6?.target}`,
      { details: { egress: evidence } },
    );
  }
  return evidence;
}
