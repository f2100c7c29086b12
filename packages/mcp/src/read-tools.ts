/**
 * The tools that change nothing: the team's projects, environments and versions, a deployment's
 * record, an environment's logs, reading and listing files, and an episode's diff. They are all that `denv mcp --read-only`
 * offers.
 */
import { type DenvClient, Files, type LogLine } from "@denv/sdk";
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { decodeBytes } from "./tool-results.ts";
import {
  deploymentOut,
  deploymentResult,
  environment,
  environmentOut,
  envResult,
  guarded,
  path,
  READ_DEFAULT_BYTES,
  READ_MAX_BYTES,
  service,
  user,
} from "./tool-schemas.ts";

/** Lines of each service read_logs gives by default, and at most. */
const LOGS_DEFAULT_LINES = 100;
const LOGS_MAX_LINES = 1000;

export function registerReadTools(server: McpServer, client: DenvClient): void {
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
        projects: (await client.projects.list()).projects.map((p) => ({
          id: p.id,
          name: p.name,
          kind: p.kind,
          created_at: p.created_at,
        })),
      })),
  );

  server.registerTool(
    "egress_log",
    {
      title: "An environment's egress log",
      description:
        "An environment's egress policy now and its last connections through its egress proxy: the service, the destination, allowed or refused and by which rule, bytes each way.",
      inputSchema: { environment },
      outputSchema: {
        policy: z.object({ allow: z.array(z.string()), deny: z.array(z.string()) }).nullable(),
        records: z.array(
          z.object({
            at: z.string(),
            service: z.string().nullable(),
            destination: z.string(),
            allowed: z.boolean(),
            rule: z.string().nullable(),
            reason: z.string(),
            bytes_out: z.number(),
            bytes_in: z.number(),
          }),
        ),
        earlier: z.number(),
      },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    ({ environment: env }) =>
      guarded(async () => {
        const r = await client.envs.egress(env);
        const last = r.records.slice(-200);
        return {
          policy: r.policy,
          records: last.map((x) => ({
            at: x.at,
            service: x.service,
            destination: x.destination,
            allowed: x.allowed,
            rule: x.rule,
            reason: x.reason,
            bytes_out: x.bytes_out,
            bytes_in: x.bytes_in,
          })),
          earlier: r.earlier + r.records.length - last.length,
        };
      }),
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
        const all = (await client.envs.list()).environments;
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
        versions: (await client.versions.list({ query: { project } })).versions.map((v) => ({
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
    ({ deployment }) => guarded(async () => deploymentResult(await client.deployments.get(deployment))),
  );

  server.registerTool(
    "read_logs",
    {
      title: "Read logs",
      description:
        "What the environment's services wrote (stdout and stderr, each line with its service and time), the last `tail` lines of each service, as `docker compose logs`.",
      inputSchema: {
        environment,
        service: z.string().min(1).max(63).optional().describe("One service (default: every service)"),
        tail: z
          .number()
          .int()
          .min(1)
          .max(LOGS_MAX_LINES)
          .optional()
          .describe(`Lines of each service (default ${LOGS_DEFAULT_LINES}, at most ${LOGS_MAX_LINES})`),
      },
      outputSchema: {
        lines: z.array(
          z.object({
            service: z.string(),
            stream: z.enum(["stdout", "stderr"]),
            time: z.string(),
            line: z.string(),
          }),
        ),
      },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    (args) =>
      guarded(async () => {
        const lines: LogLine[] = [];
        await client.logs(
          args.environment,
          { tail: args.tail ?? LOGS_DEFAULT_LINES, ...(args.service ? { service: args.service } : {}) },
          (l) => {
            // A line is at most 64 KiB on the wire; an agent's context gets the first 2 KiB of each.
            lines.push({ ...l, line: l.line.length > 2048 ? `${l.line.slice(0, 2048)}…` : l.line });
          },
        );
        return { lines };
      }),
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
    "diff_environment",
    {
      title: "What an environment's episode changed",
      description:
        "Every volume's paths created, modified (content, mode, owner, link target) and deleted since a version (default: the one the environment was forked from), with sizes and unified diffs of text files, and rows changed per PostgreSQL table (approximate). Links are reported, never followed.",
      inputSchema: {
        environment,
        against: z.string().min(1).max(200).optional().describe("The version to compare with (ver_…)"),
        max_entries: z.number().int().min(1).max(10_000).optional().describe("Changes listed (default 1000)"),
      },
      outputSchema: {
        against: z.string(),
        summary: z.object({ created: z.number(), deleted: z.number(), modified: z.number() }).loose(),
        entries: z.array(z.object({ volume: z.string(), path: z.string(), change: z.string() }).loose()),
        truncated: z.boolean(),
        databases: z.array(z.object({ service: z.string() }).loose()),
      },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    (args) =>
      guarded(async () => {
        const d = await client.envs.diff(args.environment, {
          query: {
            ...(args.against ? { against: args.against } : {}),
            max_entries: String(args.max_entries ?? 1000),
          },
        });
        return {
          against: d.against,
          summary: d.summary,
          entries: d.entries,
          truncated: d.truncated,
          databases: d.databases,
        };
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
}
