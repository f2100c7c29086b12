/**
 * Settles the engine and the storage against denvd's records, when denvd opens: stacks caught
 * mid-operation (creating or destroying) are removed entirely; labelled objects of unknown stacks
 * are removed; datasets and snapshots no record holds are destroyed; recorded stacks whose
 * containers are gone are marked lost, stopped ones are started again, and their agents (which
 * keep running across a denvd restart) are listened for and registered again.
 */
import { LABEL } from "./labels.ts";
import type { ObjectSummary } from "./runtime/container-runtime.ts";
import type { StackContext } from "./stack-context.ts";
import { teardownStack } from "./stack-teardown.ts";

export interface ReconcileReport {
  removed: string[];
  lost: string[];
  /** What could not be settled (logged, and left for the next open). */
  failed: string[];
}

export async function reconcile(ctx: StackContext): Promise<ReconcileReport> {
  const { store, runtime, storage } = ctx;
  const report: ReconcileReport = { removed: [], lost: [], failed: [] };
  // One record or object that cannot be settled is logged and left: it never keeps denvd from
  // coming up (a host that cannot start is lost to every stack on it).
  const attempt = async (what: string, fn: () => Promise<void>) => {
    try {
      await fn();
    } catch (err) {
      report.failed.push(what);
      ctx.log("Could not reconcile", { what, error: (err as Error).message });
    }
  };
  const remove = (what: string, fn: () => Promise<unknown>) =>
    attempt(what, async () => {
      await fn();
      report.removed.push(what);
    });

  for (const stack of store.stacks()) {
    if (stack.status === "creating" || stack.status === "destroying")
      await remove(stack.id, () => teardownStack(ctx, stack));
  }
  const owner = { [LABEL.owner]: store.ownerId };
  const known = new Set(store.stacks().map((s) => s.id));
  // Labelled objects of stacks no record holds.
  const kinds: [string, () => Promise<ObjectSummary[]>, (o: ObjectSummary) => Promise<void>][] = [
    ["containers", () => runtime.listContainers(owner), (o) => runtime.removeContainer(o.id)],
    ["volumes", () => runtime.listVolumes(owner), (o) => runtime.removeVolume(o.name)],
    ["networks", () => runtime.listNetworks(owner), (o) => runtime.removeNetwork(o.id)],
  ];
  for (const [kind, list, removeObject] of kinds) {
    await attempt(kind, async () => {
      for (const o of await list())
        if (!known.has(o.labels[LABEL.stack] ?? "")) await remove(o.name, () => removeObject(o));
    });
  }
  const datasets = new Set(store.stacks().flatMap((s) => Object.values(s.datasets)));
  await attempt("datasets", async () => {
    for (const ds of await storage.listDatasets())
      if (!datasets.has(ds)) await remove(ds, () => storage.destroyDataset(ds));
  });
  const snaps = new Set(store.versions().flatMap((v) => Object.values(v.snapshots)));
  await attempt("snapshots", async () => {
    for (const snap of await storage.listSnapshots())
      if (!snaps.has(snap)) await remove(snap, () => storage.destroySnapshot(snap));
  });
  for (const stack of store.stacks()) {
    if (stack.status !== "running") continue;
    await attempt(stack.id, async () => {
      const states = await Promise.all(
        Object.values(stack.containers).map((id) => runtime.inspectContainer(id).catch(() => null)),
      );
      if (states.some((st) => st === null)) {
        stack.status = "lost";
        await store.putStack(stack);
        report.lost.push(stack.id);
      } else {
        for (const st of states) if (st && !st.running) await runtime.startContainer(st.id);
      }
    });
  }
  if (ctx.options.agentBinary) {
    for (const stack of store.stacks()) {
      if (stack.status !== "running") continue;
      for (const [svc, id] of Object.entries(stack.containers)) {
        const s = stack.spec.services[svc];
        await attempt(`${stack.id}/${svc}`, async () => {
          await ctx.agents.listen(stack.id, svc);
          if (s) ctx.agents.register(stack, svc, id, await ctx.agents.identityOf(svc, s));
        });
      }
    }
  }
  const { removed, lost, failed } = report;
  if (removed.length || lost.length || failed.length) ctx.log("Reconciled", { removed, lost, failed });
  return report;
}
