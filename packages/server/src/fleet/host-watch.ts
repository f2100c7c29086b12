/**
 * A host not seen for its deadline (not connected here, and no heartbeat written for that long)
 * has its environments marked `lost`: the server never goes on saying `running` for what it cannot
 * reach. When the host comes back, its hello sets each status from what it holds (host-sync.ts),
 * so an environment whose stack survived is `running` again.
 *
 * Environments a deployment is working on are left to it, and each change is made only if the
 * status is still the one read.
 */

import { serverLog } from "../server-log.ts";
import { busyEnvironmentIds } from "../store/deployment-store.ts";
import { hostsUnseenSince, markHostEnvironmentsLost } from "../store/host-store.ts";
import type { Store } from "../store/open-store.ts";
import type { HostPresence } from "../targets/stack-lifecycle.ts";

export interface HostWatchOptions {
  /** How long a host may go unseen before its environments are lost (default 5 minutes). */
  lostAfterMs?: number;
  /** How often hosts are looked at (default 15 s). */
  everyMs?: number;
}

export const DEFAULT_HOST_LOST_AFTER_MS = 5 * 60_000;
const DEFAULT_EVERY_MS = 15_000;

/** Marks the environments of every host unseen for lostAfterMs `lost`; answers what changed. */
export async function markLostHosts(
  deps: { store: Store; hosts: Pick<HostPresence, "hostConnected"> },
  lostAfterMs: number,
  nowMs = Date.now(),
): Promise<string[]> {
  const { store, hosts } = deps;
  const cutoff = new Date(nowMs - lostAfterMs).toISOString();
  const unseen = (await hostsUnseenSince(store, cutoff)).filter((h) => !hosts.hostConnected(h.id));
  if (unseen.length === 0) return [];
  const busy = await busyEnvironmentIds(store);
  const changed: string[] = [];
  for (const h of unseen) {
    // The host's staleness is checked again in the same statement: a host whose hello came since
    // it was read (its last_seen written before its statuses are synced) is not marked over it.
    const n = await markHostEnvironmentsLost(store, h.id, cutoff, busy);
    if (n > 0) changed.push(`${h.name}: ${n} environment(s) lost (last seen ${h.last_seen ?? "never"})`);
  }
  return changed;
}

/** Looks at the hosts every everyMs until stopped. */
export function startHostWatch(
  deps: { store: Store; hosts: HostPresence },
  options: HostWatchOptions = {},
): { stop(): void } {
  const lostAfterMs = options.lostAfterMs ?? DEFAULT_HOST_LOST_AFTER_MS;
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    markLostHosts(deps, lostAfterMs)
      .then((changed) => {
        if (changed.length) serverLog().warn({ changed }, "hosts unseen past their deadline");
      })
      .catch(() => {})
      .finally(() => {
        running = false;
      });
  }, options.everyMs ?? DEFAULT_EVERY_MS);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
