/**
 * The tools that change something: sandboxes made (from a version or an image) and forked, exec,
 * files written, snapshot, pause and resume, verify, rollback, destroy and port URLs. Long ones report their phases
 * as progress; a cancelled creation is undone.
 */
import { MAX_COMMAND_TIMEOUT_MS } from "@denv/protocol";
import { apiError, type DenvClient, Files, NotFoundError } from "@denv/sdk";
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import {
  followDeployment,
  reporter,
  type ToolExtra,
  undoCreation,
  watchCreation,
} from "./operation-progress.ts";
import { decodeBytes } from "./tool-results.ts";
import {
  type DeploymentInfo,
  deploymentOut,
  deploymentResult,
  type EnvInfo,
  EXEC_OUTPUT_DEFAULT_BYTES,
  EXEC_OUTPUT_MAX_BYTES,
  environment,
  environmentOut,
  envResult,
  guarded,
  newName,
  path,
  service,
  user,
} from "./tool-schemas.ts";

export function registerWriteTools(server: McpServer, client: DenvClient): void {
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
          await creation(client, name, extra as unknown as ToolExtra, () => client.sandboxes.create(body)),
        );
      }),
  );

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
            client.envs.fork(args.environment, { name }),
          ),
        );
      }),
  );

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
          .max(MAX_COMMAND_TIMEOUT_MS)
          .optional()
          .describe("Kill after this long (default: none; at most 24 hours)"),
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
        const r = await client.exec(args.environment, {
          command: args.command,
          ...(args.service ? { service: args.service } : {}),
          ...(args.user ? { user: args.user } : {}),
          ...(args.cwd ? { cwd: args.cwd } : {}),
          ...(args.env ? { env: args.env } : {}),
          ...(args.stdin !== undefined ? { stdin: Buffer.from(args.stdin).toString("base64") } : {}),
          ...(args.timeout_ms ? { timeout_ms: args.timeout_ms } : {}),
          max_output_bytes: limit,
          encoding: "base64",
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
  );

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
  );

  server.registerTool(
    "snapshot",
    {
      title: "Snapshot an environment",
      description:
        "Freezes the live state into a new immutable version (every volume in one consistent snapshot; with live, every service's processes too, which its forks continue from). Reports each phase; cancelling stops waiting, the snapshot itself completes or is undone on the server.",
      inputSchema: {
        environment,
        live: z
          .enum(["on", "best-effort"])
          .optional()
          .describe("keep every service's processes too (best-effort: those that can be taken)"),
      },
      outputSchema: deploymentOut,
      annotations: { readOnlyHint: false, destructiveHint: false, openWorldHint: false },
    },
    (args, extra) =>
      guarded(async () =>
        deploymentResult(
          await verdict(client, extra as unknown as ToolExtra, () =>
            client.envs.snapshot(
              args.environment,
              args.live ? { live: args.live === "on" ? true : "best-effort" } : {},
              { query: { wait: "false" } },
            ),
          ),
        ),
      ),
  );

  // Pause and resume: one environment in, the environment as it then is out.
  const lifecycleTools: [string, string, string, (env: string) => Promise<EnvInfo>][] = [
    [
      "pause",
      "Pause an environment, keeping its memory",
      "Writes every service's running processes to disk with their memory and stops them (containers and volumes stay); resume carries on where they were. Refused, naming the process, where one cannot be taken.",
      (env) => client.envs.pause(env),
    ],
    [
      "resume",
      "Resume a paused environment",
      "Starts a paused environment's services from the processes its pause kept, carrying on where they were (or thaws one a verify left frozen).",
      (env) => client.envs.resume(env),
    ],
  ];
  for (const [name, title, description, call] of lifecycleTools)
    server.registerTool(
      name,
      {
        title,
        description,
        inputSchema: { environment },
        outputSchema: environmentOut,
        annotations: { readOnlyHint: false, destructiveHint: false, openWorldHint: false },
      },
      (args) =>
        guarded(async () => envResult((await call(args.environment)) as Parameters<typeof envResult>[0])),
    );

  // An environment's egress policy (one deployed with a policy): read with its log, or replaced.
  const rules = z.array(z.string().min(1).max(300)).max(256);
  const policyOut = { allow: z.array(z.string()), deny: z.array(z.string()) };
  server.registerTool(
    "set_egress",
    {
      title: "Change an environment's egress policy",
      description:
        "Replaces the destinations a running environment may reach through its egress proxy (names, *.name wildcards, a.b.c.d[/len], each [:port]; without a port 80 and 443; deny wins). The next connection follows it and open connections it no longer allows are closed. Only an environment deployed with an egress policy takes one.",
      inputSchema: {
        environment,
        allow: rules.describe("Destinations to allow"),
        deny: rules.optional().describe("Destinations to refuse, whatever allows them"),
      },
      outputSchema: { policy: z.object(policyOut), closed: z.number() },
      annotations: {
        readOnlyHint: false,
        destructiveHint: false,
        idempotentHint: true,
        openWorldHint: false,
      },
    },
    (args) =>
      guarded(async () => {
        const r = await client.envs.setEgress(args.environment, { allow: args.allow, deny: args.deny ?? [] });
        return { policy: r.policy, closed: r.closed };
      }),
  );

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
          .describe(
            "true: the agent goes on after grading; false: it stays frozen; absent: frozen, but an environment deploys land on (alpha) goes on",
          ),
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
          client.envs.verify(args.environment, args.resume === undefined ? {} : { resume: args.resume }, {
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
  );

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
        const version = args.version ?? (await client.envs.get(args.environment)).current_version_id;
        if (!version)
          throw apiError(
            "conflict",
            `${args.environment} has no version to roll back to; snapshot it first`,
            409,
          );
        return deploymentResult(
          await verdict(client, extra as unknown as ToolExtra, () =>
            client.envs.rollback(args.environment, { version }, { query: { wait: "false" } }),
          ),
        );
      }),
  );

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
            client.envs.destroy(args.environment, { query: { wait: "false" } }),
          );
          return { environment: args.environment, destroyed: d.status === "succeeded" };
        } catch (err) {
          if (err instanceof NotFoundError) return { environment: args.environment, destroyed: false };
          throw err;
        }
      }),
  );

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
        const r = await client.envs.openPort(
          args.environment,
          String(args.port),
          args.service ? { service: args.service } : {},
        );
        return { url: r.url, port: r.port, service: r.service };
      }),
  );
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
