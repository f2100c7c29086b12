/**
 * Settles the engine and the storage against denvd's records, when denvd opens:
 *
 * - operations a kill cut off (op-journal.ts) are finished or undone: a rollback or destroy is
 *   finished, and its outcome written down for the server's re-send; a fork or prepare has the
 *   stack it made removed, a snapshot the version it made, and the server's re-send runs it anew;
 * - stacks caught mid-operation (creating or destroying) are removed entirely, stacks caught mid
 *   rollback (restoring) are restored;
 * - labelled objects of unknown stacks are removed; datasets and snapshots no record holds are
 *   destroyed;
 * - recorded stacks whose containers are gone are marked lost, stopped ones are started again,
 *   paused ones are thawed unless verify recorded them frozen (a snapshot's frozen window a kill
 *   cut off must not outlive the process), and their agents (which keep running across a denvd
 *   restart) are listened for and registered again.
 */

import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { operationEntry } from "@denv/protocol";
import { egressPolicyOf, parsedPolicy } from "../egress/egress-gateways.ts";
import type { ObjectSummary } from "../runtime/container-runtime.ts";
import { removeLive } from "../snapshots/live-capture.ts";
import { discardLive, liveIncomingDir } from "../snapshots/live-transfers.ts";
import { LABEL } from "../stack/labels.ts";
import type { StackContext } from "../stack/stack-context.ts";
import { deleteVersion, destroyStack, rollbackStack } from "../stack/stack-lifecycle.ts";
import { teardownStack } from "../stack/stack-teardown.ts";
import type { OpEntry, OpJournal } from "./op-journal.ts";

export interface ReconcileReport {
  removed: string[];
  lost: string[];
  /** Containers a cut-off operation left paused, thawed. */
  thawed: string[];
  /** Operations a kill cut off: each with what was done about it. */
  interrupted: string[];
  /** What could not be settled (logged, and left for the next open). */
  failed: string[];
}

export async function reconcile(ctx: StackContext, journal: OpJournal): Promise<ReconcileReport> {
  const { store, runtime, storage } = ctx;
  const report: ReconcileReport = { removed: [], lost: [], thawed: [], interrupted: [], failed: [] };
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

  for (const entry of await journal.running())
    await attempt(`${entry.method} ${entry.opId}`, async () => {
      report.interrupted.push(
        `${entry.method} ${entry.opId}: ${await settleInterrupted(ctx, journal, entry)}`,
      );
    });
  for (const stack of store.stacks()) {
    if (stack.status === "creating" || stack.status === "destroying")
      await remove(stack.id, () => teardownStack(ctx, stack));
    else if (stack.status === "restoring" && stack.restoreVersionId) {
      const versionId = stack.restoreVersionId;
      await attempt(stack.id, async () => {
        await rollbackStack(ctx, stack.id, versionId).catch(async (err) => {
          await store.putStack({ ...(store.stack(stack.id) ?? stack), status: "failed" });
          throw err;
        });
      });
    }
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
  // Replicas a kill cut off mid-transfer: never adopted, so never a version here.
  await attempt("received", async () => {
    for (const snap of await storage.listReceived()) await remove(snap, () => storage.discardReceived(snap));
  });
  const snaps = new Set(store.versions().flatMap((v) => Object.values(v.snapshots)));
  await attempt("snapshots", async () => {
    for (const snap of await storage.listSnapshots())
      if (!snaps.has(snap)) await remove(snap, () => storage.destroySnapshot(snap));
  });
  // A live snapshot a kill cut off before its version was recorded: its process images.
  const versions = new Set(store.versions().map((v) => v.id));
  await attempt("process images", async () => {
    const dirs = await readdir(join(ctx.options.stateDir, "live")).catch(() => []);
    for (const id of dirs) if (!versions.has(id)) await remove(`live/${id}`, () => removeLive(ctx, id));
    // Another host's process images a kill cut off before their version was adopted.
    for (const id of await readdir(liveIncomingDir(ctx)).catch(() => []))
      await remove(`live-incoming/${id}`, () => discardLive(ctx, id));
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
        return;
      }
      for (const st of states) if (st && !st.running) await runtime.startContainer(st.id);
      // The record follows the engine: a service recorded frozen that is not paused is not frozen
      // (verify recorded it, and was cut off before it paused it).
      const frozen = new Set(stack.frozen ?? []);
      for (const [svc, id] of Object.entries(stack.containers)) {
        const st = states.find((x) => x?.id === id);
        if (!st?.paused) {
          frozen.delete(svc);
          // A kill inside a snapshot's or digest's window leaves its freeze, which the engine
          // does not know of.
          if (await runtime.thawContainer(id)) report.thawed.push(`${stack.id}/${svc}`);
        } else if (!frozen.has(svc)) {
          await runtime.unpauseContainer(id);
          report.thawed.push(`${stack.id}/${svc}`);
        }
      }
      if (frozen.size !== (stack.frozen ?? []).length) {
        stack.frozen = [...frozen];
        if (!stack.frozen.length) delete stack.frozen;
        await store.putStack(stack);
      }
    });
  }
  if (ctx.options.agentBinary) {
    for (const stack of store.stacks()) {
      // A paused stack's agents dial in when it resumes: they are listened for as a running one's.
      if (stack.status !== "running" && stack.status !== "paused") continue;
      for (const [svc, id] of Object.entries(stack.containers)) {
        const s = stack.spec.services[svc];
        await attempt(`${stack.id}/${svc}`, async () => {
          await ctx.agents.listen(stack.id, svc);
          if (s) ctx.agents.register(stack, svc, id, await ctx.agents.identityOf(svc, s));
        });
      }
    }
  }
  // Each running stack's egress gateway finds its socket again: its relay dials per connection.
  for (const stack of store.stacks()) {
    if (stack.status !== "running" && stack.status !== "paused") continue;
    const policy = egressPolicyOf(stack);
    if (policy)
      await attempt(`${stack.id}/egress`, () => ctx.egress.open(stack, parsedPolicy(policy)).then(() => {}));
  }
  const { removed, lost, thawed, interrupted, failed } = report;
  if (removed.length || lost.length || thawed.length || interrupted.length || failed.length)
    ctx.log("Reconciled", { removed, lost, thawed, interrupted, failed });
  return report;
}

/**
 * One operation a kill cut off: finished when it can only go forward (a rollback has already
 * replaced the stack's data; a destroy, a version's deletion), its outcome written for the
 * server's re-send; otherwise what it made is removed and the re-send runs it anew. Says what it did.
 */
async function settleInterrupted(ctx: StackContext, journal: OpJournal, e: OpEntry): Promise<string> {
  const { store } = ctx;
  const p = e.params as {
    stack_id?: string;
    version_id?: string;
    operation_id?: string;
    new_stack_id?: string;
    new_version_id?: string;
  };
  const finish = async (run: () => Promise<unknown>): Promise<string> => {
    try {
      await journal.finish(e, { ok: true, result: (await run()) ?? {} });
      return "finished";
    } catch (err) {
      const code = (err as { code?: string }).code ?? "internal";
      await journal.finish(e, {
        ok: false,
        error: {
          code,
          message: `denvd restarted during ${e.method}, and finishing it failed: ${(err as Error).message}`,
        },
      });
      return "failed";
    }
  };
  switch (operationEntry(e.method).afterCrash) {
    case "finish": {
      if (e.method === "destroy") return finish(() => destroyStack(ctx, p.stack_id ?? ""));
      if (e.method === "delete_version") return finish(() => deleteVersion(ctx, p.version_id ?? ""));
      // rollback
      const stack = p.stack_id ? store.stack(p.stack_id) : undefined;
      if (!stack || !p.version_id) return finish(async () => ({}));
      const versionId = p.version_id;
      return finish(async () => {
        try {
          return await rollbackStack(ctx, stack.id, versionId);
        } catch (err) {
          const now = store.stack(stack.id);
          if (now) await store.putStack({ ...now, status: "failed" });
          throw err;
        }
      });
    }
    case "remove_stack_made": {
      // The stack it made: the id the server chose, or its operation id and made after it began.
      for (const s of store.stacks())
        if (s.id === p.new_stack_id || (s.operationId === p.operation_id && s.createdAt >= e.startedAt))
          await teardownStack(ctx, s);
      await journal.undone(e);
      return "undone";
    }
    case "remove_version_made": {
      const made = store
        .versions()
        .filter((v) => v.id === p.new_version_id || (v.stackId === p.stack_id && v.createdAt >= e.startedAt));
      for (const v of made) await deleteVersion(ctx, v.id);
      const stack = p.stack_id ? store.stack(p.stack_id) : undefined;
      if (stack && made.some((v) => v.id === stack.versionId)) {
        stack.versionId = e.stackVersionId ?? null;
        await store.putStack(stack);
      }
      await journal.undone(e);
      return "undone";
    }
    default:
      await journal.undone(e);
      return "undone";
  }
}
