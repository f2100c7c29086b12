/** Cloud accounts the provision phase creates machines in (Hetzner today). */
import { DenvError } from "@denv/protocol";
import { z } from "zod";
import { checkCloudApiUrl, HetznerDriver } from "../clouds/hetzner-driver.ts";
import { NOT_YET, PROVIDERS } from "../clouds/provisioner.ts";
import { newId, now } from "../ids.ts";
import { cloudNameTaken, deleteCloud, insertCloud, teamClouds } from "../store/cloud-store.ts";
import type { CloudsTable } from "../store/schema.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { cloudConnectBody, cloudSchema } from "./api-schemas.ts";
import { serializeCloud } from "./api-serializers.ts";

export const cloudRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/clouds",
    summary:
      "Connect a cloud account (hetzner) the provision phase creates machines in; the token is checked, then stored encrypted",
    body: cloudConnectBody,
    response: cloudSchema,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      const { store, secrets, fetchPolicy } = c.var.deps;
      if (!(PROVIDERS as readonly string[]).includes(body.provider)) {
        throw new DenvError(
          "invalid_argument",
          NOT_YET[body.provider] ??
            `unknown cloud provider ${body.provider}; available: ${PROVIDERS.join(", ")}`,
        );
      }
      if (await cloudNameTaken(store, c.var.teamId, body.name))
        throw new DenvError("conflict", `a cloud named ${body.name} is already connected`);
      // The endpoint is a team's choice of what the server calls with a bearer token: an https URL
      // (http only to an allowed host) with no credentials, query or fragment, on an allowed host.
      const apiUrl = checkCloudApiUrl(body.api_url ?? null, fetchPolicy);
      // The token is tried before it is kept: a wrong one is refused now, not at the first deploy.
      try {
        await new HetznerDriver({ token: body.token, apiUrl }).listServers("denv");
      } catch (err) {
        throw new DenvError(
          "invalid_argument",
          `Hetzner did not accept the token: ${(err as Error).message}`,
        );
      }
      const row: CloudsTable = {
        id: newId("cld"),
        team_id: c.var.teamId,
        name: body.name,
        provider: body.provider,
        token_sealed: secrets.seal(body.token),
        server_type: body.server_type,
        location: body.location,
        api_url: apiUrl,
        created_at: now(),
      };
      await insertCloud(store, row);
      return c.json(await serializeCloud(store, row), 201);
    },
  }),
  route({
    method: "get",
    path: "/v1/clouds",
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
    summary: "Disconnect a cloud account (its machines are left as they are)",
    response: z.object({ deleted: z.string() }),
    auth: true,
    handler: async (c) => {
      const name = c.req.param("name") ?? "";
      if (!(await deleteCloud(c.var.deps.store, c.var.teamId, name)))
        throw new DenvError("not_found", `no cloud ${name}`);
      return c.json({ deleted: name });
    },
  }),
];
