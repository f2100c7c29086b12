/**
 * GitHub: a team connects its own App (id, private key, webhook secret), sees the repositories its
 * installations give, and GitHub delivers the App's webhooks here (github/github-webhooks.ts).
 */
import { DenvError, isDenvError } from "@denv/protocol";
import { z } from "zod";
import { receiveWebhook, WEBHOOK_LIMIT_BYTES, webhookDelivery } from "../github/github-webhooks.ts";
import { teamDeliveries } from "../store/github-store.ts";
import type { GithubAppsTable } from "../store/schema.ts";
import type { ApiContext } from "./api-deps.ts";
import { type ApiRoute, route } from "./api-route.ts";
import {
  githubAppSchema,
  githubConnectBody,
  githubDeliverySchema,
  githubRepositorySchema,
  webhookAnswerSchema,
} from "./github-schemas.ts";
import { refuseUnreadBody } from "./request-bodies.ts";

/** The console's origin as users reach it: the server's --public-url, else this request's. */
export function serverOrigin(c: ApiContext): string {
  return c.var.deps.serverUrl?.() || new URL(c.req.url).origin;
}

function serializeApp(c: ApiContext, row: GithubAppsTable): z.infer<typeof githubAppSchema> {
  const web = row.api_url === "https://api.github.com" ? "https://github.com" : new URL(row.api_url).origin;
  return {
    app_id: row.app_id,
    slug: row.slug,
    api_url: row.api_url,
    install_url: `${web}/apps/${encodeURIComponent(row.slug)}/installations/new`,
    webhook_url: `${serverOrigin(c)}/v1/github/webhook`,
    created_at: row.created_at,
  };
}

export const githubRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/github/apps",
    name: "github.connectApp",
    summary:
      "Connect the team's GitHub App: its ID, private key and webhook secret (tried against GitHub with GET /app, then stored encrypted)",
    body: githubConnectBody,
    response: githubAppSchema,
    status: 201,
    auth: true,
    handler: async (c, { body }) =>
      c.json(serializeApp(c, await c.var.deps.github.connect(c.var.teamId, body)), 201),
  }),
  route({
    method: "get",
    path: "/v1/github/apps",
    name: "github.apps",
    summary: "The team's connected GitHub Apps (never their keys or secrets)",
    response: z.object({ apps: z.array(githubAppSchema) }),
    auth: true,
    handler: async (c) =>
      c.json({ apps: (await c.var.deps.github.teamApps(c.var.teamId)).map((r) => serializeApp(c, r)) }),
  }),
  route({
    method: "delete",
    path: "/v1/github/apps/{app_id}",
    name: "github.disconnectApp",
    summary: "Disconnect a GitHub App; refused while a project reads its repository through it",
    response: z.object({ deleted: z.string() }),
    auth: true,
    handler: async (c) => {
      const appId = c.req.param("app_id") ?? "";
      await c.var.deps.github.disconnect(c.var.teamId, appId);
      return c.json({ deleted: appId });
    },
  }),
  route({
    method: "get",
    path: "/v1/github/repositories",
    name: "github.repositories",
    summary:
      "The repositories each installation of the team's Apps gives denv (what a github: project can deploy)",
    response: z.object({
      installations: z.array(
        z.object({
          app_id: z.string(),
          installation_id: z.string(),
          account: z.string(),
          repositories: z.array(githubRepositorySchema),
        }),
      ),
    }),
    auth: true,
    handler: async (c) => {
      const found = await c.var.deps.github.repositories(c.var.teamId);
      return c.json({
        installations: found.map((i) => ({
          ...i,
          repositories: i.repositories.map((r) => ({
            id: r.id,
            full_name: r.fullName,
            default_branch: r.defaultBranch,
            private: r.private,
          })),
        })),
      });
    },
  }),
  route({
    method: "get",
    path: "/v1/github/deliveries",
    name: "github.deliveries",
    summary: "The latest webhook deliveries to the team's Apps, and what denv did with each",
    response: z.object({ deliveries: z.array(githubDeliverySchema) }),
    auth: true,
    handler: async (c) => c.json({ deliveries: await teamDeliveries(c.var.deps.store, c.var.teamId) }),
  }),
  route({
    method: "post",
    path: "/v1/github/webhook",
    name: "github.webhook",
    summary:
      "GitHub's webhook deliveries (push, pull_request) for a connected App: the signature checked over the raw body with the App's secret, each delivery acted on once, work queued and answered at once",
    response: webhookAnswerSchema,
    status: 202,
    auth: false,
    bodyLimitBytes: WEBHOOK_LIMIT_BYTES,
    handler: async (c) => {
      const { store, secrets, github, deployer } = c.var.deps;
      // The headers first: a delivery for no connected App (or for an event denv ignores) is
      // answered without a byte of its body read, and its connection is not kept.
      const announced = await webhookDelivery(store, c.req.raw.headers);
      if ("answer" in announced) {
        refuseUnreadBody(c);
        return c.json({ outcome: announced.answer.outcome, deployments: [] }, announced.answer.status);
      }
      const raw = await c.req.text().catch((err: unknown) => {
        if (isDenvError(err)) throw err;
        throw new DenvError("invalid_argument", "the body could not be read");
      });
      const r = await receiveWebhook(
        { store, secrets, github, deployer, serverUrl: () => serverOrigin(c) },
        announced.delivery,
        raw,
      );
      return c.json({ outcome: r.outcome, deployments: r.deployments }, r.status);
    },
  }),
];
