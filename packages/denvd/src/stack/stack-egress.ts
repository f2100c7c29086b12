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
  loopbackOnly,
  probeEgress,
} from "./egress-probe.ts";
import type { StackContext } from "./stack-context.ts";

/**
 * The service to probe from: the first to start among those on the agent's network (any
 * container on that network sees what the agent sees), so the probe runs early in a fork.
 */
export function probeService(spec: ResolvedSpec): string | undefined {
  return probeServices(spec)[0];
}

/** Every service the probe may run from, best first: those on the agent's network, then the agent. */
export function probeServices(spec: ResolvedSpec): string[] {
  const agent = spec.agent?.service ?? spec.start_order[spec.start_order.length - 1];
  const agentNet = agent ? Object.keys(spec.services[agent]?.networks ?? {})[0] : undefined;
  const onNet = spec.start_order.filter(
    (s) => agentNet !== undefined && spec.services[s]?.networks[agentNet],
  );
  return [...new Set([...onNet, ...(agent ? [agent] : [])])];
}

export async function probeStack(ctx: StackContext, stackId: string): Promise<EgressEvidence> {
  const stack = ctx.stack(stackId);
  // From the first that runs: a one-shot service (a seed job) that has done its work and exited
  // has no network namespace left; one that exits while probed gives way to the next.
  const exited: string[] = [];
  for (const svc of probeServices(stack.spec)) {
    const cid = stack.containers[svc];
    if (!cid) continue;
    const st = await ctx.runtime.inspectContainer(cid);
    if (!st.running || st.pid <= 0) {
      exited.push(`${svc} exited with code ${st.exitCode}`);
      continue;
    }
    try {
      return await probeFrom(ctx, stack, svc, st);
    } catch (err) {
      const now = await ctx.runtime.inspectContainer(cid).catch(() => null);
      if (now?.running && now.pid === st.pid) throw err;
    }
  }
  // Named, so a deploy whose service died after its start says which (the console shows it).
  throw new DenvError(
    "conflict",
    `environment ${stack.name} has no running container to probe from${exited.length ? ` (${exited.join(", ")})` : ""}`,
  );
}

async function probeFrom(
  ctx: StackContext,
  stack: ReturnType<StackContext["stack"]>,
  svc: string,
  st: Awaited<ReturnType<StackContext["runtime"]["inspectContainer"]>>,
): Promise<EgressEvidence> {
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
  // The engine lists a service on no network (network_mode: none, an isolated sandbox) under its
  // "none" network with no address: there is no bridge to read (asking `ip` costs a process and
  // answers nothing), and a namespace holding loopback alone is read from the host, not entered.
  const bridgeId = first?.ip ? first.networkId : "";
  const linkLocal = bridgeId ? await bridgeLinkLocal(bridgeId) : null;
  const isolated = bridgeId ? null : await loopbackOnly(st.pid, target);
  const [probed, bridge] = await Promise.all([
    isolated ?? probeEgress(st.pid, target, first?.ip || undefined, linkLocal),
    bridgeId ? bridgeIpv4(bridgeId) : Promise.resolve(null),
  ]);
  // The connect proves the way off the subnet closed; the bridge's addresses prove the host is not
  // on the link either (a host address there would answer whatever the routes say).
  const onLink = bridge?.length ?? 0;
  const evidence: EgressEvidence = {
    ...probed,
    ...(bridge ? { host_addresses_on_bridge: onLink } : {}),
    ...(onLink > 0 ? { result: "reachable" as const } : {}),
    from: svc,
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
