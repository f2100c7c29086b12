/**
 * Removing a stack: its containers, volumes and networks (found by record and by label), its
 * agents, its datasets, and last its record, so that a teardown cut short is found again.
 */
import { DenvError } from "@denv/protocol";
import { dropClock } from "../clock/stack-clock.ts";
import type { StackRecord } from "../host/state-store.ts";
import { isSafeId } from "../storage/storage-driver.ts";
import { LABEL } from "./labels.ts";
import { type StackContext, sleep } from "./stack-context.ts";
import { removeStackSecrets } from "./stack-secrets.ts";

/**
 * A create the engine was still finishing when its caller died can surface a moment later and
 * hold a volume or network: such a conflict sends the removal round again, a few times.
 */
export async function removeStackObjects(ctx: StackContext, stack: StackRecord): Promise<void> {
  const labels = { [LABEL.owner]: ctx.store.ownerId, [LABEL.stack]: stack.id };
  for (let attempt = 1; ; attempt++) {
    try {
      const byLabel = await ctx.runtime.listContainers(labels);
      const ids = new Set([...Object.values(stack.containers), ...byLabel.map((c) => c.id)]);
      await Promise.all([...ids].map((id) => ctx.runtime.removeContainer(id)));
      const vols = await ctx.runtime.listVolumes(labels);
      await Promise.all(vols.map((v) => ctx.runtime.removeVolume(v.name)));
      for (const n of await ctx.runtime.listNetworks(labels)) await ctx.runtime.removeNetwork(n.id);
      return;
    } catch (err) {
      if (!(err instanceof DenvError && err.code === "conflict") || attempt >= 10) throw err;
      await sleep(200);
    }
  }
}

export async function teardownStack(ctx: StackContext, stack: StackRecord): Promise<void> {
  await removeStackObjects(ctx, stack);
  await ctx.agents.forget(stack);
  await ctx.egress.close(stack.id);
  for (const ds of Object.values(stack.datasets)) {
    // An id no driver accepts was never created (a record from before names were checked).
    if (isSafeId(ds)) await ctx.storage.destroyDataset(ds);
  }
  await dropClock(ctx, stack.id);
  await removeStackSecrets(ctx.options.stateDir, stack.id);
  await ctx.store.deleteStack(stack.id);
  ctx.log("Destroyed stack", { stack: stack.id });
}
