/**
 * E2B as a target, driven through its official TypeScript SDK (`e2b`) with the team's key: a
 * sandbox is one Firecracker VM made from a template, and a template is built from the image the
 * sandbox names (once per image; its name is derived from the image). Commands run through envd's
 * process service, files go as a tar through envd's file upload and a `tar` in the sandbox.
 *
 * Not run against the live E2B: its tests run against a local double of the published API
 * (test/doubles/e2b-double.ts), and the row says so. What E2B has no primitive for here is refused
 * with the reason: several services, a fork of a version made on a denvd host, verify, stopping a
 * service, port URLs. A snapshot is E2B's own (`POST /sandboxes/{id}/snapshots`), kept as a version
 * on this target; a fork of it is a new sandbox from it. stdin goes up whole before its command starts. Output is text to E2B's SDK (it decodes UTF-8), so
 * bytes that are not UTF-8 arrive replaced.
 */
import { createHash } from "node:crypto";
import { Readable } from "node:stream";
import { DenvError } from "@denv/protocol";
import type { Sandbox } from "e2b";
import { refusalIn } from "../outbound-guard.ts";
import type { Store } from "../store/open-store.ts";
import { HostedSandboxTarget, type RunEnd, SANDBOX_ID, shellQuote } from "./hosted-sandbox-target.ts";
import type { ImageSandboxSpec, PlacedEnvironment, TargetCapabilities } from "./target.ts";

/**
 * E2B's SDK, loaded when a target of this kind first calls E2B: importing it costs a process
 * ≈ 25 MiB, which a server with no E2B target should not carry.
 */
const importE2b = () => import("e2b");
let sdkLoading: ReturnType<typeof importE2b> | undefined;
function e2b(): ReturnType<typeof importE2b> {
  sdkLoading ??= importE2b();
  return sdkLoading;
}

/** How long E2B keeps a sandbox without a call (its longest for most plans): denv asks for it. */
const SANDBOX_TIMEOUT_MS = 60 * 60_000;

export interface E2bConnection {
  apiKey: string;
  /** Another endpoint speaking E2B's API (self-hosted E2B, a test's double); null: E2B's own. */
  apiUrl: string | null;
}

export class E2bTarget extends HostedSandboxTarget {
  readonly kind = "e2b" as const;
  protected readonly provider = "E2B";
  /** E2B's own unprivileged user. */
  private readonly defaultUser = "user";
  protected readonly sandboxWord = "VM";
  private readonly conn: E2bConnection;
  /**
   * Sandboxes this process has connected to, so each call is not a connect first: keyed by the
   * account and endpoint as well as the id, since an id comes from whatever endpoint a team named
   * (one of its own could answer another team's sandbox id, and must not be handed that sandbox).
   */
  private static readonly connected = new Map<string, Promise<Sandbox>>();

  constructor(name: string, conn: E2bConnection, store: Store) {
    super(name, store);
    this.conn = conn;
  }

  /** The cache's key of a sandbox of this account at this endpoint. */
  private cacheKey(sandboxId: string): string {
    const account = createHash("sha256")
      .update(`${this.conn.apiUrl ?? ""}\n${this.conn.apiKey}`)
      .digest("hex");
    return `${account}/${sandboxId}`;
  }

  /** The SDK's connection options: E2B's own endpoints, or the one given for API and envd alike. */
  private opts() {
    return {
      apiKey: this.conn.apiKey,
      ...(this.conn.apiUrl ? { apiUrl: this.conn.apiUrl, sandboxUrl: this.conn.apiUrl } : {}),
    };
  }

  async checkKey(): Promise<void> {
    try {
      await (await e2b()).Sandbox.list({ ...this.opts(), limit: 1 }).nextItems();
    } catch (err) {
      const refused = refusalIn(err);
      if (refused) throw refused;
      throw new DenvError(
        "invalid_argument",
        `E2B did not accept the key: ${(err as Error).message.slice(0, 300)}`,
      );
    }
  }

  async capabilities(): Promise<TargetCapabilities> {
    const no = (detail: string) => ({ supported: false, detail });
    return {
      multiServiceStack: no("no (one VM per sandbox)"),
      consistentSnapshot: {
        supported: true,
        detail: "E2B's snapshot of the one VM (memory and filesystem at one instant)",
      },
      fork: {
        supported: true,
        detail: "a new VM from an E2B snapshot (a denv version made on a denvd host forks there)",
      },
      forkTime: { supported: false, detail: "a VM's start from a snapshot (not measured here)" },
      egressDenyVerified: {
        supported: true,
        detail: "provider network config (allow_internet_access: false), not probed",
      },
      capsEnforced: { supported: true, detail: "provider tier (the template's vCPU and memory)" },
      gpu: no("no"),
      verify: no("no (verify is not available on hosted providers yet)"),
    };
  }

  protected async makeSandbox(teamId: string, name: string, spec: ImageSandboxSpec): Promise<string> {
    const template = await this.templateOf(spec.image);
    let sandbox: Sandbox;
    try {
      sandbox = await (await e2b()).Sandbox.create(template, {
        ...this.opts(),
        envs: spec.env ?? {},
        // The provider's own setting; the row says it is not probed.
        allowInternetAccess: spec.egress === "allow",
        metadata: { denv_team: teamId, denv_name: name },
        timeoutMs: SANDBOX_TIMEOUT_MS,
      });
    } catch (err) {
      throw this.fail(`creating a sandbox from ${spec.image}`, err);
    }
    const id = sandbox.sandboxId;
    // Only an id that is one is kept or cached (the caller refuses the rest and kills it).
    if (!SANDBOX_ID.test(id)) return id;
    try {
      // The sandbox's paths (denv's default /work) are there and the user's, as a denvd sandbox's
      // volumes are; E2B keeps them for the sandbox's life (no fork here to carry them on).
      const user = spec.user ?? this.defaultUser;
      const paths = (spec.volumes ?? ["/work"]).map(shellQuote).join(" ");
      await sandbox.commands.run(`mkdir -p -- ${paths} && chown ${shellQuote(user)} -- ${paths}`, {
        user: "root",
      });
    } catch (err) {
      await sandbox.kill().catch(() => {});
      throw this.fail(`making the sandbox's paths`, err);
    }
    E2bTarget.connected.set(this.cacheKey(id), Promise.resolve(sandbox));
    return id;
  }

  protected override async snapshotSandbox(sandboxId: string): Promise<string> {
    return (await (await e2b()).Sandbox.createSnapshot(sandboxId, this.opts())).snapshotId;
  }

  protected override async sandboxFromSnapshot(teamId: string, name: string, ref: string): Promise<string> {
    // E2B keeps a snapshot's files and memory; what the sandbox was made with (its egress among them)
    // is not in denv's record of it, so a fork's egress is denied, as a new sandbox's is by default.
    const sandbox = await (await e2b()).Sandbox.create(ref, {
      ...this.opts(),
      allowInternetAccess: false,
      metadata: { denv_team: teamId, denv_name: name },
      timeoutMs: SANDBOX_TIMEOUT_MS,
    });
    if (SANDBOX_ID.test(sandbox.sandboxId))
      E2bTarget.connected.set(this.cacheKey(sandbox.sandboxId), Promise.resolve(sandbox));
    return sandbox.sandboxId;
  }

  protected override async removeSnapshot(ref: string): Promise<void> {
    // false: E2B has none of that id (gone already), which is what was asked.
    await (await e2b()).Sandbox.deleteSnapshot(ref, this.opts());
  }

  /** The template built from an image, named from the image: built once, found after. */
  private async templateOf(image: string): Promise<string> {
    const name = `denv-${createHash("sha256").update(image).digest("hex").slice(0, 20)}`;
    try {
      const { Template } = await e2b();
      if (!(await Template.exists(name, this.opts())))
        await Template.build(Template().fromImage(image), name, this.opts());
      return name;
    } catch (err) {
      throw this.fail(`building a template from ${image}`, err);
    }
  }

  protected async startBackground(sandboxId: string, line: string, user: string | undefined): Promise<void> {
    const sb = await this.sandboxById(sandboxId);
    await sb.commands.run(line, { background: true, user: user ?? this.defaultUser });
  }

  protected async killSandbox(sandboxId: string): Promise<void> {
    E2bTarget.connected.delete(this.cacheKey(sandboxId));
    await (await e2b()).Sandbox.kill(sandboxId, this.opts());
  }

  private sandboxById(id: string): Promise<Sandbox> {
    const key = this.cacheKey(id);
    let s = E2bTarget.connected.get(key);
    if (!s) {
      s = e2b().then((sdk) => sdk.Sandbox.connect(id, this.opts()));
      E2bTarget.connected.set(key, s);
      s.catch(() => E2bTarget.connected.delete(key));
    }
    return s.catch((err: unknown) => {
      throw this.fail(`reaching sandbox ${id}`, err);
    });
  }

  private sandbox(env: PlacedEnvironment): Promise<Sandbox> {
    if (!env.stackId)
      throw new DenvError("conflict", `environment ${env.name} has no sandbox on ${this.name}`);
    return this.sandboxById(env.stackId);
  }

  protected async run(
    env: PlacedEnvironment,
    line: string,
    opts: { user?: string; cwd?: string; env: Record<string, string>; timeoutMs: number },
    onOutput: (which: "stdout" | "stderr", chunk: Buffer) => void,
  ): Promise<RunEnd> {
    const sb = await this.sandbox(env);
    let timedOut = false;
    try {
      // E2B's SDK hands output on as text (it decodes UTF-8).
      const handle = await sb.commands.run(line, {
        background: true,
        user: opts.user ?? this.defaultUser,
        ...(opts.cwd ? { cwd: opts.cwd } : {}),
        envs: opts.env,
        timeoutMs: 0,
        onStdout: (text: string) => onOutput("stdout", Buffer.from(text)),
        onStderr: (text: string) => onOutput("stderr", Buffer.from(text)),
      });
      const timer = setTimeout(() => {
        timedOut = true;
        void handle.kill().catch(() => {});
      }, opts.timeoutMs);
      try {
        return { exitCode: (await handle.wait()).exitCode, timedOut };
      } catch (err) {
        const { CommandExitError } = await e2b();
        if (!(err instanceof CommandExitError)) throw err;
        return { exitCode: err.exitCode, timedOut };
      } finally {
        clearTimeout(timer);
      }
    } catch (err) {
      if (!timedOut) throw this.fail("a command", err);
      return { exitCode: 137, timedOut };
    }
  }

  protected async upload(
    env: PlacedEnvironment,
    path: string,
    user: string | undefined,
    body: Readable,
  ): Promise<void> {
    const sb = await this.sandbox(env);
    // As a stream, so envd takes it as one octet-stream body (not a multipart form).
    await sb.files.write(path, Readable.toWeb(body) as ReadableStream, {
      user: user ?? this.defaultUser,
      useOctetStream: true,
    });
  }

  protected async download(
    env: PlacedEnvironment,
    path: string,
    user: string | undefined,
  ): Promise<Readable> {
    const sb = await this.sandbox(env);
    const web = await sb.files.read(path, { format: "stream", user: user ?? this.defaultUser });
    return Readable.fromWeb(web as Parameters<typeof Readable.fromWeb>[0]);
  }
}
