/**
 * Daytona as a target, driven through its official TypeScript SDK (`@daytonaio/sdk`) with the
 * team's key: a sandbox is one container made from the image the request names, built by Daytona
 * from a two-line Dockerfile (the image, then the sandbox's user and its paths made), with the
 * variables, `networkBlockAll` unless egress is allowed, and a one-hour auto-stop when idle.
 * Commands run in a session of Daytona's toolbox as the sandbox's user, each under `timeout`,
 * started in the background with their output followed on the toolbox's log socket as it comes
 * (decoded as UTF-8 by the SDK); files go as a tar through the toolbox's upload and a `tar` in the
 * sandbox.
 *
 * The SDK is given its key, endpoint and region outright, and its polling mode (no event socket),
 * so it reads nothing from the server's environment or working directory for them.
 *
 * Not run against the live Daytona: its tests run against a local double of the published API
 * (test/doubles/daytona-double.ts), and the row says so. Refused with the reason: several services, a
 * fork of a denv version, verify, stopping a service, port URLs, and a command or file as
 * a user other than the sandbox's own (Daytona runs them all as that user).
 */
import { createHash, randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import type { Daytona, Sandbox } from "@daytonaio/sdk";
import { DenvError } from "@denv/protocol";
import { refusalIn } from "../outbound-guard.ts";
import type { Store } from "../store/open-store.ts";
import { HostedSandboxTarget, type RunEnd, SANDBOX_ID, shellQuote } from "./hosted-sandbox-target.ts";
import type { ImageSandboxSpec, PlacedEnvironment, TargetCapabilities } from "./target.ts";

/** Daytona's own unprivileged user, the sandbox's when the request names none. */
const DEFAULT_USER = "daytona";
/** A sandbox idle this long is stopped by Daytona (its default is 15 min; an episode may think longer). */
const AUTO_STOP_MIN = 60;
/** How long a first create may take: Daytona builds the image then (minutes, by its own account). */
const CREATE_TIMEOUT_S = 15 * 60;
/** What a request's toolbox call may take past the command's own timeout. */
const CALL_SLACK_S = 60;
/** How many times a followed command's exit code is read after its output ended (100 ms apart). */
const EXIT_CODE_READS = 50;
/** A user name as useradd takes it: it lands in the Dockerfile's RUN line. */
const USER_NAME = /^[a-z_][a-z0-9_-]{0,31}$/;
/** What no Dockerfile line or image reference may hold (a newline would start another instruction). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what it refuses
const CONTROL = /[\x00-\x1f\x7f]/;

/**
 * Daytona's SDK, loaded when a target of this kind first calls Daytona: importing it costs a
 * process ≈ 44 MiB, which a server with no Daytona target should not carry.
 */
let sdkLoading: Promise<typeof import("@daytonaio/sdk")> | undefined;
function daytonaSdk(): Promise<typeof import("@daytonaio/sdk")> {
  sdkLoading ??= import("@daytonaio/sdk");
  return sdkLoading;
}

export interface DaytonaConnection {
  apiKey: string;
  /** Another endpoint speaking Daytona's API (self-hosted Daytona, a test's double); null: Daytona's own. */
  apiUrl: string | null;
  /** Daytona's region ("us", "eu"); empty: "us". */
  region: string;
  /** The fetch policy's check, for URLs Daytona's answers name (a sandbox's toolbox). */
  checkUrl: (url: URL, what: string) => void;
}

export class DaytonaTarget extends HostedSandboxTarget {
  readonly kind = "daytona" as const;
  protected readonly provider = "Daytona";
  protected readonly sandboxWord = "container";
  private readonly conn: DaytonaConnection;
  private clientLoading: Promise<Daytona> | undefined;
  private readonly account: string;
  /** Sandboxes this process has reached, keyed by account and endpoint as well as the id (see E2B's). */
  private static readonly reached = new Map<string, Promise<Sandbox>>();

  constructor(name: string, conn: DaytonaConnection, store: Store) {
    super(name, store);
    this.conn = conn;
    this.account = createHash("sha256")
      .update(`${conn.apiUrl ?? ""}\n${conn.apiKey}`)
      .digest("hex");
  }

  private client(): Promise<Daytona> {
    this.clientLoading ??= daytonaSdk().then(
      (sdk) =>
        new sdk.Daytona({
          apiKey: this.conn.apiKey,
          apiUrl: this.conn.apiUrl ?? "https://app.daytona.io/api",
          target: this.conn.region || "us",
          useDeprecatedPolling: true,
        }),
    );
    return this.clientLoading;
  }

  async checkKey(): Promise<void> {
    try {
      await (await this.client()).list({ limit: 1 }).next();
    } catch (err) {
      const refused = refusalIn(err);
      if (refused) throw refused;
      throw new DenvError(
        "invalid_argument",
        `Daytona did not accept the key: ${(err as Error).message.slice(0, 300)}`,
      );
    }
  }

  async capabilities(): Promise<TargetCapabilities> {
    const no = (detail: string) => ({ supported: false, detail });
    return {
      multiServiceStack: no("no (one container per sandbox; linked sandboxes not driven)"),
      consistentSnapshot: no("a sandbox's filesystem snapshot (not driven by denv yet)"),
      fork: no("no (Daytona forks its own VM sandboxes; not driven by denv yet)"),
      forkTime: { supported: false, detail: "under 90 ms from a snapshot (Daytona's figure)" },
      egressDenyVerified: {
        supported: true,
        detail: "provider network setting (networkBlockAll), not probed",
      },
      capsEnforced: { supported: true, detail: "provider resources (1 vCPU, 1 GiB, 3 GiB disk by default)" },
      gpu: no("no (GPU sandboxes not driven)"),
      verify: no("no (verify is not available on hosted providers yet)"),
    };
  }

  protected async makeSandbox(teamId: string, name: string, spec: ImageSandboxSpec): Promise<string> {
    const user = spec.user ?? DEFAULT_USER;
    if (!USER_NAME.test(user))
      throw new DenvError(
        "invalid_argument",
        `user: ${JSON.stringify(user.slice(0, 40))} is not a user name Daytona's sandbox can be made with (lowercase letters, digits, _ and -)`,
      );
    const volumes = spec.volumes ?? ["/work"];
    const odd = [spec.image, ...volumes].find((s) => CONTROL.test(s) || s.length > 1024);
    if (odd !== undefined || /\s/.test(spec.image))
      throw new DenvError(
        "invalid_argument",
        `${odd === spec.image || odd === undefined ? "image" : "volumes"}: ${JSON.stringify((odd ?? spec.image).slice(0, 60))} has a control character or space, which no Dockerfile line may hold`,
      );
    const paths = volumes.map(shellQuote).join(" ");
    // Daytona builds this once per distinct Dockerfile: the user the sandbox runs as, and its
    // paths (denv's default /work) made and given to it, as a denvd sandbox's volumes are.
    const { Image } = await daytonaSdk();
    const image = Image.base(spec.image).runCommands(
      `id -u ${user} >/dev/null 2>&1 || useradd -m ${user} 2>/dev/null || adduser -D ${user}`,
      `mkdir -p -- ${paths} && chown ${user} -- ${paths}`,
    );
    let sandbox: Sandbox;
    try {
      sandbox = await (await this.client()).create(
        {
          image,
          user,
          envVars: spec.env ?? {},
          labels: { denv_team: teamId, denv_name: name },
          // The provider's own setting; the row says it is not probed.
          networkBlockAll: spec.egress !== "allow",
          autoStopInterval: AUTO_STOP_MIN,
        },
        { timeout: CREATE_TIMEOUT_S },
      );
    } catch (err) {
      throw this.fail(`creating a sandbox from ${spec.image}`, err);
    }
    this.checkToolbox(sandbox);
    if (SANDBOX_ID.test(sandbox.id))
      DaytonaTarget.reached.set(this.key(sandbox.id), Promise.resolve(sandbox));
    return sandbox.id;
  }

  /**
   * The toolbox a sandbox's commands and files go to is a URL from Daytona's answer: checked as the
   * endpoint is, before the team's key is sent there (Daytona's own hosts when the team named no
   * endpoint; else the fetch policy's).
   */
  private checkToolbox(sandbox: Sandbox): void {
    const raw = (sandbox as unknown as { toolboxProxyUrl?: unknown }).toolboxProxyUrl;
    if (raw === undefined || raw === null) return;
    let url: URL;
    try {
      url = new URL(String(raw));
    } catch {
      throw new DenvError("unavailable", "Daytona's answer names a toolbox URL that is not a URL");
    }
    if ((url.protocol !== "https:" && url.protocol !== "http:") || url.username || url.password)
      throw new DenvError(
        "unavailable",
        "Daytona's answer names a toolbox URL that is not http(s) without credentials",
      );
    const own = url.protocol === "https:" && /(^|\.)daytona\.io$/.test(url.hostname);
    if (!(this.conn.apiUrl === null && own)) this.conn.checkUrl(url, "the sandbox's toolboxProxyUrl");
  }

  private key(id: string): string {
    return `${this.account}/${id}`;
  }

  private sandboxById(id: string): Promise<Sandbox> {
    const key = this.key(id);
    let s = DaytonaTarget.reached.get(key);
    if (!s) {
      s = this.client()
        .then((client) => client.get(id))
        .then((sb) => {
          this.checkToolbox(sb);
          return sb;
        });
      DaytonaTarget.reached.set(key, s);
      s.catch(() => DaytonaTarget.reached.delete(key));
    }
    return s.catch((err: unknown) => {
      throw this.fail(`reaching sandbox ${id}`, err);
    });
  }

  private async sandbox(env: PlacedEnvironment, user: string | undefined): Promise<Sandbox> {
    if (!env.stackId)
      throw new DenvError("conflict", `environment ${env.name} has no sandbox on ${this.name}`);
    const sb = await this.sandboxById(env.stackId);
    if (user !== undefined && user !== sb.user)
      throw new DenvError(
        "invalid_argument",
        `target ${this.name} (Daytona) runs commands and files as the sandbox's user, ${sb.user}; as ${JSON.stringify(user.slice(0, 40))} is not carried`,
      );
    return sb;
  }

  protected async startBackground(sandboxId: string, line: string): Promise<void> {
    const sb = await this.sandboxById(sandboxId);
    const session = `denv-cmd-${randomBytes(6).toString("hex")}`;
    await sb.process.createSession(session);
    await sb.process.executeSessionCommand(session, { command: line, runAsync: true });
  }

  protected async killSandbox(sandboxId: string): Promise<void> {
    const key = this.key(sandboxId);
    const sb = await (
      DaytonaTarget.reached.get(key) ?? this.client().then((client) => client.get(sandboxId))
    ).catch((err: Error) => {
      // One already gone is gone.
      if (/NotFound/.test(err.name)) return null;
      throw err;
    });
    DaytonaTarget.reached.delete(key);
    if (sb) await sb.delete();
  }

  protected async run(
    env: PlacedEnvironment,
    line: string,
    opts: { user?: string; cwd?: string; env: Record<string, string>; timeoutMs: number },
    onOutput: (which: "stdout" | "stderr", chunk: Buffer) => void,
  ): Promise<RunEnd> {
    const sb = await this.sandbox(env, opts.user);
    const seconds = Math.max(1, Math.ceil(opts.timeoutMs / 1000));
    const vars = Object.entries(opts.env).map(([k, v]) => shellQuote(`${k}=${v}`));
    // A session keeps its shell's state between commands: each command has a session of its own,
    // so one's cd or export does not leak into the next. `timeout` ends it in the sandbox itself
    // (the toolbox's call would only stop waiting): TERM, then KILL 5 s later.
    const full = `${opts.cwd ? `cd ${shellQuote(opts.cwd)} && ` : ""}env ${vars.join(" ")} timeout -k 5 ${seconds} sh -c ${shellQuote(line)}`;
    const session = `denv-exec-${randomBytes(6).toString("hex")}`;
    const started = performance.now();
    try {
      await sb.process.createSession(session);
      // Started in the background and its output followed as it comes (the toolbox's log stream,
      // which the SDK decodes as UTF-8), then its exit code read once the stream ends.
      const { cmdId } = await sb.process.executeSessionCommand(
        session,
        { command: full, runAsync: true },
        CALL_SLACK_S,
      );
      if (!cmdId)
        throw new DenvError("unavailable", "Daytona answered no command id for a command it started");
      await sb.process.getSessionCommandLogs(
        session,
        cmdId,
        (text: string) => onOutput("stdout", Buffer.from(text)),
        (text: string) => onOutput("stderr", Buffer.from(text)),
      );
      const exitCode = await this.exitCodeOf(sb, session, cmdId);
      const timedOut =
        (exitCode === 124 || exitCode === 137) && performance.now() - started >= opts.timeoutMs;
      return { exitCode, timedOut };
    } catch (err) {
      throw this.fail("a command", err);
    } finally {
      void sb.process.deleteSession(session).catch(() => {});
    }
  }

  /**
   * A followed command's exit code: the log stream ends as the command does, and the toolbox may
   * record the code a moment after; read again briefly until it is there.
   */
  private async exitCodeOf(sb: Sandbox, session: string, cmdId: string): Promise<number> {
    for (let i = 0; i < EXIT_CODE_READS; i++) {
      const c = await sb.process.getSessionCommand(session, cmdId);
      if (typeof c.exitCode === "number") return c.exitCode;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new DenvError(
      "unavailable",
      `Daytona recorded no exit code for command ${cmdId} after its output ended`,
    );
  }

  protected async upload(env: PlacedEnvironment, path: string, user: string | undefined, body: Readable) {
    const sb = await this.sandbox(env, user);
    await sb.fs.uploadFileStream(body, path);
  }

  protected async download(
    env: PlacedEnvironment,
    path: string,
    user: string | undefined,
  ): Promise<Readable> {
    const sb = await this.sandbox(env, user);
    return (await sb.fs.downloadFileStream(path)) as Readable;
  }
}
