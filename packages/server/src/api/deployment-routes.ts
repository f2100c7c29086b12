/** Deployments: one change to an environment, its phase log, and its live updates. */
import { DenvError } from "@denv/protocol";
import { streamSSE } from "hono/streaming";
import { z } from "zod";
import {
  deploymentById,
  findDeployment,
  requestDeploymentCancel,
  teamDeployments,
} from "../store/deployment-store.ts";
import { findEnvironment } from "../store/environment-store.ts";
import type { DeploymentsTable } from "../store/schema.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { deploymentSchema, queryFlag } from "./api-schemas.ts";
import { serializeDeployment } from "./api-serializers.ts";

export const deploymentRoutes: ApiRoute[] = [
  route({
    method: "get",
    path: "/v1/deployments",
    name: "deployments.list",
    summary:
      "The team's deployments, newest first (?env= one environment's, ?running=true those at work, ?limit=)",
    query: z.object({
      env: z.string().min(1).max(300).optional().describe("One environment's (id, name or project/name)"),
      running: queryFlag.describe("true: only those queued or running"),
      limit: z
        .string()
        .regex(/^\d{1,4}$/, "a count")
        .optional()
        .describe("At most this many (default 50, at most 1000)"),
    }),
    response: z.object({
      deployments: z.array(deploymentSchema.extend({ environment: z.string() })),
    }),
    auth: true,
    handler: async (c, { query }) => {
      const { store } = c.var.deps;
      const env = query.env === undefined ? undefined : await findEnvironment(store, c.var.teamId, query.env);
      const rows = await teamDeployments(store, c.var.teamId, {
        ...(env ? { environmentId: env.id } : {}),
        atWork: query.running === "true",
        limit: Math.min(Number(query.limit ?? 50), 1000),
      });
      return c.json({
        deployments: rows.map(({ env_name, project_name, ...d }) => ({
          ...serializeDeployment(d),
          environment: `${project_name}/${env_name}`,
        })),
      });
    },
  }),
  route({
    method: "get",
    path: "/v1/deployments/{id}",
    name: "deployments.get",
    summary: "A deployment and its phase log with evidence",
    response: deploymentSchema,
    auth: true,
    handler: async (c) =>
      c.json(
        serializeDeployment(await findDeployment(c.var.deps.store, c.var.teamId, c.req.param("id") ?? "")),
      ),
  }),
  route({
    method: "post",
    path: "/v1/deployments/{id}/cancel",
    name: "deployments.cancel",
    summary:
      "Stop a queued or running deployment: it stops before its next phase begins and undoes what it made, as a failed one does (a phase at work finishes first; past its point of no return — a deploy's switch, a rollback's restore — it finishes); 409 once it has ended",
    response: deploymentSchema,
    status: 202,
    auth: true,
    handler: async (c) => {
      const { store } = c.var.deps;
      const d = await findDeployment(store, c.var.teamId, c.req.param("id") ?? "");
      const by = c.var.userId ?? c.var.keyId;
      if (!(await requestDeploymentCancel(store, c.var.teamId, d.id, by))) {
        const now = await findDeployment(store, c.var.teamId, d.id);
        if (now.status !== "queued" && now.status !== "running")
          throw new DenvError(
            "conflict",
            `deployment ${d.id} has already ended (${now.status}): nothing to cancel`,
          );
        // Asked already: the answer is the same as the first one's.
      }
      return c.json(serializeDeployment(await findDeployment(store, c.var.teamId, d.id)), 202);
    },
  }),
  route({
    method: "get",
    path: "/v1/deployments/{id}/events",
    name: "deployments.events",
    summary: "Live phase updates (server-sent events) until the verdict",
    responseType: "event-stream",
    auth: true,
    handler: async (c) => {
      const { store, deployer } = c.var.deps;
      const d = await findDeployment(store, c.var.teamId, c.req.param("id") ?? "");
      return streamSSE(c, async (stream) => {
        let last = "";
        const send = async (row: DeploymentsTable) => {
          const data = JSON.stringify(serializeDeployment(row));
          if (data !== last) {
            last = data;
            await stream.writeSSE({ event: "deployment", data });
          }
        };
        await send(d);
        let current = d;
        while ((current.status === "running" || current.status === "queued") && !stream.aborted) {
          // Woken by the deployment's next change, or after a second; the listener goes either way.
          await new Promise<void>((resolve) => {
            const wake = () => {
              clearTimeout(t);
              deployer.events.off(d.id, wake);
              resolve();
            };
            const t = setTimeout(wake, 1000);
            deployer.events.on(d.id, wake);
          });
          current = (await deploymentById(store, d.id)) as DeploymentsTable;
          await send(current);
        }
      });
    },
  }),
];
