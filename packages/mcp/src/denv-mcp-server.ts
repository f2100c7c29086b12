/**
 * denv as Model Context Protocol tools: an agent harness or an assistant gets a sandbox of a
 * version, works in it (exec, files), snapshots it and has it graded, with no denv-specific
 * client. Every tool is a client of /v1 through the SDK with the caller's key, so team scoping,
 * rate limits and checks are the API's own; the same server runs over stdio (`denv mcp`) and over
 * Streamable HTTP (`/v1/mcp`).
 *
 * No tool hands out a key: results carry ids, output and URLs, never the caller's credentials,
 * and exec adds nothing to a command's environment, so an agent inside a sandbox never receives a
 * key through MCP.
 */
import { randomBytes } from "node:crypto";
import { apiError, type DenvClient, Files, NotFoundError, type Operations } from "@denv/sdk";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { registerDenvResources } from "./denv-resources.ts";
import {
  followDeployment,
  reporter,
  type ToolExtra,
  undoCreation,
  watchCreation,
} from "./operation-progress.ts";
import { decodeBytes, toolError, toolOk } from "./tool-results.ts";

export interface DenvMcpOptions {
  client: DenvClient;
  /** Only the tools that change nothing (lists, reads, the deployment record). */
  readOnly?: boolean;
  /** Reported to clients as the server's version. */
  version?: string;
}

/** What exec keeps of each stream unless asked otherwise: a model's context is the limit. */
export const EXEC_OUTPUT_DEFAULT_BYTES = 64 * 1024;
export const EXEC_OUTPUT_MAX_BYTES = 4 * 1024 * 1024;
/** What read_file returns unless asked otherwise, and at most. */
export const READ_DEFAULT_BYTES = 256 * 1024;
export const READ_MAX_BYTES = 4 * 1024 * 1024;

const environment = z
  .string()
  .min(1)
  .max(300)
  .describe("The environment: its id (env_…), its name, or project/name");
const service = z
  .string()
  .min(1)
  .max(200)
  .optional()
  .describe("The service (default: the environment's agent service, else its first)");
const user = z
  .string()
  .min(1)
  .max(200)
  .optional()
  .describe("Who runs it or touches the file (default: the service's own user)");
const path = z.string().min(1).max(4096).describe("An absolute path inside the service");

const environmentOut = {
  id: z.string(),
  name: z.string(),
  project: z.string(),
  status: z.string(),
  current_version_id: z.string().nullable(),
  parent_version_id: z.string().nullable(),
  sandbox: z.boolean(),
  services: z.array(z.string()),
  created_at: z.string(),
};
const deploymentOut = {
  deployment_id: z.string(),
  kind: z.string(),
  status: z.string(),
  reason: z.string().nullable(),
  version_id: z.string().nullable(),
  phases: z.array(
    z.object({
      name: z.string(),
      status: z.string(),
      duration_ms: z.number().nullable(),
      reason: z.string().nullable(),
    }),
  ),
};

type EnvInfo = Operations["getV1EnvsById"]["response"];
type DeploymentInfo = Operations["getV1DeploymentsById"]["response"];

function envResult(e: EnvInfo) {
  return {
    id: e.id,
    name: e.name,
    project: e.project,
    status: e.status,
    current_version_id: e.current_version_id,
    parent_version_id: e.parent_version_id,
    sandbox: e.sandbox,
    services: e.services,
    created_at: e.created_at,
  };
}

function deploymentResult(d: DeploymentInfo) {
  return {
    deployment_id: d.id,
    kind: d.kind,
    status: d.status,
    reason: d.reason,
    version_id: d.version_id,
    phases: d.phases.map((p) => ({
      name: p.name,
      status: p.status,
      duration_ms: p.duration_ms,
      reason: p.reason,
    })),
  };
}

/** Runs a tool body; a denv error becomes a tool error with its code. */
async function guarded(body: () => Promise<Record<string, unknown>>) {
  try {
    return toolOk(await body());
  } catch (err) {
    return toolError(err);
  }
}

const newName = () => `mcp-${randomBytes(4).toString("hex")}`;

/** The MCP server for one key: its tools and resources, registered on a fresh McpServer. */
export function createDenvMcpServer(options: DenvMcpOptions): McpServer {
  const { client } = options;
  const server = new McpServer(
    { name: "denv", version: options.version ?? "0.1.0" },
    {
      instructions:
        "denv runs whole environments (a database with data, a queue, a box with a shell) as versions " +
        "that fork in about a second. Typical episode: list_versions → create_sandbox {from_version} → " +
        "exec / read_file / write_file in it → verify (the reward) → destroy. Tools accept an " +
        "environment's id, name or project/name.",
    },
  );
  const readOnly = options.readOnly ?? false;
  const mutating = (register: () => void) => {
    if (!readOnly) register();
  };

  server.registerTool(
    "list_projects",
    {
      title: "List projects",
      description: "The team's projects (each a compose file with an x-denv block).",
      inputSchema: {},
      outputSchema: {
        projects: z.array(
          z.object({ id: z.string(), name: z.string(), kind: z.string(), created_at: z.string() }),
        ),
      },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    () =>
      guarded(async () => ({
        projects: (await client.call("getV1Projects", {})).projects.map((p) => ({
          id: p.id,
          name: p.name,
          kind: p.kind,
          created_at: p.created_at,
        })),
      })),
  );

  server.registerTool(
    "list_environments",
    {
      title: "List environments",
      description:
        "The team's environments (deployed ones, forks and sandboxes), with status and the version each is at.",
      inputSchema: { project: z.string().min(1).max(200).optional().describe("Only this project's") },
      outputSchema: { environments: z.array(z.object(environmentOut)) },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    ({ project }) =>
      guarded(async () => {
        const all = (await client.call("getV1Envs", {})).environments;
        return { environments: all.filter((e) => !project || e.project === project).map(envResult) };
      }),
  );

  server.registerTool(
    "list_versions",
    {
      title: "List versions",
      description:
        "Frozen versions, newest first: every image pinned and one snapshot of every volume. A sandbox is made from one.",
      inputSchema: { project: z.string().min(1).max(200).optional().describe("Only this project's") },
      outputSchema: {
        versions: z.array(
          z.object({
            id: z.string(),
            project: z.string(),
            environment: z.string(),
            created_at: z.string(),
            images: z.record(z.string(), z.string()),
          }),
        ),
      },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    ({ project }) =>
      guarded(async () => ({
        versions: (await client.call("getV1Versions", { query: { project } })).versions.map((v) => ({
          id: v.id,
          project: v.project,
          environment: v.environment,
          created_at: v.created_at,
          images: v.images,
        })),
      })),
  );

  server.registerTool(
    "get_deployment",
    {
      title: "Read a deployment",
      description:
        "A deployment's record: kind, status, verdict reason and each phase (the full evidence is the resource denv://deployments/{id}/log).",
      inputSchema: { deployment: z.string().min(1).max(200).describe("The deployment id (dep_…)") },
      outputSchema: deploymentOut,
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    ({ deployment }) =>
      guarded(async () =>
        deploymentResult(await client.call("getV1DeploymentsById", { params: { id: deployment } })),
      ),
  );

  server.registerTool(
    "read_file",
    {
      title: "Read a file",
      description:
        "A file's contents as its service's user sees it (links are not followed). Text comes back as UTF-8, anything else as base64; at most max_bytes are returned and `truncated` says when there was more.",
      inputSchema: {
        environment,
        path,
        service,
        user,
        max_bytes: z
          .number()
          .int()
          .positive()
          .max(READ_MAX_BYTES)
          .optional()
          .describe(`Bytes returned at most (default ${READ_DEFAULT_BYTES}, at most ${READ_MAX_BYTES})`),
      },
      outputSchema: {
        path: z.string(),
        size: z.number(),
        encoding: z.enum(["utf8", "base64"]),
        content: z.string(),
        truncated: z.boolean(),
      },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    (args) =>
      guarded(async () => {
        const who = {
          ...(args.service ? { service: args.service } : {}),
          ...(args.user ? { user: args.user } : {}),
        };
        const files = new Files(client, args.environment);
        const limit = args.max_bytes ?? READ_DEFAULT_BYTES;
        const stream = await files.readStream(args.path, who);
        const chunks: Buffer[] = [];
        let kept = 0;
        let truncated = false;
        for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) {
          const room = limit - kept;
          if (chunk.length > room) {
            chunks.push(Buffer.from(chunk.subarray(0, room)));
            kept = limit;
            truncated = true;
            break;
          }
          chunks.push(Buffer.from(chunk));
          kept += chunk.length;
        }
        const size = truncated ? (await files.stat(args.path, who)).size : kept;
        const decoded = decodeBytes(Buffer.concat(chunks));
        return { path: args.path, size, encoding: decoded.encoding, content: decoded.text, truncated };
      }),
  );

  server.registerTool(
    "list_files",
    {
      title: "List a directory",
      description:
        "A directory's entries (type, size, mode, owner, modified time), depth levels down; links are listed, not entered.",
      inputSchema: {
        environment,
        path,
        service,
        user,
        depth: z.number().int().min(1).max(8).optional().describe("Levels down (default 1)"),
      },
      outputSchema: {
        entries: z.array(
          z.object({ name: z.string(), path: z.string(), type: z.string(), size: z.number() }).loose(),
        ),
      },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    (args) =>
      guarded(async () => {
        const files = new Files(client, args.environment);
        const entries = await files.list(args.path, {
          ...(args.service ? { service: args.service } : {}),
          ...(args.user ? { user: args.user } : {}),
          ...(args.depth ? { depth: args.depth } : {}),
        });
        return { entries };
      }),
  );

  mutating(() =>
    server.registerTool(
      "create_sandbox",
      {
        title: "Create a sandbox",
        description:
          "A new running environment: a fork of a version (from_version: every service, with the version's data), or a one-service sandbox from an image. Reports each phase as progress; cancelling it destroys what it made.",
        inputSchema: {
          from_version: z.string().min(1).max(200).optional().describe("A version id (ver_…) to fork"),
          image: z.string().min(1).max(500).optional().describe("An image, for a one-service sandbox"),
          cmd: z.array(z.string()).max(256).optional().describe("The image sandbox's command"),
          env: z.record(z.string(), z.string()).optional().describe("The image sandbox's environment"),
          user: z.string().max(200).optional().describe("The image sandbox's user (default: the image's)"),
          egress: z.enum(["deny", "allow"]).optional().describe("The image sandbox's egress (default deny)"),
          name: z
            .string()
            .regex(/^[a-z0-9][a-z0-9-]{0,62}$/)
            .optional()
            .describe("Its name (default: mcp-<random>)"),
        },
        outputSchema: environmentOut,
        annotations: { readOnlyHint: false, destructiveHint: false, openWorldHint: false },
      },
      (args, extra) =>
        guarded(async () => {
          if (!args.from_version === !args.image)
            throw apiError("invalid_argument", "give from_version or image (one of them)", 400);
          const name = args.name ?? newName();
          const body = args.from_version
            ? { from_version: args.from_version, name }
            : {
                image: args.image as string,
                name,
                ...(args.cmd ? { cmd: args.cmd } : {}),
                ...(args.env ? { env: args.env } : {}),
                ...(args.user ? { user: args.user } : {}),
                ...(args.egress ? { egress: args.egress } : {}),
              };
          return envResult(
            await creation(client, name, extra as unknown as ToolExtra, () =>
              client.call("postV1Sandboxes", { body }),
            ),
          );
        }),
    ),
  );

  mutating(() =>
    server.registerTool(
      "fork",
      {
        title: "Fork an environment",
        description:
          "A new environment from this one's current version (snapshotted first when it has none), in about a second. Reports progress; cancelling it destroys what it made.",
        inputSchema: {
          environment,
          name: z
            .string()
            .regex(/^[a-z0-9][a-z0-9-]{0,62}$/)
            .optional()
            .describe("The fork's name (default: mcp-<random>)"),
        },
        outputSchema: environmentOut,
        annotations: { readOnlyHint: false, destructiveHint: false, openWorldHint: false },
      },
      (args, extra) =>
        guarded(async () => {
          const name = args.name ?? newName();
          return envResult(
            await creation(client, name, extra as unknown as ToolExtra, () =>
              client.call("postV1EnvsByIdFork", { params: { id: args.environment }, body: { name } }),
            ),
          );
        }),
    ),
  );

  mutating(() =>
    server.registerTool(
      "exec",
      {
        title: "Run a command",
        description:
          "Runs a command in a service (argv, or a string for sh -c) and returns its exit code and output. Each of stdout and stderr is kept up to max_output_bytes; `*_truncated` and `*_dropped_bytes` say what was cut. A timeout kills every process the command started (exit 137, timed_out true).",
        inputSchema: {
          environment,
          command: z
            .union([z.string().min(1), z.array(z.string()).min(1)])
            .describe("argv, or a shell string run with sh -c"),
          service,
          user,
          cwd: z.string().max(4096).optional().describe("The working directory (default: the user's home)"),
          env: z.record(z.string(), z.string()).optional().describe("Added to the command's environment"),
          stdin: z.string().optional().describe("Standard input, as text"),
          timeout_ms: z
            .number()
            .int()
            .positive()
            .max(3600_000)
            .optional()
            .describe("Kill after this long (default: the server's)"),
          max_output_bytes: z
            .number()
            .int()
            .positive()
            .max(EXEC_OUTPUT_MAX_BYTES)
            .optional()
            .describe(
              `Bytes kept of each stream (default ${EXEC_OUTPUT_DEFAULT_BYTES}, at most ${EXEC_OUTPUT_MAX_BYTES})`,
            ),
        },
        outputSchema: {
          exit_code: z.number(),
          stdout: z.string(),
          stderr: z.string(),
          stdout_encoding: z.enum(["utf8", "base64"]),
          stderr_encoding: z.enum(["utf8", "base64"]),
          stdout_truncated: z.boolean(),
          stderr_truncated: z.boolean(),
          stdout_dropped_bytes: z.number(),
          stderr_dropped_bytes: z.number(),
          output_limit_bytes: z.number(),
          timed_out: z.boolean(),
          duration_ms: z.number(),
        },
        annotations: { readOnlyHint: false, destructiveHint: true, openWorldHint: false },
      },
      (args) =>
        guarded(async () => {
          const limit = args.max_output_bytes ?? EXEC_OUTPUT_DEFAULT_BYTES;
          const r = await client.call("postV1EnvsByIdExec", {
            params: { id: args.environment },
            body: {
              command: args.command,
              ...(args.service ? { service: args.service } : {}),
              ...(args.user ? { user: args.user } : {}),
              ...(args.cwd ? { cwd: args.cwd } : {}),
              ...(args.env ? { env: args.env } : {}),
              ...(args.stdin !== undefined ? { stdin: Buffer.from(args.stdin).toString("base64") } : {}),
              ...(args.timeout_ms ? { timeout_ms: args.timeout_ms } : {}),
              max_output_bytes: limit,
              encoding: "base64",
            },
          });
          const out = decodeBytes(Buffer.from(r.stdout, "base64"));
          const err = decodeBytes(Buffer.from(r.stderr, "base64"));
          return {
            exit_code: r.exit_code,
            stdout: out.text,
            stderr: err.text,
            stdout_encoding: out.encoding,
            stderr_encoding: err.encoding,
            stdout_truncated: r.stdout_truncated,
            stderr_truncated: r.stderr_truncated,
            stdout_dropped_bytes: r.stdout_dropped_bytes,
            stderr_dropped_bytes: r.stderr_dropped_bytes,
            output_limit_bytes: limit,
            timed_out: r.timed_out,
            duration_ms: r.duration_ms,
          };
        }),
    ),
  );

  mutating(() =>
    server.registerTool(
      "write_file",
      {
        title: "Write a file",
        description:
          "Writes a file (made or overwritten) as the service's user, making missing parents. Never replaces a directory; the user's permissions hold.",
        inputSchema: {
          environment,
          path,
          content: z.string().describe("The contents: text, or base64 with encoding base64"),
          encoding: z.enum(["utf8", "base64"]).optional().describe("How content is given (default utf8)"),
          mode: z.number().int().min(0).max(0o7777).optional().describe("Permission bits (default 0644)"),
          service,
          user,
        },
        outputSchema: { path: z.string(), bytes: z.number() },
        annotations: { readOnlyHint: false, destructiveHint: true, openWorldHint: false },
      },
      (args) =>
        guarded(async () => {
          const bytes = Buffer.from(args.content, args.encoding === "base64" ? "base64" : "utf8");
          await new Files(client, args.environment).write(args.path, bytes, {
            ...(args.service ? { service: args.service } : {}),
            ...(args.user ? { user: args.user } : {}),
            ...(args.mode !== undefined ? { mode: args.mode } : {}),
          });
          return { path: args.path, bytes: bytes.length };
        }),
    ),
  );

  mutating(() =>
    server.registerTool(
      "snapshot",
      {
        title: "Snapshot an environment",
        description:
          "Freezes the live state into a new immutable version (every volume in one consistent snapshot). Reports each phase; cancelling stops waiting, the snapshot itself completes or is undone on the server.",
        inputSchema: { environment },
        outputSchema: deploymentOut,
        annotations: { readOnlyHint: false, destructiveHint: false, openWorldHint: false },
      },
      (args, extra) =>
        guarded(async () =>
          deploymentResult(
            await verdict(client, extra as unknown as ToolExtra, () =>
              client.call("postV1EnvsByIdSnapshot", {
                params: { id: args.environment },
                query: { wait: "false" },
              }),
            ),
          ),
        ),
    ),
  );

  mutating(() =>
    server.registerTool(
      "verify",
      {
        title: "Grade an environment",
        description:
          "Grades the environment's current state on a fork, as a separate principal the agent cannot tamper with. Returns the reward and why (the verifier's reason, the verdict's reason, and each phase).",
        inputSchema: {
          environment,
          resume: z
            .boolean()
            .optional()
            .describe("Let the agent go on after grading (default: it stays frozen)"),
        },
        outputSchema: {
          reward: z.number().nullable(),
          reasons: z.array(z.string()),
          verifier_exit_code: z.number().nullable(),
          ...deploymentOut,
        },
        annotations: { readOnlyHint: false, destructiveHint: false, openWorldHint: false },
      },
      (args, extra) =>
        guarded(async () => {
          const d = await verdict(client, extra as unknown as ToolExtra, () =>
            client.call("postV1EnvsByIdVerify", {
              params: { id: args.environment },
              body: { resume: args.resume ?? false },
              query: { wait: "false" },
            }),
          );
          const reasons = [
            ...(d.verify?.reason ? [`verifier: ${d.verify.reason}`] : []),
            ...(d.reason ? [`verdict: ${d.reason}`] : []),
            ...d.phases.filter((p) => p.reason).map((p) => `${p.name}: ${p.reason}`),
          ];
          return {
            reward: d.verify?.reward ?? null,
            reasons,
            verifier_exit_code: d.verify?.exit_code ?? null,
            ...deploymentResult(d),
          };
        }),
    ),
  );

  mutating(() =>
    server.registerTool(
      "rollback",
      {
        title: "Roll an environment back",
        description:
          "Restores a version in place (default: the environment's current version), discarding every change since. Processes restart.",
        inputSchema: {
          environment,
          version: z.string().min(1).max(200).optional().describe("The version to restore (ver_…)"),
        },
        outputSchema: deploymentOut,
        annotations: {
          readOnlyHint: false,
          destructiveHint: true,
          idempotentHint: false,
          openWorldHint: false,
        },
      },
      (args, extra) =>
        guarded(async () => {
          const version =
            args.version ??
            (await client.call("getV1EnvsById", { params: { id: args.environment } })).current_version_id;
          if (!version)
            throw apiError(
              "conflict",
              `${args.environment} has no version to roll back to; snapshot it first`,
              409,
            );
          return deploymentResult(
            await verdict(client, extra as unknown as ToolExtra, () =>
              client.call("postV1EnvsByIdRollback", {
                params: { id: args.environment },
                body: { version },
                query: { wait: "false" },
              }),
            ),
          );
        }),
    ),
  );

  mutating(() =>
    server.registerTool(
      "destroy",
      {
        title: "Destroy an environment",
        description:
          "Removes the environment's containers and data (its versions stay). Idempotent: destroying a destroyed one succeeds.",
        inputSchema: { environment },
        outputSchema: { environment: z.string(), destroyed: z.boolean() },
        annotations: {
          readOnlyHint: false,
          destructiveHint: true,
          idempotentHint: true,
          openWorldHint: false,
        },
      },
      (args, extra) =>
        guarded(async () => {
          try {
            const d = await verdict(client, extra as unknown as ToolExtra, () =>
              client.call("deleteV1EnvsById", { params: { id: args.environment }, query: { wait: "false" } }),
            );
            return { environment: args.environment, destroyed: d.status === "succeeded" };
          } catch (err) {
            if (err instanceof NotFoundError) return { environment: args.environment, destroyed: false };
            throw err;
          }
        }),
    ),
  );

  mutating(() =>
    server.registerTool(
      "port_url",
      {
        title: "A URL to a port",
        description:
          "A URL reaching a TCP port inside a service (HTTP and WebSocket), relayed through the host. The URL is the credential: share it only with whoever may use the service.",
        inputSchema: {
          environment,
          port: z.number().int().min(1).max(65535),
          service,
        },
        outputSchema: { url: z.string(), port: z.number(), service: z.string().nullable() },
        annotations: { readOnlyHint: false, destructiveHint: false, openWorldHint: true },
      },
      (args) =>
        guarded(async () => {
          const r = await client.call("postV1EnvsByIdPortsByPort", {
            params: { id: args.environment, port: String(args.port) },
            body: args.service ? { service: args.service } : {},
          });
          return { url: r.url, port: r.port, service: r.service };
        }),
    ),
  );

  registerDenvResources(server, client);
  return server;
}

/**
 * Makes an environment with `make`, reporting its phases; a cancelled call is undone (the
 * environment destroyed once the server has finished making it) before the cancellation is
 * reported as an error.
 */
async function creation(
  client: DenvClient,
  name: string,
  extra: ToolExtra,
  make: () => Promise<EnvInfo>,
): Promise<EnvInfo> {
  const sinceMs = Date.now();
  const making = make();
  void watchCreation(client, name, sinceMs, reporter(extra), making);
  const cancelled = new Promise<never>((_, reject) => {
    const abort = () => reject(apiError("cancelled", `${name}: cancelled; what it made is removed`, 499));
    if (extra.signal.aborted) abort();
    else extra.signal.addEventListener("abort", abort, { once: true });
  });
  try {
    return await Promise.race([making, cancelled]);
  } catch (err) {
    if (extra.signal.aborted) await undoCreation(client, making, name, sinceMs);
    throw err;
  }
}

/** Starts an operation that answers 202 with its deployment, then follows it to the verdict. */
async function verdict(
  client: DenvClient,
  extra: ToolExtra,
  start: () => Promise<DeploymentInfo>,
): Promise<DeploymentInfo> {
  const d = await start();
  if (d.status !== "running" && d.status !== "queued") return d;
  return followDeployment(client, d.id, reporter(extra), extra.signal);
}
