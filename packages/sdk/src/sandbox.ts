/**
 * The shape people already use for sandboxes (E2B's, Modal's): a `Denv` to make or find them, and
 * a `Sandbox` with `commands` and `files`, snapshots, forks, verify and port URLs, disposed with
 * `await using`. Built on DenvClient and the generated operation types.
 *
 * ```ts
 * await using sb = await Denv.fromEnv().sandbox({ fromVersion: "ver_0123456789ab" });
 * const r = await sb.commands.run("psql -tAc 'select 1'", { timeoutMs: 10_000 });
 * await sb.files.write("/home/ubuntu/answer.txt", "42\n");
 * ```
 */
import { type ClientOptions, DEFAULT_MAX_OUTPUT_BYTES, DenvClient } from "./client.ts";
import { apiError, InvalidArgumentError, NotFoundError } from "./errors.ts";
import { Files } from "./sandbox-files.ts";
import type { Operations } from "./schema.gen.ts";

export type EnvironmentInfo = Operations["getV1EnvsById"]["response"];
export type Deployment = Operations["getV1DeploymentsById"]["response"];
type ExecBody = Operations["postV1EnvsByIdExec"]["body"];

/** How a sandbox is made: from a version (a fork), or from an image with a compose file made for it. */
export type SandboxOptions =
  | { fromVersion: string; name?: string }
  | {
      image: string;
      cmd?: string[];
      env?: Record<string, string>;
      ports?: number[];
      /** Paths kept across snapshot and fork (default ["/work"]). */
      volumes?: string[];
      egress?: "deny" | "allow";
      user?: string;
      name?: string;
    };

/** How `commands.run` runs a command. */
export interface RunOptions {
  /** The service (default: the agent's, else the first). */
  service?: string;
  /** Who runs it (default: the service's own user). */
  user?: string;
  cwd?: string;
  /** Added to the environment; HOME, USER and LOGNAME included. */
  env?: Record<string, string>;
  /** Kills every process the command started after this long. */
  timeoutMs?: number;
  /** Bytes, or a stream of them (a ReadableStream or an async iterable), sent as it is read. */
  stdin?: string | Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>;
  /** Each stream's bytes kept (the rest is counted in stdoutDroppedBytes / stderrDroppedBytes). */
  maxOutputBytes?: number;
  /** Output as it comes (the result still holds all of it). */
  onStdout?: (data: Uint8Array) => void;
  onStderr?: (data: Uint8Array) => void;
}

/** What `commands.run` resolves to, whatever the command's exit code. */
export interface CommandResult {
  exitCode: number;
  /** Output decoded as UTF-8; stdoutBytes / stderrBytes hold the exact bytes. */
  stdout: string;
  stderr: string;
  stdoutBytes: Uint8Array;
  stderrBytes: Uint8Array;
  stdoutDroppedBytes: number;
  stderrDroppedBytes: number;
  timedOut: boolean;
  durationMs: number;
}

/** Commands in a sandbox's services. */
export class Commands {
  private readonly sandbox: Sandbox;
  constructor(sandbox: Sandbox) {
    this.sandbox = sandbox;
  }

  /** Runs a command (argv, or a string for `sh -c`); resolves once it has ended, whatever its exit code. */
  async run(command: string | string[], options: RunOptions = {}): Promise<CommandResult> {
    const streamedIn =
      options.stdin !== undefined &&
      typeof options.stdin !== "string" &&
      !(options.stdin instanceof Uint8Array);
    const stdin =
      options.stdin === undefined || streamedIn
        ? undefined
        : Buffer.from(options.stdin as string | Uint8Array);
    const body: ExecBody = {
      command,
      encoding: "base64",
      ...(options.service ? { service: options.service } : {}),
      ...(options.user ? { user: options.user } : {}),
      ...(options.cwd ? { cwd: options.cwd } : {}),
      ...(options.env ? { env: options.env } : {}),
      ...(options.timeoutMs ? { timeout_ms: options.timeoutMs } : {}),
      // Without a limit or a reader of its own, the output is held whole: bounded as the server's
      // whole-output answer is.
      ...(options.maxOutputBytes || (!options.onStdout && !options.onStderr)
        ? { max_output_bytes: options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES }
        : {}),
      ...(stdin ? { stdin: stdin.toString("base64") } : {}),
    };
    const client = this.sandbox.client;
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const onOutput = (which: "stdout" | "stderr", data: Buffer) => {
      (which === "stdout" ? out : err).push(data);
      (which === "stdout" ? options.onStdout : options.onStderr)?.(data);
    };
    // Always streamed: the answer starts at once and carries keep-alives while the command is
    // quiet, so a command of hours is not taken for a dead connection on the way.
    const r = streamedIn
      ? await client.execWithStdin(
          this.sandbox.id,
          body,
          options.stdin as ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
          onOutput,
        )
      : await client.execStream(this.sandbox.id, body, onOutput);
    const stdoutBytes = Buffer.concat(out);
    const stderrBytes = Buffer.concat(err);
    return {
      exitCode: r.exit_code,
      stdout: stdoutBytes.toString("utf8"),
      stderr: stderrBytes.toString("utf8"),
      stdoutBytes,
      stderrBytes,
      stdoutDroppedBytes: r.stdout_dropped_bytes,
      stderrDroppedBytes: r.stderr_dropped_bytes,
      timedOut: r.timed_out,
      durationMs: r.duration_ms,
    };
  }
}

/** One environment, used as a sandbox: commands, files, snapshot, fork, verify, port URLs. */
export class Sandbox {
  readonly client: DenvClient;
  /** `commands.run(cmd, options)`. */
  readonly commands: Commands;
  /** `files.read/write/list/stat/mkdir/remove/rename`. */
  readonly files: Files;
  /** The environment as the server last described it. */
  info: EnvironmentInfo;

  constructor(client: DenvClient, info: EnvironmentInfo) {
    this.client = client;
    this.info = info;
    this.commands = new Commands(this);
    this.files = new Files(client, info.id);
  }

  /** The environment's id (env_…). */
  get id(): string {
    return this.info.id;
  }

  /** The environment's name in its project. */
  get name(): string {
    return this.info.name;
  }

  /** Reads the environment again (status, current version, services). */
  async refresh(): Promise<EnvironmentInfo> {
    this.info = await this.client.envs.get(this.id);
    return this.info;
  }

  /**
   * The live state as a new version; resolves to the deployment, whose version_id names it.
   * `live`: every service's processes too (its forks continue from them); "best-effort" keeps
   * disk-only the services that cannot be taken.
   */
  async snapshot(options: { live?: boolean | "best-effort" } = {}): Promise<Deployment> {
    const body = options.live ? { live: options.live } : {};
    const d = await this.client.untilVerdict(() => this.client.envs.snapshot(this.id, body));
    await this.refresh();
    return d;
  }

  /** Pause keeping memory: every process checkpointed to disk and stopped; resume() carries on. */
  async pause(): Promise<EnvironmentInfo> {
    this.info = await this.client.envs.pause(this.id);
    return this.info;
  }

  /** Resumes a paused sandbox: its processes carry on from their memory. */
  async resume(): Promise<EnvironmentInfo> {
    this.info = await this.client.envs.resume(this.id);
    return this.info;
  }

  /** A new sandbox from this one's current version (snapshotted first when it has none). */
  async fork(options: { name?: string; cold?: boolean } = {}): Promise<Sandbox> {
    const info = await this.client.envs.fork(this.id, {
      ...(options.name ? { name: options.name } : {}),
      // From a live version: start every service afresh instead of restoring its processes.
      ...(options.cold ? { cold: true } : {}),
    });
    return new Sandbox(this.client, info);
  }

  /** Grades the environment on a fork, as a separate principal; resolves to the reward and why. */
  async verify(
    options: { resume?: boolean } = {},
  ): Promise<NonNullable<Deployment["verify"]> & { deployment: Deployment }> {
    const d = await this.client.untilVerdict(() =>
      this.client.envs.verify(this.id, { resume: options.resume ?? false }),
    );
    if (!d.verify)
      throw apiError("unavailable", `verify did not grade: ${d.reason ?? d.status}`, 200, { deployment: d });
    return { ...d.verify, deployment: d };
  }

  /** A URL reaching a TCP port inside a service (HTTP and WebSocket); the URL is the credential. */
  async portUrl(port: number, options: { service?: string } = {}): Promise<string> {
    const r = await this.client.envs.openPort(
      this.id,
      String(port),
      options.service ? { service: options.service } : {},
    );
    return r.url;
  }

  /** Destroys the environment (its versions stay). Idempotent. */
  async destroy(): Promise<void> {
    try {
      await this.client.envs.destroy(this.id);
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err;
    }
  }

  /** `await using sb = …` destroys the sandbox when the block ends. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.destroy();
  }
}

/** Where sandboxes come from: a server and a key. */
export class Denv {
  readonly client: DenvClient;

  constructor(options: ClientOptions) {
    this.client = new DenvClient(options);
  }

  /** DENV_SERVER and DENV_API_KEY from the environment (what `denv login` and `denv up` print). */
  static fromEnv(env: NodeJS.ProcessEnv = process.env): Denv {
    const baseUrl = env.DENV_SERVER;
    const apiKey = env.DENV_API_KEY;
    if (!baseUrl || !apiKey)
      throw new InvalidArgumentError(
        "invalid_argument",
        "set DENV_SERVER and DENV_API_KEY (denv up prints both)",
        0,
      );
    return new Denv({ baseUrl, apiKey });
  }

  /** A new sandbox, running once this resolves: a fork of a version, or a one-service image sandbox. */
  async sandbox(options: SandboxOptions): Promise<Sandbox> {
    const body: Operations["postV1Sandboxes"]["body"] =
      "fromVersion" in options
        ? { from_version: options.fromVersion, ...(options.name ? { name: options.name } : {}) }
        : {
            image: options.image,
            ...(options.cmd ? { cmd: options.cmd } : {}),
            ...(options.env ? { env: options.env } : {}),
            ...(options.ports ? { ports: options.ports } : {}),
            ...(options.volumes ? { volumes: options.volumes } : {}),
            ...(options.egress ? { egress: options.egress } : {}),
            ...(options.user ? { user: options.user } : {}),
            ...(options.name ? { name: options.name } : {}),
          };
    return new Sandbox(this.client, await this.client.sandboxes.create(body));
  }

  /** An existing environment (by id, name, or project/name), as a sandbox. */
  async environment(idOrName: string): Promise<Sandbox> {
    return new Sandbox(this.client, await this.client.envs.get(idOrName));
  }
}
