/**
 * The images a host built for a project's `build:` services, removed when nothing needs them any
 * more: after `denv version prune` deletes versions, and when the project is deleted. An image
 * stays while any version on that host pins it (another project's or team's too: a build with the
 * same key is found and reused, not rebuilt) and while a container uses it (the engine refuses).
 */

import { teamHosts } from "../store/host-store.ts";
import type { Store } from "../store/open-store.ts";
import { versionImages } from "../store/version-store.ts";
import type { StackLifecycle } from "../targets/stack-lifecycle.ts";

const IMAGE_ID = /^sha256:[0-9a-f]{64}$/;

export interface BuiltImagesRemoved {
  removed: string[];
  in_use: string[];
  /** Hosts of the team that were not connected: their images stay until the next prune. */
  unreachable: string[];
}

export async function removeUnusedBuiltImages(
  store: Store,
  hosts: StackLifecycle,
  teamId: string,
  projectId: string,
): Promise<BuiltImagesRemoved> {
  const pinned = new Map<string, Set<string>>();
  for (const v of await versionImages(store)) {
    if (!v.host_id) continue; // a hosted provider's snapshot: no image on a host
    const set = pinned.get(v.host_id) ?? new Set<string>();
    for (const ref of Object.values(JSON.parse(v.images_json) as Record<string, string>))
      if (IMAGE_ID.test(ref)) set.add(ref);
    pinned.set(v.host_id, set);
  }
  const out: BuiltImagesRemoved = { removed: [], in_use: [], unreachable: [] };
  for (const h of await teamHosts(store, teamId)) {
    if (!hosts.hostConnected(h.id)) {
      out.unreachable.push(h.id);
      continue;
    }
    const r = await hosts.removeBuiltImages(h.id, { teamId, projectId }, [...(pinned.get(h.id) ?? [])]);
    out.removed.push(...r.removed);
    out.in_use.push(...r.in_use);
  }
  return out;
}
