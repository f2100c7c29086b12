/**
 * Modal as a target, driven through its official TypeScript SDK (`modal`), which speaks Modal's
 * gRPC API (Modal has no REST API): a sandbox is one gVisor container from an image Modal pulls
 * from the registry the image names, made in one app (`denv`) of the account the token is for.
 * Commands run through the task's command router, files go through a command's stdin and stdout
 * in binary, and a snapshot is Modal's filesystem snapshot (an image) that a fork starts from.
 *
 * Not run against the live Modal: its tests run against a local double written from Modal's
 * published protos (test/doubles/modal-double.ts), and the row says so. Modal's exec has no user, so
 * denv makes an unprivileged user (`user`) in each sandbox and drops to it with the sandbox's own
 * `su`. What Modal has no primitive for here is refused with the reason: several services, a
 * fork of a version made on a denvd host, verify, stopping a service, port URLs.
 */
import { createHash } from "node:crypto";
import { Readable } from "node:stream";
import { DenvError } from "@denv/protocol";
import type { ModalClient, ModalClientParams, Sandbox } from "modal";
import type { Store } from "../store/open-store.ts";
import { HostedSandboxTarget, type RunEnd, SANDBOX_ID, shellQuote } from "./hosted-sandbox-target.ts";
import type { ImageSandboxSpec, PlacedEnvironment, TargetCapabilities } from "./target.ts";

/** Modal's own API, when the team names no other endpoint. */
const MODAL_API = "https://api.modal.com:443";
/** Modal's longest sandbox life (its default is 5 minutes): denv asks for it. */
const SANDBOX_TIMEOUT_MS = 24 * 60 * 60_000;
/** The app denv makes its sandboxes in, per account. */
const APP_NAME = "denv";
/** The unprivileged user denv makes in each sandbox; commands run as it unless another is named. */
const DEFAULT_USER = "user";
/** How much of a failed command's stderr a message carries. */
const STDERR_BYTES = 4096;

/** A Modal token is two parts, its id and its secret: denv takes them as one, `ak-…:as-…`. */
export function splitModalToken(token: string): { tokenId: string; tokenSecret: string } {
  const at = token.indexOf(":");
  const tokenId = token.slice(0, at);
  const tokenSecret = token.slice(at + 1);
  if (at <= 0 || !tokenSecret || /\s/.test(token))
    // The message never repeats the token: it is a secret, and may be a mistyped one.
    throw new DenvError(
      "invalid_argument",
      "token: a Modal token is its id and its secret joined by a colon (ak-…:as-…, from `modal token new`)",
    );
  return { tokenId, tokenSecret };
}

export interface ModalConnection {
  tokenId: string;
  tokenSecret: string;
  /** Another endpoint speaking Modal's API (a test's double); null: Modal's own. */
  apiUrl: string | null;
  /** Throws when the fetch policy does not allow a URL the provider answered (its command router). */
  checkUrl: (url: URL, what: string) => void;
}

/**
 * Modal's SDK, loaded when a target of this kind first calls Modal: importing it costs a process
 * ≈ 36 MiB, which a server with no Modal target should not carry.
 */
let sdkLoading: Promise<typeof import("modal")> | undefined;
function modalSdk(): Promise<typeof import("modal")> {
  sdkLoading ??= import("modal");
  return sdkLoading;
}

type Middleware = NonNullable<ModalClientParams["grpcMiddleware"]>[number];

/**
 * Whether an address is on Modal's own domains (its API at modal.com, its tunnels and tasks at
 * modal.host), over https. Not checked against the live Modal: should its routers live elsewhere,
 * `--allow-fetch` adds them.
 */
export function isModalsOwn(url: URL): boolean {
  return url.protocol === "https:" && /(^|\.)modal\.(com|host)$/.test(url.hostname);
}

export class ModalTarget extends HostedSandboxTarget {
  readonly kind = "modal" as const;
  protected readonly provider = "Modal";
  protected readonly sandboxWord = "container";
  private readonly conn: ModalConnection;
  /**
   * One SDK client per account and endpoint (it holds its gRPC channels), and the sandboxes this
   * process has reached, keyed by account as well as id: an id comes from whatever endpoint a team
   * named, and one of its own must not be handed another team's sandbox.
   */
  private static readonly clients = new Map<string, ModalClient>();
  private static readonly sandboxes = new Map<string, Sandbox>();

  constructor(name: string, conn: ModalConnection, store: Store) {
    super(name, store);
    this.conn = conn;
  }

  private get account(): string {
    return createHash("sha256")
      .update(`${this.conn.apiUrl ?? ""}\n${this.conn.tokenId}\n${this.conn.tokenSecret}`)
      .digest("hex");
  }

  /**
   * The SDK's client for this account. The SDK reads its endpoint only from the environment (or
   * a profile file), once, as a client is built: it is set for that synchronous construction and
   * put back, so each team's client calls the endpoint that team connected.
   */
  private async client(): Promise<ModalClient> {
    const { ModalClient } = await modalSdk();
    // From here on synchronous: two first calls cannot both build a client.
    const key = this.account;
    let client = ModalTarget.clients.get(key);
    if (client) return client;
    const before = process.env.MODAL_SERVER_URL;
    process.env.MODAL_SERVER_URL = this.conn.apiUrl ?? MODAL_API;
    try {
      client = new ModalClient({
        tokenId: this.conn.tokenId,
        tokenSecret: this.conn.tokenSecret,
        grpcMiddleware: [this.routerCheck()],
      });
    } finally {
      if (before === undefined) delete process.env.MODAL_SERVER_URL;
      else process.env.MODAL_SERVER_URL = before;
    }
    ModalTarget.clients.set(key, client);
    return client;
  }

  /**
   * The command router's address is an answer of the provider, and the SDK would carry the
   * sandbox's token to wherever it says: it is held to the fetch policy, as the API's own is.
   */
  private routerCheck(): Middleware {
    const ownEndpoint = this.conn.apiUrl === null;
    // At Modal's own endpoint, a router of Modal's own domains is Modal's; else the policy decides.
    const check = (url: URL, what: string) => {
      if (!(ownEndpoint && isModalsOwn(url))) this.conn.checkUrl(url, what);
    };
    return async function* routerCheck(call, options) {
      const answer = (yield* call.next(call.request, options)) as {
        url?: unknown;
        commandRouterAccess?: { url?: unknown };
      };
      const refused = (named: unknown) => {
        const url = URL.parse(String(named));
        if (!url)
          return new DenvError("unavailable", "Modal answered a command router address that is not a URL");
        try {
          check(url, "Modal's command router");
          return null;
        } catch (err) {
          return err;
        }
      };
      if (call.method.path.endsWith("CommandRouterAccess")) {
        const err = refused(answer?.url);
        if (err) throw err;
      } else if (answer?.commandRouterAccess?.url) {
        // A V2 sandbox's creation names its router too. Refused there, the sandbox would be lost to
        // denv (its id unanswered): the address is dropped instead, so the first command asks for
        // it again, is refused then, and the sandbox, known by then, is ended.
        if (refused(answer.commandRouterAccess.url)) return { ...answer, commandRouterAccess: undefined };
      }
      return answer;
    } as Middleware;
  }

  async checkKey(): Promise<void> {
    try {
      await (await this.client()).apps.fromName(APP_NAME, { createIfMissing: true });
    } catch (err) {
      ModalTarget.clients.delete(this.account);
      throw new DenvError(
        "invalid_argument",
        `Modal did not accept the token: ${(err as Error).message.slice(0, 300)}`,
      );
    }
  }

  async capabilities(): Promise<TargetCapabilities> {
    const no = (detail: string) => ({ supported: false, detail });
    return {
      multiServiceStack: no("no (one container per sandbox)"),
      consistentSnapshot: {
        supported: true,
        detail:
          "Modal's filesystem snapshot of the one container (files only: running processes are not kept)",
      },
      fork: {
        supported: true,
        detail:
          "a new container from a Modal filesystem snapshot (a denv version made on a denvd host forks there)",
      },
      forkTime: { supported: false, detail: "a container's start from a snapshot image (not measured here)" },
      egressDenyVerified: {
        supported: true,
        detail: "provider network setting (block_network), not probed",
      },
      capsEnforced: no("no (denv asks Modal for no CPU or memory yet: Modal's defaults apply)"),
      gpu: no("no (Modal has GPUs; denv does not ask for them yet)"),
      verify: no("no (verify is not available on hosted providers yet)"),
    };
  }

  private async app() {
    return (await this.client()).apps.fromName(APP_NAME, { createIfMissing: true });
  }

  protected async makeSandbox(teamId: string, name: string, spec: ImageSandboxSpec): Promise<string> {
    const modal = await this.client();
    let sandbox: Sandbox;
    try {
      sandbox = await modal.sandboxes.create(await this.app(), modal.images.fromRegistry(spec.image), {
        env: spec.env ?? {},
        // The provider's own setting; the row says it is not probed.
        blockNetwork: spec.egress !== "allow",
        timeoutMs: SANDBOX_TIMEOUT_MS,
        tags: { denv_team: teamId, denv_name: name },
      });
    } catch (err) {
      throw this.fail(`creating a sandbox from ${spec.image}`, err);
    }
    const id = sandbox.sandboxId;
    // Only an id that is one is kept or cached (the caller refuses the rest and ends it).
    if (!SANDBOX_ID.test(id)) return id;
    ModalTarget.sandboxes.set(`${this.account}/${id}`, sandbox);
    // The user commands run as, and the sandbox's paths (denv's default /work), made and given to
    // it, as a denvd sandbox's volumes are.
    const user = spec.user ?? DEFAULT_USER;
    const paths = (spec.volumes ?? ["/work"]).map(shellQuote).join(" ");
    const q = shellQuote(user);
    try {
      const r = await this.capture(
        sandbox,
        `id -u ${q} >/dev/null 2>&1 || useradd -m ${q} 2>/dev/null || adduser -D ${q}; mkdir -p -- ${paths} && chown ${q} -- ${paths}`,
        "root",
      );
      if (r.exitCode !== 0)
        throw new DenvError(
          "unavailable",
          `making the sandbox's user and paths exited ${r.exitCode}: ${r.stderr.slice(0, 300)}`,
        );
    } catch (err) {
      await this.killSandbox(id).catch(() => {});
      throw this.fail("making the sandbox's user and paths", err);
    }
    return id;
  }

  protected override async snapshotSandbox(sandboxId: string): Promise<string> {
    const image = await (await this.sandboxById(sandboxId)).snapshotFilesystem();
    return image.imageId;
  }

  protected override async sandboxFromSnapshot(teamId: string, name: string, ref: string): Promise<string> {
    const modal = await this.client();
    // The snapshot keeps the files (the user and paths made at the start among them); what the
    // sandbox was made with (its egress) is not in denv's record of it, so a fork's egress is denied.
    const sandbox = await modal.sandboxes.create(await this.app(), await modal.images.fromId(ref), {
      blockNetwork: true,
      timeoutMs: SANDBOX_TIMEOUT_MS,
      tags: { denv_team: teamId, denv_name: name },
    });
    if (SANDBOX_ID.test(sandbox.sandboxId))
      ModalTarget.sandboxes.set(`${this.account}/${sandbox.sandboxId}`, sandbox);
    return sandbox.sandboxId;
  }

  protected override async removeSnapshot(ref: string): Promise<void> {
    try {
      await (await this.client()).images.delete(ref);
    } catch (err) {
      // One already gone is gone.
      const { NotFoundError } = await modalSdk();
      if (!(err instanceof NotFoundError)) throw err;
    }
  }

  protected async startBackground(sandboxId: string, line: string, user: string | undefined): Promise<void> {
    const sb = await this.sandboxById(sandboxId);
    const r = await this.capture(sb, `nohup sh -c ${shellQuote(line)} >/dev/null 2>&1 &`, user);
    if (r.exitCode !== 0)
      throw new DenvError("unavailable", `starting it exited ${r.exitCode}: ${r.stderr.slice(0, 300)}`);
  }

  protected async killSandbox(sandboxId: string): Promise<void> {
    const key = `${this.account}/${sandboxId}`;
    const sb = ModalTarget.sandboxes.get(key) ?? (await (await this.client()).sandboxes.fromId(sandboxId));
    ModalTarget.sandboxes.delete(key);
    try {
      await sb.terminate();
    } catch (err) {
      const { NotFoundError } = await modalSdk();
      if (!(err instanceof NotFoundError)) throw err;
    } finally {
      sb.detach();
    }
  }

  private async sandboxById(id: string): Promise<Sandbox> {
    const key = `${this.account}/${id}`;
    let sb = ModalTarget.sandboxes.get(key);
    if (!sb) {
      sb = await (await this.client()).sandboxes.fromId(id);
      ModalTarget.sandboxes.set(key, sb);
    }
    return sb;
  }

  private sandbox(env: PlacedEnvironment): Promise<Sandbox> {
    if (!env.stackId)
      throw new DenvError("conflict", `environment ${env.name} has no sandbox on ${this.name}`);
    return this.sandboxById(env.stackId);
  }

  /** The argv that runs a shell line as the user: Modal's exec runs as the image's (root). */
  private argv(line: string, user: string | undefined): string[] {
    const as = user ?? DEFAULT_USER;
    return as === "root" ? ["sh", "-c", line] : ["su", "-s", "/bin/sh", "-c", line, as];
  }

  /** A short command's exit code and stderr (its stdout dropped). */
  private async capture(
    sb: Sandbox,
    line: string,
    user: string | undefined,
  ): Promise<{ exitCode: number; stderr: string }> {
    const proc = await sb.exec(this.argv(line, user), {
      mode: "binary",
      stdout: "ignore",
      timeoutMs: 120_000,
    });
    await proc.closeStdin();
    const [exitCode, stderr] = await Promise.all([proc.wait(), proc.stderr.readBytes()]);
    return { exitCode, stderr: Buffer.from(stderr).subarray(0, STDERR_BYTES).toString() };
  }

  protected async run(
    env: PlacedEnvironment,
    line: string,
    opts: { user?: string; cwd?: string; env: Record<string, string>; timeoutMs: number },
    onOutput: (which: "stdout" | "stderr", chunk: Buffer) => void,
  ): Promise<RunEnd> {
    const sb = await this.sandbox(env);
    // Modal takes whole seconds; the command is ended there by Modal at its deadline.
    const timeoutMs = Math.max(1, Math.ceil(opts.timeoutMs / 1000)) * 1000;
    const deadline = Date.now() + timeoutMs;
    try {
      const proc = await sb.exec(this.argv(line, opts.user), {
        mode: "binary",
        ...(opts.cwd ? { workdir: opts.cwd } : {}),
        env: opts.env,
        timeoutMs,
      });
      // Nothing is fed after the start (stdin goes up whole before): the command reads its end.
      await proc.closeStdin();
      const pump = async (stream: ReadableStream<Uint8Array>, which: "stdout" | "stderr") => {
        for await (const chunk of stream) onOutput(which, Buffer.from(chunk));
      };
      const [exitCode] = await Promise.all([
        proc.wait(),
        pump(proc.stdout, "stdout"),
        pump(proc.stderr, "stderr"),
      ]);
      return { exitCode, timedOut: Date.now() >= deadline };
    } catch (err) {
      // Past its deadline Modal ends the command, and its streams end with a deadline error.
      if (Date.now() >= deadline) return { exitCode: 137, timedOut: true };
      throw this.fail("a command", err);
    }
  }

  protected async upload(
    env: PlacedEnvironment,
    path: string,
    user: string | undefined,
    body: Readable,
  ): Promise<void> {
    const sb = await this.sandbox(env);
    // The stream goes in as the command's stdin, chunk by chunk: never held whole here.
    const proc = await sb.exec(this.argv(`cat > ${shellQuote(path)}`, user), {
      mode: "binary",
      stdout: "ignore",
    });
    const stderr = proc.stderr.readBytes();
    const writer = proc.stdin.getWriter();
    try {
      for await (const chunk of body) await writer.write(chunk as Buffer);
    } finally {
      await writer.close();
    }
    const exitCode = await proc.wait();
    if (exitCode !== 0)
      throw new DenvError(
        "unavailable",
        `writing ${path} on target ${this.name} (Modal) exited ${exitCode}: ${Buffer.from(await stderr).subarray(0, 300)}`,
      );
  }

  protected async download(
    env: PlacedEnvironment,
    path: string,
    user: string | undefined,
  ): Promise<Readable> {
    const sb = await this.sandbox(env);
    const proc = await sb.exec(this.argv(`cat -- ${shellQuote(path)}`, user), { mode: "binary" });
    await proc.closeStdin();
    const stderr = proc.stderr.readBytes();
    const name = this.name;
    // The bytes as they come; a command that failed ends the stream with its error.
    async function* bytes() {
      for await (const chunk of proc.stdout) yield Buffer.from(chunk);
      const exitCode = await proc.wait();
      if (exitCode !== 0)
        throw new DenvError(
          /No such file/.test(Buffer.from(await stderr).toString()) ? "not_found" : "unavailable",
          `reading ${path} on target ${name} (Modal) exited ${exitCode}: ${Buffer.from(await stderr).subarray(0, 300)}`,
        );
    }
    return Readable.from(bytes());
  }
}
