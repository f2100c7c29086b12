/**
 * Build contexts no project names any more expire on a timer, not only when their team next sends
 * a source: a team that uploads and walks away does not keep its bytes on the control plane.
 */
import { type BuildContexts, CONTEXT_GRACE_MS } from "./build-contexts.ts";
import { serverLog } from "./server-log.ts";
import type { Store } from "./store/open-store.ts";
import { teamProjects } from "./store/project-store.ts";

/** The digests a team's projects name (their sources' build contexts and bind mounts' files). */
export async function referencedContexts(store: Store, teamId: string): Promise<Set<string>> {
  return new Set(
    (await teamProjects(store, teamId)).flatMap((x) => [
      ...Object.values(JSON.parse(x.build_contexts_json ?? "{}") as Record<string, string>),
      ...Object.values(JSON.parse(x.bind_sources_json ?? "{}") as Record<string, { digest: string }>).map(
        (b) => b.digest,
      ),
    ]),
  );
}

export interface ContextExpiryOptions {
  /** How often the unreferenced are looked for (default 10 minutes). */
  everyMs?: number;
  /** How long an unreferenced context is kept after it was written (default CONTEXT_GRACE_MS). */
  graceMs?: number;
}

/** One pass over every team; returns what was removed. */
export async function expireContexts(
  store: Store,
  contexts: BuildContexts,
  graceMs = CONTEXT_GRACE_MS,
): Promise<string[]> {
  const removed: string[] = [];
  for (const teamId of await contexts.teams())
    removed.push(...(await contexts.prune(teamId, await referencedContexts(store, teamId), graceMs)));
  return removed;
}

/** Runs expireContexts every `everyMs` until stopped; a pass that fails is logged and retried next time. */
export function startContextExpiry(
  store: Store,
  contexts: BuildContexts,
  options: ContextExpiryOptions = {},
): { stop(): void } {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    expireContexts(store, contexts, options.graceMs)
      .catch((err) => serverLog().error({ error: String(err) }, "build context expiry failed"))
      .finally(() => {
        running = false;
      });
  }, options.everyMs ?? 600_000);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
