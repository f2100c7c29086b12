/**
 * An environment's diff: what the agent changed in its volumes (and its PostgreSQL services' rows)
 * since a version — by default the one it was forked from. The host holding the environment
 * compares its datasets with the version's snapshots, so the version must be on that host.
 */
import { DenvError } from "@denv/protocol";
import { versionHolders } from "../fleet/replication.ts";
import type { Store } from "../store/open-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import { resolveVersionRef } from "../store/version-store.ts";
import type { DiffOutcome, StackLifecycle } from "../targets/stack-lifecycle.ts";
import { requireHostsTarget } from "../targets/target.ts";

/** Statuses whose stack is on its host with its datasets. */
const HAS_DATASETS = new Set(["running", "frozen", "stopped"]);

/** The diff of environment `e` against `against` (a version ref; default: the one it came from). */
export async function diffEnvironment(
  deps: { store: Store; stacks: StackLifecycle },
  teamId: string,
  e: EnvironmentsTable,
  options: { against?: string | undefined; maxEntries?: number | undefined },
): Promise<DiffOutcome> {
  requireHostsTarget(e, "a diff (of its datasets)");
  if (!HAS_DATASETS.has(e.status) || !e.host_id || !e.stack_id)
    throw new DenvError("conflict", `environment ${e.name} is ${e.status}: it has no volumes to compare`);
  const ref = options.against ?? e.parent_version_id ?? e.current_version_id;
  if (!ref)
    throw new DenvError(
      "invalid_argument",
      `environment ${e.name} was not forked from a version and has no snapshot yet: name one with ?against=`,
    );
  const version = await resolveVersionRef(deps.store, teamId, ref);
  if (!(await versionHolders(deps.store, version)).includes(e.host_id))
    throw new DenvError(
      "conflict",
      `version ${version.id} is not on host ${e.host_id}, where ${e.name} runs: copy it there first (denv version replicate ${version.id} --to HOST)`,
    );
  return deps.stacks.diff(
    { hostId: e.host_id, stackId: e.stack_id },
    { against: version.id, ...(options.maxEntries ? { maxEntries: options.maxEntries } : {}) },
  );
}
