/** Warm pools (per version) and the hosts' create turns. */
import { DenvError } from "@denv/protocol";
import { z } from "zod";
import { setImagePool } from "../environments/environment-creation.ts";
import type { PoolView } from "../environments/pool-keeper.ts";
import { teamHosts } from "../store/host-store.ts";
import { findPool, teamPools } from "../store/pool-store.ts";
import { findVersion } from "../store/version-store.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { admissionSchema, imagePoolBody, poolBody, poolSchema } from "./api-schemas.ts";

function serializePool(v: PoolView): z.infer<typeof poolSchema> {
  const { pool } = v;
  const uses = pool.hits + pool.misses;
  return {
    id: pool.id,
    version_id: pool.version_id,
    project_id: pool.project_id,
    size: pool.size,
    ready: v.ready,
    warming: v.warming,
    hits: pool.hits,
    misses: pool.misses,
    hit_rate: uses ? pool.hits / uses : null,
    source: pool.source === "x-denv" ? "x-denv" : "api",
    image_key: pool.image_key,
    last_error: v.last_error,
    created_at: pool.created_at,
  };
}

const versionParam = (id: string | undefined) => id ?? "";

export const poolRoutes: ApiRoute[] = [
  route({
    method: "get",
    path: "/v1/pools",
    name: "pools.list",
    summary: "The team's warm pools, with what each holds and its hit rate",
    response: z.object({ pools: z.array(poolSchema) }),
    auth: true,
    handler: async (c) => {
      const { store, pools } = c.var.deps;
      const rows = await teamPools(store, c.var.teamId);
      return c.json({ pools: await Promise.all(rows.map(async (p) => serializePool(await pools.view(p)))) });
    },
  }),
  route({
    method: "put",
    path: "/v1/pools",
    name: "pools.keepImage",
    summary:
      "Keep N ready sandboxes of an image and settings ({size, image, cmd, env, ports, volumes, egress, user}): a POST /v1/sandboxes with the same settings takes one at once",
    body: imagePoolBody,
    response: poolSchema,
    auth: true,
    handler: async (c, { body }) => {
      const { pools } = c.var.deps;
      const { size, ...settings } = body;
      const pool = await setImagePool(c.var.deps, c.var.teamId, size, settings);
      if (!pool) throw new DenvError("not_found", "no pool of sandboxes with these settings to drain");
      return c.json(serializePool(await pools.view(pool)));
    },
  }),
  route({
    method: "get",
    path: "/v1/pools/{id}",
    name: "pools.get",
    summary: "A version's warm pool",
    response: poolSchema,
    auth: true,
    handler: async (c) => {
      const { store, pools } = c.var.deps;
      const pool = await findPool(store, c.var.teamId, versionParam(c.req.param("id")));
      return c.json(serializePool(await pools.view(pool)));
    },
  }),
  route({
    method: "put",
    path: "/v1/pools/{id}",
    name: "pools.keep",
    summary:
      "Keep N ready forks of a version ({size}); creates of it take one at once and the pool refills. Refused with capacity when the host has no room for them",
    body: poolBody,
    response: poolSchema,
    auth: true,
    handler: async (c, { body }) => {
      const { pools } = c.var.deps;
      const versionId = versionParam(c.req.param("id"));
      const pool = await pools.set(c.var.teamId, versionId, body.size, "api");
      if (!pool) throw new DenvError("not_found", `version ${versionId} has no warm pool to drain`);
      return c.json(serializePool(await pools.view(pool)));
    },
  }),
  route({
    method: "delete",
    path: "/v1/pools/{id}",
    name: "pools.drain",
    summary: "Drain a version's warm pool: its ready members are destroyed",
    response: z.object({ version_id: z.string(), drained: z.number().int() }),
    auth: true,
    handler: async (c) => {
      const { store, pools } = c.var.deps;
      const version = await findVersion(store, c.var.teamId, versionParam(c.req.param("id")));
      const pool = await findPool(store, c.var.teamId, version.id);
      return c.json({ version_id: version.id, drained: await pools.drain(pool) });
    },
  }),
  route({
    method: "get",
    path: "/v1/admission",
    name: "admission.get",
    summary: "Each host's create turns: running, queued (with positions) and its room",
    response: z.object({ hosts: z.array(admissionSchema) }),
    auth: true,
    handler: async (c) => {
      const { store, admission } = c.var.deps;
      const hosts = await teamHosts(store, c.var.teamId);
      return c.json({ hosts: await admission.hosts(hosts.map((h) => h.id)) });
    },
  }),
];
