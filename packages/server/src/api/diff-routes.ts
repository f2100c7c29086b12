/** An environment's diff over HTTP (environments/environment-diff.ts computes it). */
import { diffEvidence } from "@denv/protocol";
import { z } from "zod";
import { diffEnvironment } from "../environments/environment-diff.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { envOf } from "./environment-access.ts";

export const diffRoutes: ApiRoute[] = [
  route({
    method: "get",
    path: "/v1/envs/{id}/diff",
    name: "envs.diff",
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
    handler: async (c, { query }) =>
      c.json(
        await diffEnvironment(c.var.deps, c.var.teamId, await envOf(c), {
          against: query.against,
          maxEntries: query.max_entries,
        }),
      ),
  }),
];
