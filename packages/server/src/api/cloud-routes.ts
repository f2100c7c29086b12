/**
 * Cloud accounts: a machine provider the provision phase creates hosts in (Hetzner), or a hosted
 * sandbox provider that is a target of its own (E2B, Daytona, Prime).
 */
import { DenvError } from "@denv/protocol";
import { z } from "zod";
import { checkCloudApiUrl } from "../clouds/hetzner-driver.ts";
import { machineDriver, NOT_YET, PROVIDERS } from "../clouds/provisioner.ts";
import { newId, now } from "../ids.ts";
import { refusalIn } from "../outbound-guard.ts";
import { cloudNameTaken, deleteCloud, insertCloud, teamClouds } from "../store/cloud-store.ts";
import { environmentsAtTarget } from "../store/environment-store.ts";
import type { CloudsTable } from "../store/schema.ts";
import { HOSTED_PROVIDERS, hostedTarget, isHosted } from "../targets/hosted-targets.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { cloudConnectBody, cloudSchema } from "./api-schemas.ts";
import { serializeCloud } from "./api-serializers.ts";

export const cloudRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/clouds",
    summary:
      "Connect a cloud account: hetzner or aws (the provision phase creates machines there; aws's token is ACCESS_KEY_ID:SECRET_ACCESS_KEY, its location a region, its server_type an instance type), or e2b, daytona, modal or prime (a target of its own); the token is checked, then stored encrypted",
    body: cloudConnectBody,
    response: cloudSchema,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      const { store, secrets, fetchPolicy } = c.var.deps;
      const known = [...PROVIDERS, ...HOSTED_PROVIDERS] as readonly string[];
      if (!known.includes(body.provider)) {
        throw new DenvError(
          "invalid_argument",
          NOT_YET[body.provider] ?? `unknown cloud provider ${body.provider}; available: ${known.join(", ")}`,
        );
      }
      const hosted = isHosted(body.provider);
      // A hosted provider is a target by its cloud's name: the sidecar hosts' own name stays theirs.
      if (hosted && body.name === "denvd")
        throw new DenvError(
          "invalid_argument",
          'name: "denvd" is the target of your own hosts; pick another',
        );
      if (!hosted && (!body.server_type || !body.location))
        throw new DenvError("invalid_argument", `${body.provider} needs server_type and location`);
      if (await cloudNameTaken(store, c.var.teamId, body.name))
        throw new DenvError("conflict", `a cloud named ${body.name} is already connected`);
      // The endpoint is a team's choice of what the server calls with a bearer token: an https URL
      // (http only to an allowed host) with no credentials, query or fragment, on an allowed host.
      const apiUrl = checkCloudApiUrl(body.api_url ?? null, fetchPolicy);
      const row: CloudsTable = {
        id: newId("cld"),
        team_id: c.var.teamId,
        name: body.name,
        provider: body.provider,
        token_sealed: secrets.seal(body.token),
        server_type: body.server_type ?? "",
        location: body.location ?? "",
        api_url: apiUrl,
        created_at: now(),
      };
      // The token is tried before it is kept: a wrong one is refused now, not at the first deploy.
      if (hosted) await hostedTarget(c.var.deps, row).checkKey();
      else
        try {
          await machineDriver(body.provider, body.token, row, fetchPolicy).listServers("denv");
        } catch (err) {
          // A malformed token or region is the caller's to fix as it is.
          if (err instanceof DenvError && err.code === "invalid_argument") throw err;
          // A connection the fetch policy refused is the administrator's to allow, not a bad token.
          const refused = refusalIn(err);
          if (refused) throw refused;
          throw new DenvError(
            "invalid_argument",
            `${body.provider === "aws" ? "AWS" : "Hetzner"} did not accept the token: ${(err as Error).message}`,
          );
        }
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
    summary:
      "Disconnect a cloud account (its machines are left as they are); a hosted provider still running environments is refused",
    response: z.object({ deleted: z.string() }),
    auth: true,
    handler: async (c) => {
      const name = c.req.param("name") ?? "";
      // A hosted provider's sandboxes would run on with no key to reach or destroy them.
      const cloud = (await teamClouds(c.var.deps.store, c.var.teamId)).find((x) => x.name === name);
      const running =
        cloud && isHosted(cloud.provider)
          ? await environmentsAtTarget(c.var.deps.store, c.var.teamId, name)
          : [];
      if (running.length)
        throw new DenvError("conflict", `cloud ${name} still runs ${running.join(", ")}: destroy them first`);
      if (!(await deleteCloud(c.var.deps.store, c.var.teamId, name)))
        throw new DenvError("not_found", `no cloud ${name}`);
      return c.json({ deleted: name });
    },
  }),
];
