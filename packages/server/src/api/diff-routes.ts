/**
 * An environment's diff: what the agent changed in its volumes (and its PostgreSQL services' rows)
 * since a version — by default the one it was forked from. The host holding the environment
 * compares its datasets with the version's snapshots, so the version must be on that host.
 */
import { DenvError, diffEvidence } from "@denv/protocol";
import { z } from "zod";
import { versionHolders } from "../fleet/replication.ts";
import { resolveVersionRef } from "../store/version-store.ts";
import { requireHostsTarget } from "../targets/target.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { envOf } from "./environment-access.ts";

/** Statuses whose stack is on its host with its datasets. */
const HAS_DATASETS = new Set(["running", "frozen", "stopped"]);

export const diffRoutes: ApiRoute[] = [
  route({
    method: "get",
    path: "/v1/envs/{id}/diff",
    summary:
      "What changed in the environment's volumes since a version (default: the one it was forked from): paths created, modified and deleted, with what changed, sizes and, for text files, a unified diff; links and special files reported, never followed; bounded, with the bounds in the answer. PostgreSQL services add rows changed per table, marked approximate",
    query: z.object({
      against: z
        .string()
        .max(200)
        .optional()
        .describe(
          "The version to compare with (ver_…, PROJECT@ver_…); default: the one the environment came from",
        ),
      max_entries: z.coerce
        .number()
        .int()
        .min(1)
        .max(100_000)
        .optional()
        .describe("Changes listed (default 10,000); the rest are counted"),
    }),
    response: diffEvidence,
    auth: true,
    handler: async (c, { query }) => {
      const { deps, teamId } = c.var;
      const e = await envOf(c);
      requireHostsTarget(e, "a diff (of its datasets)");
      if (!HAS_DATASETS.has(e.status) || !e.host_id || !e.stack_id)
        throw new DenvError("conflict", `environment ${e.name} is ${e.status}: it has no volumes to compare`);
      const ref = query.against ?? e.parent_version_id ?? e.current_version_id;
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
      return c.json(
        await deps.stacks.diff(
          { hostId: e.host_id, stackId: e.stack_id },
          { against: version.id, ...(query.max_entries ? { maxEntries: query.max_entries } : {}) },
        ),
      );
    },
  }),
];
