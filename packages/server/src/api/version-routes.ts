/** A version's data sheet: JSON, or Markdown with ?format=markdown (denv datasheet). */
import { z } from "zod";
import { resolveVersionRef } from "../store/version-store.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { buildDatasheet, datasheetMarkdown } from "./datasheet.ts";

export const versionRoutes: ApiRoute[] = [
  route({
    method: "get",
    path: "/v1/versions/{id}/datasheet",
    summary:
      "A version's data sheet: digests, volumes and sizes, caps, egress, clock reach, replays, every promote's gate evidence, verify results; ?format=markdown for people",
    query: z.object({ format: z.enum(["json", "markdown"]).optional() }),
    response: z.record(z.string(), z.unknown()),
    responseType: "any",
    auth: true,
    handler: async (c, { query }) => {
      const { store, secrets } = c.var.deps;
      const version = await resolveVersionRef(store, c.var.teamId, c.req.param("id") ?? "");
      const sheet = await buildDatasheet(store, secrets, version);
      if (query.format === "markdown") {
        c.header("content-type", "text/markdown; charset=utf-8");
        return c.body(datasheetMarkdown(sheet));
      }
      return c.json(sheet);
    },
  }),
];
