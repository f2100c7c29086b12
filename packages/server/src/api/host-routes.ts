/** Teams, hosts and joining: how a team gets keys, and how a machine becomes one of its hosts. */
import { DenvError } from "@denv/protocol";
import { z } from "zod";
import { serverLog } from "../server-log.ts";
import { hostHoldings, redeemJoinToken, setHostDraining, teamHosts } from "../store/host-store.ts";
import { createApiKey, createJoinToken, createTeam } from "../store/team-store.ts";
import type { ApiContext } from "./api-deps.ts";
import { type ApiRoute, route } from "./api-route.ts";
import {
  createTeamBody,
  drainResult,
  hostJoinBody,
  hostJoined,
  hostSchema,
  joinTokenCreated,
  teamCreated,
} from "./api-schemas.ts";
import { serializeHost } from "./api-serializers.ts";
import { ANONYMOUS_JSON_LIMIT_BYTES } from "./request-bodies.ts";

/** One of the caller's team's hosts, by name or id. */
async function teamHost(c: ApiContext, ref: string) {
  const host = (await teamHosts(c.var.deps.store, c.var.teamId)).find((h) => h.id === ref || h.name === ref);
  if (!host)
    throw new DenvError("not_found", `no host ${ref.slice(0, 200)} in this team (see denv host list)`);
  return host;
}

export const hostRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/teams",
    name: "teams.create",
    summary: "Create a team and its first API key (admin key only)",
    body: createTeamBody,
    response: teamCreated,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      if (!c.var.admin) throw new DenvError("forbidden", "only an admin key can create teams");
      const teamId = await createTeam(c.var.deps.store, body.name);
      const key = await createApiKey(c.var.deps.store, teamId, "first key", false);
      return c.json({ team_id: teamId, name: body.name, api_key: key }, 201);
    },
  }),
  route({
    method: "post",
    path: "/v1/hosts/join-token",
    name: "hosts.joinToken",
    summary: "Mint a single-use, expiring host join token",
    response: joinTokenCreated,
    status: 201,
    auth: true,
    handler: async (c) => {
      const t = await createJoinToken(c.var.deps.store, c.var.teamId, c.var.deps.joinTokenTtlMs);
      return c.json({ token: t.token, expires_at: t.expiresAt }, 201);
    },
  }),
  route({
    method: "post",
    path: "/v1/hosts/join",
    name: "hosts.join",
    summary: "Exchange a join token for a per-host secret (used by denvd join)",
    body: hostJoinBody,
    response: hostJoined,
    status: 201,
    auth: false,
    bodyLimitBytes: ANONYMOUS_JSON_LIMIT_BYTES,
    handler: async (c, { body }) => {
      const { hostId, secret } = await redeemJoinToken(c.var.deps.store, body.token, body.name);
      serverLog().info({ host_id: hostId }, "host joined");
      return c.json({ host_id: hostId, secret }, 201);
    },
  }),
  route({
    method: "get",
    path: "/v1/hosts",
    name: "hosts.list",
    summary: "Hosts with what they reported, and the versions, warm pools and environments each holds",
    response: z.object({ hosts: z.array(hostSchema) }),
    auth: true,
    handler: async (c) => {
      const hosts = await teamHosts(c.var.deps.store, c.var.teamId);
      const holds = await hostHoldings(c.var.deps.store, c.var.teamId);
      return c.json({
        hosts: hosts.map((h) => serializeHost(h, c.var.deps.stacks.hostConnected(h.id), holds.get(h.id))),
      });
    },
  }),
  route({
    method: "post",
    path: "/v1/hosts/{id}/drain",
    name: "hosts.drain",
    summary:
      "Drain a host before maintenance: it takes no new environment, replica or pool member; versions it holds are copied to other hosts where it held too few copies; its ready pool members move",
    response: drainResult,
    auth: true,
    handler: async (c) => {
      const host = await teamHost(c, c.req.param("id") ?? "");
      const r = await c.var.deps.replicas.drain(host, c.var.deps.deployer);
      return c.json({ host_id: host.id, draining: true, ...r });
    },
  }),
  route({
    method: "delete",
    path: "/v1/hosts/{id}/drain",
    name: "hosts.undrain",
    summary: "Undo a drain: the host takes new environments, replicas and pool members again",
    response: z.object({ host_id: z.string(), draining: z.boolean() }),
    auth: true,
    handler: async (c) => {
      const host = await teamHost(c, c.req.param("id") ?? "");
      await setHostDraining(c.var.deps.store, host.id, false);
      return c.json({ host_id: host.id, draining: false });
    },
  }),
];
