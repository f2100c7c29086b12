/** Environments and their versions: list, read, destroy, snapshot, rollback, verify, fork. */
import { egressPolicySchema, egressRecord } from "@denv/protocol";
import { z } from "zod";
import { fanOut, forkEnvironment } from "../environments/environment-creation.ts";
import { deploymentById, environmentDeployments } from "../store/deployment-store.ts";
import { teamEnvironments } from "../store/environment-store.ts";
import type { DeploymentsTable } from "../store/schema.ts";
import { resolveVersionRef } from "../store/version-store.ts";
import type { ApiContext } from "./api-deps.ts";
import { type ApiRoute, route } from "./api-route.ts";
import {
  deploymentSchema,
  environmentSchema,
  fanOutBody,
  fanOutResult,
  forkBody,
  queryFlag,
  rollbackBody,
  snapshotBody,
  verifyBody,
  versionSchema,
} from "./api-schemas.ts";
import {
  serializeDeployment,
  serializeEnvironment,
  serializeMade,
  serializeVersion,
} from "./api-serializers.ts";
import { assertRunning, envOf, runningOn } from "./environment-access.ts";

/**
 * The deployment once it has its verdict (200); at once, running, when the caller asked not to wait
 * (?wait=false, 202). A verdict that takes longer than a request may be held is answered `timeout`
 * with the deployment to follow (answer-deadline.ts).
 */
async function finished(c: ApiContext, what: string, made: { deploymentId: string; done: Promise<void> }) {
  const wait = c.req.query("wait") !== "false";
  if (wait) await c.var.deps.deployer.awaitVerdict(made, what);
  return c.json(
    serializeDeployment((await deploymentById(c.var.deps.store, made.deploymentId)) as DeploymentsTable),
    wait ? 200 : 202,
  );
}

/** ?wait=false: answer with the deployment at once instead of its verdict. */
const waitQuery = z.object({
  wait: queryFlag.describe(
    "false: answer at once (202) with the running deployment; default: wait for its verdict",
  ),
});

export const environmentRoutes: ApiRoute[] = [
  route({
    method: "get",
    path: "/v1/envs",
    name: "envs.list",
    summary: "List environments",
    response: z.object({ environments: z.array(environmentSchema) }),
    auth: true,
    handler: async (c) => {
      const { store, secrets } = c.var.deps;
      const rows = await teamEnvironments(store, c.var.teamId);
      return c.json({
        environments: await Promise.all(rows.map((e) => serializeEnvironment(store, secrets, e))),
      });
    },
  }),
  route({
    method: "get",
    path: "/v1/envs/{id}",
    name: "envs.get",
    summary: "An environment (by id, name, or project/name)",
    response: environmentSchema,
    auth: true,
    handler: async (c) =>
      c.json(await serializeEnvironment(c.var.deps.store, c.var.deps.secrets, await envOf(c))),
  }),
  route({
    method: "get",
    path: "/v1/envs/{id}/deployments",
    name: "envs.deployments",
    summary: "An environment's deployments",
    response: z.object({ deployments: z.array(deploymentSchema) }),
    auth: true,
    handler: async (c) => {
      const e = await envOf(c);
      return c.json({
        deployments: (await environmentDeployments(c.var.deps.store, e.id)).map(serializeDeployment),
      });
    },
  }),
  route({
    method: "delete",
    path: "/v1/envs/{id}",
    name: "envs.destroy",
    summary: "Destroy an environment",
    query: waitQuery,
    response: deploymentSchema,
    auth: true,
    handler: async (c) => finished(c, "destroy", await c.var.deps.deployer.destroy(await envOf(c))),
  }),
  route({
    method: "post",
    path: "/v1/envs/{id}/pause",
    name: "envs.pause",
    summary:
      "Pause keeping memory: every service's processes checkpointed to disk and stopped; resume carries on from there",
    response: environmentSchema,
    auth: true,
    handler: async (c) => {
      const { deps } = c.var;
      const e = await deps.deployer.pause(await envOf(c));
      return c.json(await serializeEnvironment(deps.store, deps.secrets, e));
    },
  }),
  route({
    method: "post",
    path: "/v1/envs/{id}/resume",
    name: "envs.resume",
    summary:
      "Resume a paused environment (its processes carry on from their memory), or thaw one a verify froze for inspection",
    response: environmentSchema,
    auth: true,
    handler: async (c) => {
      const { deps } = c.var;
      const e = await deps.deployer.resume(await envOf(c));
      return c.json(await serializeEnvironment(deps.store, deps.secrets, e));
    },
  }),
  route({
    method: "patch",
    path: "/v1/envs/{id}/egress",
    name: "envs.setEgress",
    summary:
      "Replace a running environment's egress policy (one deployed with a policy): the next connection follows it, and open connections it no longer allows are closed",
    body: egressPolicySchema,
    response: z.object({
      policy: egressPolicySchema,
      /** Open connections the new policy closed. */
      closed: z.number().int(),
    }),
    auth: true,
    handler: async (c, { body }) => {
      const r = await c.var.deps.deployer.setEgress(await envOf(c), body);
      return c.json({ policy: r.policy, closed: r.closed });
    },
  }),
  route({
    method: "get",
    path: "/v1/envs/{id}/egress",
    name: "envs.egress",
    summary:
      "An environment's egress policy now and its egress log: every connection through its proxy, allowed or refused, with the rule that decided",
    query: z.object({
      limit: z.coerce
        .number()
        .int()
        .min(1)
        .max(10_000)
        .optional()
        .describe("the last N records (default 10000)"),
    }),
    response: z.object({
      policy: egressPolicySchema.nullable(),
      records: z.array(egressRecord),
      earlier: z.number().int(),
      dropped: z.number().int(),
    }),
    auth: true,
    handler: async (c, { query }) => c.json(await c.var.deps.deployer.egress(await envOf(c), query.limit)),
  }),
  route({
    method: "post",
    path: "/v1/envs/{id}/snapshot",
    name: "envs.snapshot",
    summary:
      "Capture the live state as a new version (with live: every service's processes too, restored by its forks)",
    body: snapshotBody,
    query: waitQuery,
    response: deploymentSchema,
    auth: true,
    handler: async (c, { body }) => {
      const e = await envOf(c);
      // On a hosted target the provider takes it, where its row says it can (snapshot-kind.ts).
      if (e.target_id === "denvd") runningOn(e);
      else assertRunning(e);
      const live = body.live === true ? "on" : body.live === "best-effort" ? "best-effort" : undefined;
      return finished(c, "snapshot", await c.var.deps.deployer.snapshot(e, live ? { live } : {}));
    },
  }),
  route({
    method: "post",
    path: "/v1/envs/{id}/fork",
    name: "envs.fork",
    summary: "A new environment from this environment's current version",
    body: forkBody,
    response: environmentSchema,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      const { deps, teamId } = c.var;
      const made = await forkEnvironment(deps, teamId, await envOf(c), body.name, {
        ...(body.cold ? { cold: true } : {}),
      });
      return c.json(await serializeMade(deps.store, deps.secrets, made), 201);
    },
  }),
  route({
    method: "post",
    path: "/v1/envs/{id}/rollback",
    name: "envs.rollback",
    summary: "Restore a version and re-check health",
    body: rollbackBody,
    query: waitQuery,
    response: deploymentSchema,
    auth: true,
    handler: async (c, { body }) =>
      finished(c, "rollback", await c.var.deps.deployer.rollback(await envOf(c), body.version)),
  }),
  route({
    method: "post",
    path: "/v1/envs/{id}/verify",
    name: "envs.verify",
    summary:
      "Grade the environment on a fork as a separate principal: stop, diff (what the episode changed), collect, snapshot, clone, grade, verdict",
    body: verifyBody,
    query: waitQuery,
    response: deploymentSchema,
    auth: true,
    handler: async (c, { body }) =>
      finished(c, "verify", await c.var.deps.deployer.verify(await envOf(c), { resume: body.resume })),
  }),
  route({
    method: "post",
    path: "/v1/versions/{id}/forks",
    name: "versions.fork",
    summary:
      "N forks of a version in one call ({count, name_prefix, sandbox}); each fork's outcome is reported, made or not (partial success is not hidden)",
    body: fanOutBody,
    response: fanOutResult,
    auth: true,
    handler: async (c, { body }) => {
      const { deps, teamId } = c.var;
      const out = await fanOut(
        deps,
        teamId,
        (await resolveVersionRef(deps.store, teamId, c.req.param("id") ?? "")).id,
        {
          count: body.count,
          ...(body.name_prefix !== undefined ? { namePrefix: body.name_prefix } : {}),
          ...(body.name !== undefined ? { name: body.name } : {}),
          ...(body.sandbox !== undefined ? { sandbox: body.sandbox } : {}),
          ...(body.host !== undefined ? { host: body.host } : {}),
          ...(body.cold !== undefined ? { cold: body.cold } : {}),
        },
      );
      const forks = await Promise.all(
        out.forks.map(async (f) =>
          f.ok
            ? { name: f.name, ok: true, environment: await serializeMade(deps.store, deps.secrets, f.made) }
            : { name: f.name, ok: false, error: f.error },
        ),
      );
      const created = forks.filter((f) => f.ok).length;
      return c.json({
        version_id: out.versionId,
        requested: forks.length,
        created,
        failed: forks.length - created,
        forks,
      });
    },
  }),
  route({
    method: "get",
    path: "/v1/versions/{id}",
    name: "versions.get",
    summary: "A version (ver_…, PROJECT@ver_…, or PROJECT/ENV for the version it runs)",
    response: versionSchema,
    auth: true,
    handler: async (c) =>
      c.json(
        serializeVersion(await resolveVersionRef(c.var.deps.store, c.var.teamId, c.req.param("id") ?? "")),
      ),
  }),
];
