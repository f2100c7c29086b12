/** Sandboxes (an environment for one episode) and the targets they can run on. */
import { z } from "zod";
import { environmentById } from "../store/environment-store.ts";
import type { SandboxSpec } from "../targets/target.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { environmentSchema, sandboxBody, targetSchema } from "./api-schemas.ts";
import { serializeEnvironment } from "./api-serializers.ts";
import { createSandbox } from "./environment-creation.ts";
import { targetNamed, targetRow, teamTargets } from "./team-targets.ts";

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
    summary: "A sandbox on a named target",
    body: sandboxBody,
    response: environmentSchema,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      const { deps, teamId } = c.var;
      const target = await targetNamed(deps, teamId, c.req.param("name") ?? "");
      const spec: SandboxSpec =
        "from_version" in body
          ? { fromVersion: body.from_version, ...(body.name ? { name: body.name } : {}) }
          : body;
      const made = await target.createSandbox(teamId, spec);
      const env = await environmentById(deps.store, made.environmentId);
      return c.json(
        {
          ...(await serializeEnvironment(deps.store, deps.secrets, env)),
          ...(made.deploymentId ? { deployment_id: made.deploymentId } : {}),
        },
        201,
      );
    },
  }),
];
