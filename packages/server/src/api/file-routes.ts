/**
 * Files in a running environment's services, as the service's user unless ?user= (or "user")
 * names another: tars in and out, and stat, list, mkdir, remove and rename. A write never replaces
 * a directory with a file nor a file with a directory; each failure answers its own code
 * (not_found, permission_denied, is_directory, not_a_directory, conflict).
 */
import { fsEntry } from "@denv/protocol";
import { z } from "zod";
import { environmentTarget } from "../environments/team-targets.ts";
import type { ApiContext } from "./api-deps.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { filesQuery, queryFlag } from "./api-schemas.ts";
import { awake, containerPath, envOf, serviceOf } from "./environment-access.ts";
import { requestBody, streamResponse } from "./host-bytes.ts";

/** A tar streams through to the environment: up to 16 GiB of it in one request. */
const FILES_LIMIT_BYTES = 16 * 1024 ** 3;

const path = z.string().min(1).max(4096);
const who = {
  service: z.string().optional().describe("The service (default: the agent's, else the first)"),
  user: z
    .string()
    .min(1)
    .max(256)
    .optional()
    .describe("Who does it (name|uid[:group|gid]); default: the service's user"),
};

/** The environment's target, the service checked against its own, and the user. */
async function where(c: ApiContext, service: string | undefined, user: string | undefined) {
  const e = await awake(c, await envOf(c));
  const { target, placed } = await environmentTarget(c.var.deps, e);
  return {
    target,
    placed,
    at: { service: await serviceOf(c.var.deps, e, service), ...(user ? { user } : {}) },
  };
}

export const fileRoutes: ApiRoute[] = [
  route({
    method: "put",
    path: "/v1/envs/{id}/files",
    name: "files.write",
    summary:
      "Extract a tar at ?path= in ?service=, as ?user= (default: the service's user): parents are made; a directory is never replaced by a file, nor a file by a directory. The tar streams through (up to 16 GiB)",
    bodyType: "tar",
    query: filesQuery,
    response: z.object({ entries: z.number(), bytes: z.number() }),
    auth: true,
    bodyLimitBytes: null,
    handler: async (c, { query }) => {
      const { target, placed, at } = await where(c, query.service, query.user);
      const path = containerPath(query.path);
      return c.json(await target.putFiles(placed, { ...at, path }, requestBody(c, FILES_LIMIT_BYTES)));
    },
  }),
  route({
    method: "get",
    path: "/v1/envs/{id}/files",
    name: "files.read",
    summary:
      "A tar of ?path= in ?service=, read as ?user= (default: the service's user), never following a link; it streams as the host reads it",
    query: filesQuery,
    responseType: "tar",
    auth: true,
    handler: async (c, { query }) => {
      const { target, placed, at } = await where(c, query.service, query.user);
      const tar = await target.getFiles(placed, { ...at, path: containerPath(query.path) });
      return streamResponse(c, tar, "application/x-tar");
    },
  }),
  route({
    method: "get",
    path: "/v1/envs/{id}/files/stat",
    name: "files.stat",
    summary: "A path's type, size, mode, owner and modification time (a link is reported as a link)",
    query: z.object({ path: path.describe("An absolute path in the service"), ...who }),
    response: fsEntry,
    auth: true,
    handler: async (c, { query }) => {
      const { target, placed, at } = await where(c, query.service, query.user);
      return c.json(await target.statPath(placed, { ...at, path: containerPath(query.path) }));
    },
  }),
  route({
    method: "get",
    path: "/v1/envs/{id}/files/list",
    name: "files.list",
    summary:
      "A directory's entries: one level (depth=1, the default) or deeper, up to 100,000; links are listed, not entered",
    query: z.object({
      path: path.describe("An absolute path in the service"),
      depth: z.coerce.number().int().min(1).max(64).optional().describe("How many levels (default 1)"),
      ...who,
    }),
    response: z.object({ entries: z.array(fsEntry) }),
    auth: true,
    handler: async (c, { query }) => {
      const { target, placed, at } = await where(c, query.service, query.user);
      const entries = await target.listPath(
        placed,
        { ...at, path: containerPath(query.path) },
        query.depth ?? 1,
      );
      return c.json({ entries });
    },
  }),
  route({
    method: "post",
    path: "/v1/envs/{id}/files/mkdir",
    name: "files.mkdir",
    summary: "Make a directory (and its parents, unless parents is false), owned by the user",
    body: z.strictObject({ path, parents: z.boolean().optional(), ...who }),
    response: z.object({ created: z.boolean() }),
    auth: true,
    handler: async (c, { body }) => {
      const { target, placed, at } = await where(c, body.service, body.user);
      return c.json(
        await target.makeDir(placed, { ...at, path: containerPath(body.path) }, body.parents ?? true),
      );
    },
  }),
  route({
    method: "delete",
    path: "/v1/envs/{id}/files",
    name: "files.remove",
    summary: "Remove a file, a link, or an empty directory (recursive=true: a whole tree, following no link)",
    query: z.object({
      path: path.describe("An absolute path in the service"),
      recursive: queryFlag.describe(
        "true: remove a directory and all it holds; default: a file or an empty directory",
      ),
      ...who,
    }),
    response: z.object({ removed: z.string() }),
    auth: true,
    handler: async (c, { query }) => {
      const { target, placed, at } = await where(c, query.service, query.user);
      const p = containerPath(query.path);
      await target.removePath(placed, { ...at, path: p }, query.recursive === "true");
      return c.json({ removed: p });
    },
  }),
  route({
    method: "post",
    path: "/v1/envs/{id}/files/rename",
    name: "files.rename",
    summary: "Rename or move a path (a file over a directory, or a directory over a file, is refused)",
    body: z.strictObject({ from: path, to: path, ...who }),
    response: z.object({ from: z.string(), to: z.string() }),
    auth: true,
    handler: async (c, { body }) => {
      const { target, placed, at } = await where(c, body.service, body.user);
      const from = containerPath(body.from);
      const to = containerPath(body.to);
      await target.renamePath(placed, at, from, to);
      return c.json({ from, to });
    },
  }),
];
