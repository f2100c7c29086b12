/**
 * Each time a host says hello (a restarted denvd has just reconciled: thawed what a kill left
 * paused, found stacks whose containers are gone), the server reads what the host holds and sets
 * each of its environments' status to match: a stack the host no longer has, or whose containers
 * are gone, is `lost`; one verify froze is `frozen`; a failed restore is `failed`; otherwise
 * `running`. The server never goes on saying `running` for what is not.
 *
 * Environments a deployment is working on are left to it (it sets their status as it ends), and
 * each change is made only if the status is still the one read (a deployment that began since
 * wins).
 */

import { busyEnvironmentIds } from "../store/deployment-store.ts";
import { changeEnvironmentStatus, hostSyncableEnvironments } from "../store/environment-store.ts";
import type { DeploymentRunner } from "./deployment-runner.ts";

/** What an environment's status is, given its stack on the host (undefined: the host has none). */
export function statusOnHost(
  stack: { status: string; frozen?: string[] | undefined } | undefined,
): "lost" | "frozen" | "running" | "failed" | null {
  if (!stack) return "lost";
  if (stack.status === "running") return (stack.frozen ?? []).length > 0 ? "frozen" : "running";
  if (stack.status === "lost" || stack.status === "failed") return stack.status;
  // creating, restoring, destroying: under way on the host, and told by the operation doing it.
  return null;
}

/** Matches the host's environments' statuses to what it holds; returns what changed. */
export async function syncHostStatuses(runner: DeploymentRunner, hostId: string): Promise<string[]> {
  const { store } = runner;
  const stacks = await runner.stacks.hostStacks(hostId, { waitForHostMs: 0 });
  const byId = new Map(stacks.map((s) => [s.id, s]));
  const envs = await hostSyncableEnvironments(store, hostId);
  const busy = new Set(await busyEnvironmentIds(store));
  const changed: string[] = [];
  for (const env of envs) {
    if (busy.has(env.id)) continue;
    const want = statusOnHost(byId.get(env.stack_id as string));
    if (!want || want === env.status) continue;
    if (await changeEnvironmentStatus(store, env.id, env.status, want))
      changed.push(`${env.name}: ${env.status} → ${want}`);
  }
  return changed;
}
