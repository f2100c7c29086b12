/** Sandboxes (an environment for one episode) and the targets they can run on. */
import { DenvError } from "@denv/protocol";
import { z } from "zod";
import { teamHosts } from "../store/host-store.ts";
import type { ApiDeps } from "./api-deps.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { environmentSchema, sandboxBody, targetSchema } from "./api-schemas.ts";
import { createSandbox } from "./environment-creation.ts";

/** The team's targets with their capability rows (today: its denvd hosts, as one target). */
async function targets(deps: ApiDeps, teamId: string): Promise<z.infer<typeof targetSchema>[]> {
  const hosts = await teamHosts(deps.store, teamId);
  const storages = new Set(hosts.map((h) => h.storage).filter(Boolean));
  const cow = storages.has("zfs") || storages.has("btrfs");
  return [
    {
      name: "denvd",
      type: "denvd",
      hosts: hosts.filter((h) => deps.hub.isConnected(h.id)).length,
      capabilities: {
        multi_service_stack: "yes",
        consistent_snapshot: storages.has("zfs")
          ? "ZFS"
          : storages.has("btrfs")
            ? "btrfs"
            : "pause + copy (dir)",
        fork_time: cow ? "~1 s" : "grows with data (copies)",
        egress_deny_verified: "yes",
        caps_enforced: "yes",
        gpu: "planned",
      },
    },
  ];
}

export const sandboxRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/sandboxes",
    summary: "A sandbox for one episode: {from_version} or {image, cmd, env, ports, volumes, egress}",
    body: sandboxBody,
    response: environmentSchema,
    status: 201,
    auth: true,
    handler: async (c, { body }) => c.json(await createSandbox(c.var.deps, c.var.teamId, body), 201),
  }),
  route({
    method: "get",
    path: "/v1/targets",
    summary: "Targets with their capability rows",
    response: z.object({ targets: z.array(targetSchema) }),
    auth: true,
    handler: async (c) => c.json({ targets: await targets(c.var.deps, c.var.teamId) }),
  }),
  route({
    method: "post",
    path: "/v1/targets/{name}/sandboxes",
    summary: "A sandbox on a named target",
    body: sandboxBody,
    response: environmentSchema,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      const name = c.req.param("name");
      if (!(await targets(c.var.deps, c.var.teamId)).some((t) => t.name === name))
        throw new DenvError(
          "not_found",
          `no target ${name}; GET /v1/targets lists them (hosted providers are not connected yet)`,
        );
      return c.json(await createSandbox(c.var.deps, c.var.teamId, body), 201);
    },
  }),
];
