/**
 * Every route of the /v1 API, by resource. The app mounts each resource as a Hono sub-app, and
 * the OpenAPI document is generated from this same list.
 */
import { type ApiRoute, route } from "./api-route.ts";
import { cloudRoutes } from "./cloud-routes.ts";
import { deploymentRoutes } from "./deployment-routes.ts";
import { deviceRoutes } from "./device-routes.ts";
import { diffRoutes } from "./diff-routes.ts";
import { downloadRoutes } from "./download-routes.ts";
import { environmentIoRoutes } from "./environment-io-routes.ts";
import { environmentRoutes } from "./environment-routes.ts";
import { fileRoutes } from "./file-routes.ts";
import { githubRoutes } from "./github-routes.ts";
import { hostRoutes } from "./host-routes.ts";
import { logRoutes } from "./log-routes.ts";
import { mcpRoutes } from "./mcp-routes.ts";
import { openApiDocument } from "./openapi-document.ts";
import { peopleRoutes } from "./people-routes.ts";
import { poolRoutes } from "./pool-routes.ts";
import { projectRoutes } from "./project-routes.ts";
import { replayRoutes } from "./replay-routes.ts";
import { sandboxRoutes } from "./sandbox-routes.ts";
import { tunnelRoutes } from "./tunnel-routes.ts";
import { versionRoutes } from "./version-routes.ts";

const openApiRoute = route({
  method: "get",
  path: "/v1/openapi.json",
  name: "meta.openapi",
  summary: "This document",
  auth: false,
  handler: (c) => c.json(apiDocument()),
});

/** The resources, each served by one sub-app. */
export const RESOURCES: Record<string, ApiRoute[]> = {
  meta: [openApiRoute],
  downloads: downloadRoutes,
  hosts: hostRoutes,
  people: peopleRoutes,
  device: deviceRoutes,
  projects: projectRoutes,
  deployments: deploymentRoutes,
  environments: [...environmentRoutes, ...environmentIoRoutes, ...logRoutes, ...diffRoutes],
  files: fileRoutes,
  tunnels: tunnelRoutes,
  sandboxes: sandboxRoutes,
  pools: poolRoutes,
  replays: replayRoutes,
  versions: versionRoutes,
  clouds: cloudRoutes,
  github: githubRoutes,
  mcp: mcpRoutes,
};

export const API_ROUTES: ApiRoute[] = Object.values(RESOURCES).flat();

/** The OpenAPI document of every route (GET /v1/openapi.json). */
export function apiDocument(serverUrl?: string): Record<string, unknown> {
  return openApiDocument(API_ROUTES, serverUrl);
}
