/**
 * Cloud accounts over HTTP: a machine provider the provision phase creates hosts in (Hetzner, AWS),
 * or a hosted sandbox provider that is a target of its own (clouds/cloud-accounts.ts does both).
 */
import { z } from "zod";
import { connectCloud, disconnectCloud } from "../clouds/cloud-accounts.ts";
import { teamClouds } from "../store/cloud-store.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { serializeCloud } from "./api-serializers.ts";
import { cloudConnectBody, cloudSchema } from "./cloud-schemas.ts";

export const cloudRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/clouds",
    name: "clouds.connect",
    summary:
      "Connect a cloud account: hetzner or aws (the provision phase creates machines there; aws's token is ACCESS_KEY_ID:SECRET_ACCESS_KEY, its location a region, its server_type an instance type), or e2b, daytona, modal or prime (a target of its own); the token is checked, then stored encrypted",
    body: cloudConnectBody,
    response: cloudSchema,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      const row = await connectCloud(c.var.deps, c.var.teamId, body);
      return c.json(await serializeCloud(c.var.deps.store, row), 201);
    },
  }),
  route({
    method: "get",
    path: "/v1/clouds",
    name: "clouds.list",
    summary: "Connected cloud accounts (never their tokens) and the machines denv made there",
    response: z.object({ clouds: z.array(cloudSchema) }),
    auth: true,
    handler: async (c) => {
      const { store } = c.var.deps;
      const rows = await teamClouds(store, c.var.teamId);
      return c.json({ clouds: await Promise.all(rows.map((r) => serializeCloud(store, r))) });
    },
  }),
  route({
    method: "delete",
    path: "/v1/clouds/{name}",
    name: "clouds.disconnect",
    summary:
      "Disconnect a cloud account (its machines are left as they are); a hosted provider still running environments is refused",
    response: z.object({ deleted: z.string() }),
    auth: true,
    handler: async (c) => {
      const name = c.req.param("name") ?? "";
      await disconnectCloud(c.var.deps, c.var.teamId, name);
      return c.json({ deleted: name });
    },
  }),
];
