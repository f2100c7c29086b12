/**
 * GPUs in placement: a deployment whose services ask for GPUs goes only to a host whose inventory
 * has them free (held by no other live environment there), and is given particular GPUs by UUID,
 * service by service: a fork gets GPUs of its own, never a sibling's. With none free anywhere the
 * place phase fails naming the request and what each host has.
 */
import type { GpuInventory, ResolvedSpec } from "@denv/protocol";
import type { GpuRequest } from "@denv/spec";
import { gpuHoldingEnvironments } from "../store/environment-store.ts";
import type { Store } from "../store/open-store.ts";
import type { HostsTable } from "../store/schema.ts";

export type GpuNeed = Record<string, GpuRequest>;
/** Service → the GPU UUIDs it is given. */
export type GpuAssignment = Record<string, string[]>;

/** The services of a spec that ask for GPUs; null when none does. */
export function gpuNeedOf(spec: Pick<ResolvedSpec, "services">): GpuNeed | null {
  const need = Object.fromEntries(
    Object.entries(spec.services)
      .filter(([, s]) => s.gpus)
      .map(([name, s]) => [name, s.gpus as GpuRequest]),
  );
  return Object.keys(need).length ? need : null;
}

/** The request in words: `trainer: 1 GPU (nvidia, gpu)`. */
export function describeNeed(need: GpuNeed): string {
  return Object.entries(need)
    .map(([svc, r]) => {
      const what = r.device_ids
        ? `GPUs ${r.device_ids.join(", ")}`
        : r.count === "all" || r.count === null
          ? "every GPU of its host"
          : `${r.count} GPU${r.count === 1 ? "" : "s"}`;
      return `${svc}: ${what} (${r.driver}, ${r.capabilities.join("+")})`;
    })
    .join("; ");
}

/** A host's inventory in words: `2 GPUs (NVIDIA H200 ×2), 1 held, passed by nvidia`. */
export function describeInventory(inv: GpuInventory | null, held: number): string {
  if (!inv) return "reports no GPU inventory (denvd before GPU support)";
  if (inv.devices.length === 0) return `no GPUs${inv.note ? ` (${inv.note})` : ""}`;
  const models = new Map<string, number>();
  for (const d of inv.devices) models.set(d.model, (models.get(d.model) ?? 0) + 1);
  const list = [...models].map(([m, n]) => (n > 1 ? `${m} ×${n}` : m)).join(", ");
  const how =
    inv.mode === "none"
      ? `, none usable (${inv.note ?? "the engine cannot pass them"})`
      : `, passed by ${inv.mode}`;
  return `${inv.devices.length} GPU${inv.devices.length === 1 ? "" : "s"} (${list}), ${held} held${how}`;
}

export function hostInventory(h: Pick<HostsTable, "gpus_json">): GpuInventory | null {
  return h.gpus_json ? (JSON.parse(h.gpus_json) as GpuInventory) : null;
}

/**
 * The GPUs each host's live environments hold (their UUIDs), but those of `except` (an
 * environment being deployed again may take its own back).
 */
export async function heldGpus(store: Store, except: string | null): Promise<Map<string, Set<string>>> {
  const rows = await gpuHoldingEnvironments(store);
  const held = new Map<string, Set<string>>();
  for (const r of rows) {
    if (r.id === except || !r.host_id || !r.gpus_json) continue;
    const set = held.get(r.host_id) ?? new Set<string>();
    for (const ids of Object.values(JSON.parse(r.gpus_json) as GpuAssignment))
      for (const id of ids) set.add(id);
    held.set(r.host_id, set);
  }
  return held;
}

/** Particular GPUs of a host for each service, or why the host cannot give them. */
export function assignGpus(
  inv: GpuInventory | null,
  held: Set<string>,
  need: GpuNeed,
): { assignment: GpuAssignment } | { why: string } {
  if (!inv || inv.devices.length === 0 || inv.mode === "none")
    return { why: describeInventory(inv, held.size) };
  const taken = new Set(held);
  const assignment: GpuAssignment = {};
  for (const [svc, r] of Object.entries(need)) {
    const free = inv.devices.filter((d) => !taken.has(d.uuid));
    let chosen: string[];
    if (r.device_ids) {
      chosen = [];
      for (const id of r.device_ids) {
        const d = inv.devices.find((x) => x.uuid === id || String(x.index) === id);
        if (!d) return { why: `${svc} names GPU ${id}, which it does not have` };
        if (taken.has(d.uuid)) return { why: `${svc} names GPU ${id}, which another environment holds` };
        chosen.push(d.uuid);
      }
    } else if (r.count === "all" || r.count === null) {
      if (free.length !== inv.devices.length || free.length === 0)
        return {
          why: `${svc} asks for every GPU, and ${inv.devices.length - free.length} of ${inv.devices.length} are held`,
        };
      chosen = free.map((d) => d.uuid);
    } else {
      if (free.length < r.count) return { why: `${svc} asks for ${r.count}, and ${free.length} are free` };
      chosen = free.slice(0, r.count).map((d) => d.uuid);
    }
    for (const id of chosen) taken.add(id);
    assignment[svc] = chosen;
  }
  return { assignment };
}
