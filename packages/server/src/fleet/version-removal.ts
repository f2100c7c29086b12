/**
 * Removing versions: one nothing uses (its snapshots on every host holding them, or at the hosted
 * provider that made it, then its record), and retention (each live environment's newest `keep`
 * kept, the rest nothing uses removed, with the images only they pinned). The routes of versions
 * and projects call these; a host away deletes its copy when it is next connected.
 */
import { DenvError } from "@denv/protocol";
import { removeUnusedBuiltImages } from "../deployments/built-images.ts";
import { liveEnvironmentIds } from "../store/environment-store.ts";
import { findProject } from "../store/project-store.ts";
import type { VersionsTable } from "../store/schema.ts";
import { deleteVersionCopy, deleteVersionRow, teamVersions, versionUsers } from "../store/version-store.ts";
import { type HostedDeps, hostedTargetNamed } from "../targets/hosted-targets.ts";
import type { StackLifecycle } from "../targets/stack-lifecycle.ts";
import { deleteLeftoverCopies, leaveCopy, versionHolders } from "./replication.ts";

/** What removing versions reaches: the store, the hosts' lifecycle, and the hosted providers. */
export interface VersionRemovalDeps extends HostedDeps {
  stacks: StackLifecycle;
}

/**
 * Deletes a version nothing uses: its snapshots on each host holding them, then its record.
 * Answers the hosts that were away: each deletes its copy when it is next connected.
 */
export async function removeVersion(deps: VersionRemovalDeps, v: VersionsTable): Promise<string[]> {
  const { store, stacks } = deps;
  const users = await versionUsers(store, v.id);
  if (users.length > 0)
    throw new DenvError("conflict", `version ${v.id} is in use: ${users.join("; ")}`, {
      details: { in_use: users },
    });
  if (!v.host_id) {
    // At a hosted provider: its snapshot there goes first, so none is left behind unrecorded.
    const target = await hostedTargetNamed(deps, v.team_id, v.target_id);
    if (!target)
      throw new DenvError(
        "conflict",
        `version ${v.id} is a snapshot at target ${v.target_id}, which is no longer connected: connect it again (denv cloud connect) to delete the snapshot there`,
      );
    await target.deleteSnapshot(v.snapshot_ref ?? "");
    await deleteVersionRow(store, v.id);
    return [];
  }
  // Every copy goes: the one it was taken on and its replicas, each by the host holding it. A host
  // away keeps its copy until it is next connected (deleteLeftoverCopies), then deletes it.
  const holders = await versionHolders(store, v);
  const away = holders.filter((h) => !stacks.hostConnected(h));
  for (const h of holders) {
    if (away.includes(h)) {
      await leaveCopy(store, v, h);
      continue;
    }
    await stacks.deleteVersion(h, v.id);
    await deleteVersionCopy(store, v.id, h);
  }
  await deleteVersionRow(store, v.id);
  // A copy recorded while this ran (a replication finishing now) goes the same way.
  await deleteLeftoverCopies(store, stacks);
  return away;
}

/** What a retention run did, or would do with dryRun. */
export interface PruneOutcome {
  deleted: string[];
  kept: { id: string; reason: string }[];
  imagesRemoved: string[];
}

/**
 * Retention: keeps each live environment's newest `keep` versions and deletes the others nothing
 * uses (a destroyed environment's included), then the images built for their projects that only
 * they pinned. With dryRun, only says which.
 */
export async function pruneVersions(
  deps: VersionRemovalDeps,
  teamId: string,
  options: { keep: number; project?: string | undefined; dryRun: boolean },
): Promise<PruneOutcome> {
  const { store } = deps;
  const project = options.project ? await findProject(store, teamId, options.project) : null;
  const rows = await teamVersions(store, teamId, project?.id);
  const seen = new Map<string, number>();
  const deleted: string[] = [];
  const kept: { id: string; reason: string }[] = [];
  const prunedProjects = new Set<string>();
  // A destroyed environment (a sandbox done with) keeps nothing by itself: only use keeps its versions.
  const live = await liveEnvironmentIds(store, teamId);
  for (const v of rows) {
    const n = (seen.get(v.environment_id) ?? 0) + 1;
    seen.set(v.environment_id, n);
    if (n <= options.keep && live.has(v.environment_id)) {
      kept.push({ id: v.id, reason: `one of its environment's ${options.keep} newest` });
      continue;
    }
    const users = await versionUsers(store, v.id);
    if (users.length > 0) {
      kept.push({ id: v.id, reason: users.join("; ") });
      continue;
    }
    if (!options.dryRun) {
      try {
        await removeVersion(deps, v);
      } catch (err) {
        kept.push({ id: v.id, reason: (err as Error).message });
        continue;
      }
    }
    deleted.push(v.id);
    prunedProjects.add(v.project_id);
  }
  // What those versions alone pinned: the images built for their projects.
  const imagesRemoved: string[] = [];
  if (!options.dryRun)
    for (const projectId of prunedProjects) {
      const r = await removeUnusedBuiltImages(store, deps.stacks, teamId, projectId);
      imagesRemoved.push(...r.removed);
    }
  return { deleted, kept, imagesRemoved };
}
