/**
 * The /v1 API's request and response schemas (zod), and the route table the OpenAPI document is
 * generated from. JSON on the wire is snake_case.
 */
import { KINDS } from "@denv/protocol";
import { z } from "zod";

export const errorSchema = z.object({
  error: z.object({ code: z.string(), message: z.string(), details: z.unknown().optional() }),
});

const name = z
  .string()
  .regex(
    /^[a-z0-9][a-z0-9_-]*(?:\.[a-z0-9_-]+)*$/,
    "lower-case letters, digits, '_' or '-' (single dots between them), starting with a letter or digit",
  )
  .max(63);

export const createTeamBody = z.strictObject({ name: z.string().min(1).max(100) });
export const teamCreated = z.object({ team_id: z.string(), name: z.string(), api_key: z.string() });

export const joinTokenCreated = z.object({ token: z.string(), expires_at: z.string() });
export const hostJoinBody = z.strictObject({
  token: z.string().min(1),
  name: z.string().min(1).max(100).optional(),
});
export const hostJoined = z.object({ host_id: z.string(), secret: z.string() });

export const hostSchema = z.object({
  id: z.string(),
  name: z.string(),
  arch: z.string().nullable(),
  storage: z.string().nullable(),
  capacity: z.unknown(),
  version: z.string().nullable(),
  last_seen: z.string().nullable(),
  connected: z.boolean(),
});

export const createProjectBody = z.strictObject({
  name,
  kind: z.enum(KINDS),
  /** A local directory (the CLI uploads it), any git URL, or github:owner/repo. */
  source: z.string().min(1),
  pinned_target: z.string().optional(),
});

export const projectSchema = z.object({
  id: z.string(),
  name: z.string(),
  kind: z.string(),
  source_type: z.enum(["local", "git", "github"]),
  source: z.string(),
  pinned_target: z.string().nullable(),
  uploaded: z.boolean(),
  created_at: z.string(),
});

export const uploadSourceBody = z.strictObject({
  compose: z
    .string()
    .min(1)
    .max(1024 * 1024),
  dotenv: z
    .string()
    .max(1024 * 1024)
    .optional(),
});

export const deployBody = z.strictObject({ env: name.default("alpha") });

export const phaseSchema = z.object({
  name: z.string(),
  status: z.enum(["pending", "running", "succeeded", "failed", "skipped"]),
  started_at: z.string().nullable(),
  finished_at: z.string().nullable(),
  duration_ms: z.number().nullable(),
  evidence: z.unknown(),
  reason: z.string().nullable(),
});

/** A verify deployment's outcome: the reward, and why when it is not the verifier's own number. */
export const verifyOutcome = z.object({
  reward: z.number(),
  reason: z.string().nullable(),
  exit_code: z.number().nullable(),
  /** "frozen for inspection", or "resumed" when verify was asked to resume the agent. */
  agent: z.string(),
});

export const deploymentSchema = z.object({
  id: z.string(),
  environment_id: z.string(),
  kind: z.string(),
  status: z.enum(["queued", "running", "succeeded", "rolled_back", "failed"]),
  reason: z.string().nullable(),
  /** The version this deployment made or restored (deploy, snapshot, rollback, fork: its parent). */
  version_id: z.string().nullable(),
  /** How long the stack was frozen for its snapshot, in ms (deploy, snapshot, verify). */
  frozen_ms: z.number().nullable(),
  /** Set on verify deployments once graded. */
  verify: verifyOutcome.nullable(),
  phases: z.array(phaseSchema),
  created_at: z.string(),
  finished_at: z.string().nullable(),
});

export const environmentSchema = z.object({
  id: z.string(),
  name: z.string(),
  project: z.string(),
  status: z.string(),
  host_id: z.string().nullable(),
  current_version_id: z.string().nullable(),
  parent_version_id: z.string().nullable(),
  sandbox: z.boolean(),
  services: z.array(z.string()),
  created_at: z.string(),
  /** Set on the answers of fork and sandbox creation: the deployment that made it. */
  deployment_id: z.string().optional(),
});

export const versionSchema = z.object({
  id: z.string(),
  environment_id: z.string(),
  host_id: z.string(),
  spec_hash: z.string(),
  images: z.record(z.string(), z.string()),
  evidence: z.unknown(),
  created_at: z.string(),
});

export const forkBody = z.strictObject({ name: name.optional() });
export const rollbackBody = z.strictObject({ version: z.string().min(1) });
export const verifyBody = z.strictObject({ resume: z.boolean().optional() });

export const sandboxBody = z.union([
  z.strictObject({ from_version: z.string().min(1), name: name.optional() }),
  z.strictObject({
    image: z.string().min(1),
    cmd: z.array(z.string()).optional(),
    env: z.record(z.string(), z.string()).optional(),
    ports: z.array(z.number().int().min(1).max(65535)).optional(),
    /** Paths kept across snapshot and fork (default ["/work"]). */
    volumes: z.array(z.string().regex(/^\/[^\0]*$/, "absolute paths")).optional(),
    egress: z.enum(["deny", "allow"]).optional(),
    user: z.string().optional(),
    name: name.optional(),
  }),
]);

export const execBody = z.strictObject({
  command: z.union([z.string().min(1), z.array(z.string()).min(1)]),
  service: z.string().optional(),
  user: z.string().optional(),
  cwd: z.string().optional(),
  env: z.record(z.string(), z.string()).optional(),
  /** Standard input, base64. */
  stdin: z.string().optional(),
  timeout_ms: z
    .number()
    .int()
    .positive()
    .max(24 * 3600 * 1000)
    .optional(),
  max_output_bytes: z
    .number()
    .int()
    .positive()
    .max(64 * 1024 * 1024)
    .optional(),
  /** How stdout and stderr come back: utf8 (default) or base64 for binary output. */
  encoding: z.enum(["utf8", "base64"]).optional(),
});

export const portUrlBody = z.strictObject({
  /** The service whose loopback the port is on (default: the agent's service, else the first). */
  service: z.string().optional(),
});

export const portUrlCreated = z.object({
  /** A bearer capability: anyone holding it reaches the port. Shown once; stored hashed. */
  url: z.string(),
  port: z.number(),
  service: z.string().nullable(),
});

export const portUrlListed = z.object({
  id: z.string(),
  port: z.number(),
  service: z.string().nullable(),
  created_at: z.string(),
});

export const cloudConnectBody = z.strictObject({
  provider: z.string().min(1),
  name,
  /** The provider's API token: stored encrypted, never returned. */
  token: z.string().min(1).max(4096),
  server_type: z.string().min(1).max(100),
  location: z.string().min(1).max(100),
  /** Another endpoint speaking the provider's API (default: the provider's own). */
  api_url: z.url().optional(),
});

export const cloudSchema = z.object({
  name: z.string(),
  provider: z.string(),
  server_type: z.string(),
  location: z.string(),
  api_url: z.string().nullable(),
  created_at: z.string(),
  /** Machines denv created there that still exist. */
  machines: z.array(z.object({ name: z.string(), server_id: z.string(), status: z.string() })),
});

export const execResult = z.object({
  exit_code: z.number(),
  stdout: z.string(),
  stderr: z.string(),
  encoding: z.enum(["utf8", "base64"]),
  stdout_truncated: z.boolean(),
  stderr_truncated: z.boolean(),
  timed_out: z.boolean(),
  duration_ms: z.number(),
});

export const targetSchema = z.object({
  name: z.string(),
  type: z.enum(["denvd"]),
  hosts: z.number(),
  capabilities: z.object({
    multi_service_stack: z.string(),
    consistent_snapshot: z.string(),
    fork_time: z.string(),
    egress_deny_verified: z.string(),
    caps_enforced: z.string(),
    gpu: z.string(),
  }),
});

export interface RouteDoc {
  method: "get" | "post" | "put" | "delete";
  path: string;
  summary: string;
  body?: z.ZodType;
  bodyType?: "json" | "tar";
  response?: z.ZodType;
  responseType?: "json" | "tar" | "event-stream" | "any";
  status?: number;
  auth: boolean;
}

export const ROUTES: RouteDoc[] = [
  { method: "get", path: "/v1/openapi.json", summary: "This document", auth: false },
  {
    method: "get",
    path: "/install.sh",
    summary:
      "The host installer: curl -fsSL SERVER/install.sh | sh -s -- --token T --server URL [--zfs-pool NAME | --btrfs-pool PATH]",
    responseType: "any",
    auth: false,
  },
  {
    method: "get",
    path: "/v1/downloads/{file}",
    summary: "denvd executables: denvd-linux-x86_64, denvd-linux-aarch64, and denvd.version",
    responseType: "any",
    auth: false,
  },
  {
    method: "post",
    path: "/v1/teams",
    summary: "Create a team and its first API key (admin key only)",
    body: createTeamBody,
    response: teamCreated,
    status: 201,
    auth: true,
  },
  {
    method: "post",
    path: "/v1/hosts/join-token",
    summary: "Mint a single-use, expiring host join token",
    response: joinTokenCreated,
    status: 201,
    auth: true,
  },
  {
    method: "post",
    path: "/v1/hosts/join",
    summary: "Exchange a join token for a per-host secret (used by denvd join)",
    body: hostJoinBody,
    response: hostJoined,
    status: 201,
    auth: false,
  },
  {
    method: "get",
    path: "/v1/hosts",
    summary: "Hosts with what they reported",
    response: z.object({ hosts: z.array(hostSchema) }),
    auth: true,
  },
  {
    method: "post",
    path: "/v1/projects",
    summary: "Create a project",
    body: createProjectBody,
    response: projectSchema,
    status: 201,
    auth: true,
  },
  {
    method: "get",
    path: "/v1/projects",
    summary: "List projects",
    response: z.object({ projects: z.array(projectSchema) }),
    auth: true,
  },
  { method: "get", path: "/v1/projects/{id}", summary: "A project", response: projectSchema, auth: true },
  {
    method: "put",
    path: "/v1/projects/{id}/source",
    summary: "Upload a local project's compose file (and .env)",
    body: uploadSourceBody,
    response: projectSchema,
    auth: true,
  },
  {
    method: "post",
    path: "/v1/projects/{id}/deploy",
    summary: "Deploy the project to an environment (alpha by default); ?wait=true waits for the verdict",
    body: deployBody,
    response: deploymentSchema,
    status: 202,
    auth: true,
  },
  {
    method: "get",
    path: "/v1/deployments/{id}",
    summary: "A deployment and its phase log with evidence",
    response: deploymentSchema,
    auth: true,
  },
  {
    method: "get",
    path: "/v1/deployments/{id}/events",
    summary: "Live phase updates (server-sent events) until the verdict",
    responseType: "event-stream",
    auth: true,
  },
  {
    method: "get",
    path: "/v1/envs",
    summary: "List environments",
    response: z.object({ environments: z.array(environmentSchema) }),
    auth: true,
  },
  {
    method: "get",
    path: "/v1/envs/{id}",
    summary: "An environment (by id, name, or project/name)",
    response: environmentSchema,
    auth: true,
  },
  {
    method: "get",
    path: "/v1/envs/{id}/deployments",
    summary: "An environment's deployments",
    response: z.object({ deployments: z.array(deploymentSchema) }),
    auth: true,
  },
  {
    method: "delete",
    path: "/v1/envs/{id}",
    summary: "Destroy an environment",
    response: deploymentSchema,
    auth: true,
  },
  {
    method: "post",
    path: "/v1/envs/{id}/snapshot",
    summary: "Capture the live state as a new version",
    response: deploymentSchema,
    auth: true,
  },
  {
    method: "post",
    path: "/v1/envs/{id}/fork",
    summary: "A new environment from this environment's current version",
    body: forkBody,
    response: environmentSchema,
    status: 201,
    auth: true,
  },
  {
    method: "post",
    path: "/v1/envs/{id}/rollback",
    summary: "Restore a version and re-check health",
    body: rollbackBody,
    response: deploymentSchema,
    auth: true,
  },
  {
    method: "post",
    path: "/v1/envs/{id}/verify",
    summary:
      "Grade the environment on a fork as a separate principal: stop, collect, snapshot, clone, grade, verdict",
    body: verifyBody,
    response: deploymentSchema,
    auth: true,
  },
  {
    method: "post",
    path: "/v1/envs/{id}/exec",
    summary: "Run a command in a service (?stream=true: NDJSON output chunks as they come, then the result)",
    body: execBody,
    response: execResult,
    auth: true,
  },
  {
    method: "put",
    path: "/v1/envs/{id}/files",
    summary: "Extract a tar at ?path= in ?service=",
    bodyType: "tar",
    response: z.object({ entries: z.number(), bytes: z.number() }),
    auth: true,
  },
  {
    method: "get",
    path: "/v1/envs/{id}/files",
    summary: "A tar of ?path= in ?service=",
    responseType: "tar",
    auth: true,
  },
  {
    method: "post",
    path: "/v1/envs/{id}/ports/{port}",
    summary:
      "A URL reaching a TCP port inside a service (HTTP and WebSocket), relayed through the host's connection; the URL is the credential",
    body: portUrlBody,
    response: portUrlCreated,
    status: 201,
    auth: true,
  },
  {
    method: "get",
    path: "/v1/envs/{id}/ports",
    summary: "The environment's port URLs (never their tokens, which are shown once)",
    response: z.object({ ports: z.array(portUrlListed) }),
    auth: true,
  },
  {
    method: "delete",
    path: "/v1/envs/{id}/ports",
    summary: "Revoke every port URL of the environment",
    response: z.object({ revoked: z.number() }),
    auth: true,
  },
  {
    method: "delete",
    path: "/v1/envs/{id}/ports/{port}",
    summary: "Revoke the environment's port URLs to one port",
    response: z.object({ revoked: z.number() }),
    auth: true,
  },
  {
    method: "get",
    path: "/v1/tunnels/{token}/{path}",
    summary:
      "Any method, and WebSocket upgrades: relayed to the port a port URL names, with {path} as the request path",
    responseType: "any",
    auth: false,
  },
  {
    method: "post",
    path: "/v1/envs/{id}/services/{service}/stop",
    summary: "Stop one service's container; the rest of the environment keeps running",
    response: z.object({ stopped: z.string() }),
    auth: true,
  },
  { method: "get", path: "/v1/versions/{id}", summary: "A version", response: versionSchema, auth: true },
  {
    method: "post",
    path: "/v1/sandboxes",
    summary: "A sandbox for one episode: {from_version} or {image, cmd, env, ports, volumes, egress}",
    body: sandboxBody,
    response: environmentSchema,
    status: 201,
    auth: true,
  },
  {
    method: "post",
    path: "/v1/clouds",
    summary:
      "Connect a cloud account (hetzner) the provision phase creates machines in; the token is checked, then stored encrypted",
    body: cloudConnectBody,
    response: cloudSchema,
    status: 201,
    auth: true,
  },
  {
    method: "get",
    path: "/v1/clouds",
    summary: "Connected cloud accounts (never their tokens) and the machines denv made there",
    response: z.object({ clouds: z.array(cloudSchema) }),
    auth: true,
  },
  {
    method: "delete",
    path: "/v1/clouds/{name}",
    summary: "Disconnect a cloud account (its machines are left as they are)",
    response: z.object({ deleted: z.string() }),
    auth: true,
  },
  {
    method: "get",
    path: "/v1/targets",
    summary: "Targets with their capability rows",
    response: z.object({ targets: z.array(targetSchema) }),
    auth: true,
  },
  {
    method: "post",
    path: "/v1/targets/{name}/sandboxes",
    summary: "A sandbox on a named target",
    body: sandboxBody,
    response: environmentSchema,
    status: 201,
    auth: true,
  },
];

/** The OpenAPI 3.1 document, generated from the schemas above. */
export function openApiDocument(serverUrl?: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  const json = (schema: z.ZodType) => z.toJSONSchema(schema, { io: "input", unrepresentable: "any" });
  for (const r of ROUTES) {
    const op: Record<string, unknown> = {
      summary: r.summary,
      operationId: `${r.method}${r.path.replace(/\{(\w+)\}/g, "By_$1").replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ? c.toUpperCase() : ""))}`,
      ...(r.auth ? {} : { security: [] }),
      parameters: [...r.path.matchAll(/\{(\w+)\}/g)].map((m) => ({
        name: m[1],
        in: "path",
        required: true,
        schema: { type: "string" },
      })),
      responses: {
        [String(r.status ?? 200)]: {
          description: "success",
          content:
            r.responseType === "tar"
              ? { "application/x-tar": { schema: { type: "string", format: "binary" } } }
              : r.responseType === "any"
                ? { "*/*": { schema: {} } }
                : r.responseType === "event-stream"
                  ? { "text/event-stream": { schema: { type: "string" } } }
                  : r.response
                    ? { "application/json": { schema: json(r.response) } }
                    : { "application/json": { schema: {} } },
        },
        default: { description: "error", content: { "application/json": { schema: json(errorSchema) } } },
      },
    };
    if (r.body)
      op.requestBody = { required: true, content: { "application/json": { schema: json(r.body) } } };
    if (r.bodyType === "tar")
      op.requestBody = {
        required: true,
        content: { "application/x-tar": { schema: { type: "string", format: "binary" } } },
      };
    paths[r.path] ??= {};
    (paths[r.path] as Record<string, unknown>)[r.method] = op;
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "denv",
      version: "1",
      description: "Versioned, forkable environments for agents and reinforcement learning.",
    },
    ...(serverUrl ? { servers: [{ url: serverUrl }] } : {}),
    components: { securitySchemes: { bearer: { type: "http", scheme: "bearer" } } },
    security: [{ bearer: [] }],
    paths,
  };
}
