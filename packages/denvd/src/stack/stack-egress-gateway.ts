/**
 * A stack's egress gateway in its lifecycle (egress/egress-gateways.ts does the work): started
 * with the stack where its egress is a policy, and its policy changed while it runs.
 */
import { DenvError } from "@denv/protocol";
import { normalizeEgressPolicy } from "@denv/spec";
import { EGRESS_GATEWAY_SERVICE, egressPolicyOf, parsedPolicy } from "../egress/egress-gateways.ts";
import type { StackRecord } from "../host/state-store.ts";
import type { Labels } from "../runtime/container-runtime.ts";
import { LABEL } from "./labels.ts";
import type { StackContext } from "./stack-context.ts";

/**
 * The stack's egress gateway, where its egress is a policy: listened for, created on each of the
 * stack's networks, started. The gateway runs the agent binary alone, from the image of the
 * stack's first service (any local image does: nothing of it runs).
 */
export async function startEgressGateway(
  ctx: StackContext,
  stack: StackRecord,
  networks: string[],
  labels: Labels,
): Promise<void> {
  const policy = egressPolicyOf(stack);
  if (!policy) return;
  const agentBinary = ctx.options.agentBinary;
  if (!agentBinary)
    throw new DenvError(
      "not_supported",
      "an egress policy needs denv-agent on this host: its gateway runs it (scripts/setup-host.sh builds it)",
    );
  const first = stack.spec.services[stack.spec.start_order[0] ?? ""];
  if (!first) throw new DenvError("invalid_argument", "an egress policy needs at least one service");
  const relayDir = await ctx.egress.open(stack, parsedPolicy(policy));
  const id = await ctx.runtime.createContainer(
    ctx.egress.containerSpec({
      stack,
      image: first.image_pinned ?? first.image,
      agentBinary,
      relayDir,
      networks,
      labels: { ...labels, [LABEL.service]: EGRESS_GATEWAY_SERVICE },
    }),
  );
  await ctx.runtime.startContainer(id);
}

/**
 * A running (or paused) stack's policy changed: kept on its record (a restart of denvd keeps it),
 * applied to the next connection, and open connections it no longer allows are closed. A stack
 * deployed without a policy has no gateway to take one: it is refused, saying so.
 */
export async function setStackEgress(
  ctx: StackContext,
  stackId: string,
  policy: { allow: string[]; deny: string[] },
): Promise<{ closed: number }> {
  const stack = ctx.stack(stackId);
  if (!egressPolicyOf(stack))
    throw new DenvError(
      "conflict",
      `environment ${stack.name} was deployed with egress ${stack.spec.egress}: only an environment deployed with an egress policy has a gateway whose policy can change`,
    );
  const parsed = parsedPolicy(policy);
  const normalized = normalizeEgressPolicy(parsed);
  await ctx.store.putStack({ ...stack, egressPolicy: normalized });
  if (!ctx.egress.has(stack.id)) return { closed: 0 };
  return ctx.egress.setPolicy(stack.id, parsed);
}
