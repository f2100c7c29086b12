/** Sandboxes (an environment for one episode) and the targets they can run on. */
import { z } from "zod";
import { createSandbox } from "../environments/environment-creation.ts";
import { targetNamed, teamTargets } from "../environments/team-targets.ts";
import { environmentById } from "../store/environment-store.ts";
import type { SandboxSpec } from "../targets/target.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { environmentSchema, sandboxBody, targetSchema } from "./api-schemas.ts";
import { serializeMade } from "./api-serializers.ts";
import { targetRow } from "./target-rows.ts";

/** A sandbox's body as the target port's spec (denv's own names). */
export function sandboxSpecOf(body: z.infer<typeof sandboxBody>): SandboxSpec {
  return "from_version" in body
    ? { fromVersion: body.from_version, ...(body.name ? { name: body.name } : {}) }
    : body;
}

export const sandboxRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/sandboxes",
    name: "sandboxes.create",
    summary: "A sandbox for one episode: {from_version} or {image, cmd, env, ports, volumes, egress}",
    body: sandboxBody,
    response: environmentSchema,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      const { deps, teamId } = c.var;
      const made = await createSandbox(deps, teamId, sandboxSpecOf(body));
      return c.json(await serializeMade(deps.store, deps.secrets, made), 201);
    },
  }),
  route({
    method: "get",
    path: "/v1/targets",
    name: "targets.list",
    summary: "Targets with their capability rows",
    response: z.object({ targets: z.array(targetSchema) }),
    auth: true,
    handler: async (c) =>
      c.json({
        targets: await Promise.all(
          (await teamTargets(c.var.deps, c.var.teamId)).map((t) => targetRow(t, c.var.teamId)),
        ),
      }),
  }),
  route({
    method: "post",
    path: "/v1/targets/{name}/sandboxes",
    name: "targets.createSandbox",
    summary: "A sandbox on a named target",
    body: sandboxBody,
    response: environmentSchema,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      const { deps, teamId } = c.var;
      const target = await targetNamed(deps, teamId, c.req.param("name") ?? "");
      const made = await target.createSandbox(teamId, sandboxSpecOf(body));
      const env = await environmentById(deps.store, made.environmentId);
      return c.json(
        await serializeMade(deps.store, deps.secrets, { env, deploymentId: made.deploymentId }),
        201,
      );
    },
  }),
];
