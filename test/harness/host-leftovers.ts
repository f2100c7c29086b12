/**
 * What a killed denvd may leave, as the crash tests check it after a restart: engine objects and
 * datasets no record holds, and services left frozen through their cgroups.
 */
import assert from "node:assert/strict";
import { findFreezer, freezerIsFrozen, LABEL } from "@denv/denvd";
import type { TestHost } from "./test-host.ts";

/** Nothing with the host's owner label that no recorded stack holds; no dataset no record holds. */
export async function assertNoOrphans(h: TestHost): Promise<void> {
  const stacks = h.denvd.stacks();
  const known = new Set(stacks.map((s) => s.id));
  const owner = { [LABEL.owner]: h.denvd.ownerId };
  for (const list of [
    await h.denvd.runtime.listContainers(owner),
    await h.denvd.runtime.listVolumes(owner),
    await h.denvd.runtime.listNetworks(owner),
  ])
    for (const o of list) assert.ok(known.has(o.labels[LABEL.stack] ?? ""), `orphan ${o.name}`);
  const held = new Set(stacks.flatMap((s) => Object.values(s.datasets)));
  for (const ds of await h.storage.listDatasets()) assert.ok(held.has(ds), `orphan dataset ${ds}`);
}

/** Services frozen through their cgroups (a snapshot's window), which the engine does not report. */
export async function frozenServices(h: TestHost, stackId: string): Promise<string[]> {
  const out: string[] = [];
  for (const [svc, id] of Object.entries(h.denvd.stack(stackId).containers)) {
    const st = await h.denvd.runtime.inspectContainer(id);
    const f = await findFreezer(st.pid, st.id);
    assert.ok(f, `${svc}'s freezer is reachable on this host`);
    if (await freezerIsFrozen(f)) out.push(svc);
  }
  return out.sort();
}
