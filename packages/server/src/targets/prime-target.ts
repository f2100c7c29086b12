/**
 * Prime Intellect Sandboxes as a target, through its documented REST API (it publishes no
 * TypeScript SDK; `prime-sandboxes` is Python): the control plane at `/api/v1/sandbox` with the
 * team's key, and each sandbox's data plane at the gateway its `auth` call names, with the token
 * that call gives. A sandbox is one container from the image, with `network_access` off unless
 * egress is allowed and the variables; creation is asynchronous, so it is polled until RUNNING.
 * Then denv makes an unprivileged user, `user` (as E2B's templates have), and the sandbox's
 * paths; commands run as that user unless another is named, each answering with its output when
 * it ends, and files go as a tar through the gateway's upload and a `tar` in the sandbox.
 *
 * The gateway's address is the provider's answer: it is checked against the server's fetch policy
 * before a request (and the key's token) goes there, as a team's own endpoint is, and its path
 * segments must look like ids. Redirects are errors, not followed.
 *
 * Not run against the live Prime: its tests run against a local double of the published API
 * (test/doubles/prime-double.ts), and the row says so.
 */
import { createHash, randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { DenvError } from "@denv/protocol";
import { refusalIn } from "../outbound-guard.ts";
import type { Store } from "../store/open-store.ts";
import { HostedSandboxTarget, type RunEnd, SANDBOX_ID, shellQuote } from "./hosted-sandbox-target.ts";
import type { ImageSandboxSpec, PlacedEnvironment, TargetCapabilities } from "./target.ts";

const PRIME_API = "https://api.primeintellect.ai";
/** The unprivileged user denv makes in each sandbox; commands run as it unless another is named. */
const DEFAULT_USER = "user";
/** Prime ends a sandbox at its timeout (its default is 60 min): denv asks for its longest, a day. */
const SANDBOX_TIMEOUT_MIN = 24 * 60;
/** How long creation may take before denv gives up (users report minutes under load). */
const CREATE_WAIT_MS = 10 * 60_000;
const POLL_MS = 500;
/** A segment of a gateway path, as the provider's answer gives it. */
const SEGMENT = /^(?!\.{1,2}$)[A-Za-z0-9_.-]{1,128}$/;

export interface PrimeConnection {
  apiKey: string;
  /** Another endpoint speaking Prime's API (a test's double); null: Prime's own. */
  apiUrl: string | null;
  /** Prime's region ("us", "india"); empty: its default. */
  region: string;
  /** Refuses an address the server may not call (the fetch policy). */
  checkUrl: (url: URL, what: string) => void;
}

/** A sandbox's data plane, as its auth call answered. */
interface Gateway {
  base: string;
  token: string;
}

/** An answer of Prime's that was not a success, in its words where it gave some. */
class PrimeError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
    this.name =
      status === 404
        ? "PrimeNotFoundError"
        : status === 401 || status === 403
          ? "PrimeAuthenticationError"
          : status === 408
            ? "PrimeTimeoutError"
            : "PrimeError";
  }
}

/** The most of a control-plane answer read: a sandbox's record is a few KB. */
const CONTROL_ANSWER_BYTES = 1024 * 1024;
/** The most of an exec answer read: two streams of the API's largest output limit, and their JSON. */
const EXEC_ANSWER_BYTES = 2 * 64 * 1024 * 1024 + 1024 * 1024;

/**
 * An answer's text, read only up to the bound: the endpoint is one a team may name, and an answer
 * without end would otherwise fill this process's memory.
 */
async function boundedText(res: Response, maxBytes: number): Promise<string> {
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  if (res.body)
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      bytes += chunk.length;
      if (bytes > maxBytes) {
        await res.body.cancel().catch(() => {});
        throw new PrimeError(502, `an answer over ${maxBytes} bytes (read no further)`);
      }
      chunks.push(chunk);
    }
  return Buffer.concat(chunks).toString();
}

async function answer<T>(res: Response, maxBytes = CONTROL_ANSWER_BYTES): Promise<T> {
  const text = await boundedText(res, maxBytes);
  if (res.status >= 300) {
    let message = text.slice(0, 300);
    try {
      const j = JSON.parse(text);
      message = String(j.detail ?? j.message ?? j.error ?? message).slice(0, 300);
    } catch {}
    throw new PrimeError(res.status, `${res.status}: ${message}`);
  }
  try {
    return (text ? JSON.parse(text) : {}) as T;
  } catch {
    throw new PrimeError(502, `an answer that is not JSON: ${text.slice(0, 100)}`);
  }
}

export class PrimeTarget extends HostedSandboxTarget {
  readonly kind = "prime" as const;
  protected readonly provider = "Prime";
  protected readonly sandboxWord = "container";
  private readonly conn: PrimeConnection;
  private readonly apiUrl: string;
  private readonly account: string;
  /** Each sandbox's gateway, keyed by account and endpoint as well as the id (see E2B's). */
  private static readonly gateways = new Map<string, Promise<Gateway>>();

  constructor(name: string, conn: PrimeConnection, store: Store) {
    super(name, store);
    this.conn = conn;
    this.apiUrl = conn.apiUrl ?? PRIME_API;
    this.account = createHash("sha256")
      .update(`${conn.apiUrl ?? ""}\n${conn.apiKey}`)
      .digest("hex");
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await fetch(`${this.apiUrl}/api/v1/sandbox${path}`, {
      method,
      // A redirect would carry the key elsewhere: it is an error, not followed.
      redirect: "error",
      headers: {
        authorization: `Bearer ${this.conn.apiKey}`,
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    return answer<T>(res);
  }

  async checkKey(): Promise<void> {
    try {
      await this.call("GET", "?per_page=1");
    } catch (err) {
      const refused = refusalIn(err);
      if (refused) throw refused;
      throw new DenvError(
        "invalid_argument",
        `Prime did not accept the key: ${(err as Error).message.slice(0, 300)}`,
      );
    }
  }

  async capabilities(): Promise<TargetCapabilities> {
    const no = (detail: string) => ({ supported: false, detail });
    return {
      multiServiceStack: no("no (one container per sandbox; private networks not driven)"),
      consistentSnapshot: no("a checkpoint of the root disk (not driven by denv yet)"),
      fork: no("no (Prime forks its own checkpoints; not driven by denv yet)"),
      forkTime: { supported: false, detail: "a checkpoint's restore (no figure published)" },
      egressDenyVerified: {
        supported: true,
        detail: "provider network setting (network_access: false), not probed",
      },
      capsEnforced: { supported: true, detail: "provider resources (cpu_cores, memory_gb, disk_size_gb)" },
      gpu: no("no (GPU sandboxes not driven)"),
      verify: no("no (verify is not available on hosted providers yet)"),
    };
  }

  protected async makeSandbox(teamId: string, name: string, spec: ImageSandboxSpec): Promise<string> {
    let made: { id: string; status: string };
    try {
      made = await this.call("POST", "", {
        name,
        docker_image: spec.image,
        start_command: "tail -f /dev/null",
        network_access: spec.egress === "allow",
        timeout_minutes: SANDBOX_TIMEOUT_MIN,
        environment_vars: spec.env ?? {},
        labels: [`denv_team:${teamId}`, `denv_name:${name}`],
        ...(this.conn.region ? { region: this.conn.region } : {}),
      });
    } catch (err) {
      throw this.fail(`creating a sandbox from ${spec.image}`, err);
    }
    const id = String(made.id ?? "");
    // The caller refuses an id that is not one (and deletes it); nothing else is sent with it.
    if (!SANDBOX_ID.test(id)) return id;
    try {
      const deadline = Date.now() + CREATE_WAIT_MS;
      let status = made.status;
      while (status !== "RUNNING") {
        if (["ERROR", "TERMINATED", "TIMEOUT"].includes(status) || Date.now() > deadline) {
          const at = await this.call<{ errorMessage?: string }>("GET", `/${id}`).catch(
            () => ({}) as { errorMessage?: string },
          );
          throw new PrimeError(
            503,
            `the sandbox is ${status}${at.errorMessage ? `: ${String(at.errorMessage).slice(0, 300)}` : ""}`,
          );
        }
        await new Promise((r) => setTimeout(r, POLL_MS));
        status = (await this.call<{ status: string }>("GET", `/${id}`)).status;
      }
      // The user commands run as, and the sandbox's paths (denv's default /work), made and given to
      // it, as a denvd sandbox's volumes are.
      const paths = (spec.volumes ?? ["/work"]).map(shellQuote).join(" ");
      const user = spec.user ?? DEFAULT_USER;
      const r = await this.gatewayRun(
        id,
        `id -u ${shellQuote(user)} >/dev/null 2>&1 || useradd -m ${shellQuote(user)} 2>/dev/null || adduser -D ${shellQuote(user)}; mkdir -p -- ${paths} && chown ${shellQuote(user)} -- ${paths}`,
        { user: "root", env: {}, timeoutMs: 120_000 },
      );
      if (r.exit_code !== 0)
        throw new PrimeError(
          503,
          `making the sandbox's user and paths exited ${r.exit_code}: ${r.stderr.slice(0, 300)}`,
        );
    } catch (err) {
      await this.killSandbox(id).catch(() => {});
      throw this.fail(`starting a sandbox from ${spec.image}`, err);
    }
    return id;
  }

  /** The sandbox's data plane: asked of the control plane once, its address checked before use. */
  private gateway(sandboxId: string): Promise<Gateway> {
    const key = `${this.account}/${sandboxId}`;
    let g = PrimeTarget.gateways.get(key);
    if (!g) {
      g = (async () => {
        const a = await this.call<{
          gateway_url?: string;
          user_ns?: string;
          job_id?: string;
          token?: string;
        }>("POST", `/${sandboxId}/auth`);
        if (
          !SEGMENT.test(String(a.user_ns)) ||
          !SEGMENT.test(String(a.job_id)) ||
          typeof a.token !== "string"
        )
          throw new PrimeError(502, "the sandbox's auth answer has no gateway path or token that is one");
        const base = this.gatewayBase(String(a.gateway_url ?? ""));
        return { base: `${base}/${a.user_ns}/${a.job_id}`, token: a.token };
      })();
      PrimeTarget.gateways.set(key, g);
      g.catch(() => PrimeTarget.gateways.delete(key));
    }
    return g;
  }

  /**
   * The gateway's address, if the server may call it: one of Prime's own (https, under
   * primeintellect.ai) when the team uses Prime's endpoint, else one the fetch policy allows.
   */
  private gatewayBase(raw: string): string {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new PrimeError(502, "the sandbox's gateway_url is not a URL");
    }
    if (
      (url.protocol !== "https:" && url.protocol !== "http:") ||
      url.username ||
      url.password ||
      url.search ||
      url.hash
    )
      throw new PrimeError(
        502,
        "the sandbox's gateway_url is not an http(s) URL without credentials, query or fragment",
      );
    const primes = url.protocol === "https:" && /(^|\.)primeintellect\.ai$/.test(url.hostname);
    if (!(this.conn.apiUrl === null && primes)) this.conn.checkUrl(url, "the sandbox's gateway_url");
    return url.href.replace(/\/$/, "");
  }

  private async gatewayRun(
    sandboxId: string,
    line: string,
    opts: { user?: string; cwd?: string; env: Record<string, string>; timeoutMs: number },
  ): Promise<{ stdout: string; stderr: string; exit_code: number }> {
    const g = await this.gateway(sandboxId);
    const res = await fetch(`${g.base}/exec`, {
      method: "POST",
      redirect: "error",
      headers: { authorization: `Bearer ${g.token}`, "content-type": "application/json" },
      body: JSON.stringify({
        command: line,
        sandbox_id: sandboxId,
        env: opts.env,
        timeout: Math.max(1, Math.ceil(opts.timeoutMs / 1000)),
        user: opts.user ?? DEFAULT_USER,
        ...(opts.cwd ? { working_dir: opts.cwd } : {}),
      }),
    });
    return answer(res, EXEC_ANSWER_BYTES);
  }

  private stack(env: PlacedEnvironment): string {
    if (!env.stackId)
      throw new DenvError("conflict", `environment ${env.name} has no sandbox on ${this.name}`);
    return env.stackId;
  }

  protected async startBackground(sandboxId: string, line: string, user: string | undefined): Promise<void> {
    // The gateway's exec answers when its command ends: the command is left running on its own.
    const r = await this.gatewayRun(sandboxId, `nohup sh -c ${shellQuote(line)} >/dev/null 2>&1 &`, {
      ...(user ? { user } : {}),
      env: {},
      timeoutMs: 60_000,
    });
    if (r.exit_code !== 0)
      throw new PrimeError(503, `starting it exited ${r.exit_code}: ${r.stderr.slice(0, 300)}`);
  }

  protected async killSandbox(sandboxId: string): Promise<void> {
    PrimeTarget.gateways.delete(`${this.account}/${sandboxId}`);
    try {
      await this.call("DELETE", `/${encodeURIComponent(sandboxId)}`);
    } catch (err) {
      // One already gone is gone.
      if (!(err instanceof PrimeError && err.status === 404)) throw err;
    }
  }

  protected async run(
    env: PlacedEnvironment,
    line: string,
    opts: { user?: string; cwd?: string; env: Record<string, string>; timeoutMs: number },
    onOutput: (which: "stdout" | "stderr", chunk: Buffer) => void,
  ): Promise<RunEnd> {
    try {
      const r = await this.gatewayRun(this.stack(env), line, opts);
      if (r.stdout) onOutput("stdout", Buffer.from(r.stdout));
      if (r.stderr) onOutput("stderr", Buffer.from(r.stderr));
      return { exitCode: Number(r.exit_code), timedOut: false };
    } catch (err) {
      // The gateway answers 408 when the command ran past its timeout (and ends it).
      if (err instanceof PrimeError && err.status === 408) return { exitCode: 124, timedOut: true };
      throw this.fail("a command", err);
    }
  }

  protected async upload(env: PlacedEnvironment, path: string, user: string | undefined, body: Readable) {
    const id = this.stack(env);
    const g = await this.gateway(id);
    // One multipart part, streamed: the tar is never held whole in this process.
    const boundary = `denv${randomBytes(12).toString("hex")}`;
    async function* form() {
      yield Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="upload.tar"\r\nContent-Type: application/octet-stream\r\n\r\n`,
      );
      for await (const chunk of body) yield chunk as Buffer;
      yield Buffer.from(`\r\n--${boundary}--\r\n`);
    }
    const q = new URLSearchParams({ path, sandbox_id: id });
    const res = await fetch(`${g.base}/upload?${q}`, {
      method: "POST",
      redirect: "error",
      headers: {
        authorization: `Bearer ${g.token}`,
        "content-type": `multipart/form-data; boundary=${boundary}`,
      },
      body: Readable.toWeb(Readable.from(form())) as ReadableStream,
      duplex: "half",
    } as RequestInit);
    await answer(res);
    // The gateway writes as its own user: the file is given to the one it is for, who removes it.
    const to = user ?? DEFAULT_USER;
    if (to !== "root") {
      const r = await this.gatewayRun(id, `chown -- ${shellQuote(to)} ${shellQuote(path)}`, {
        user: "root",
        env: {},
        timeoutMs: 60_000,
      });
      if (r.exit_code !== 0)
        throw new PrimeError(503, `giving ${path} to ${to} exited ${r.exit_code}: ${r.stderr.slice(0, 300)}`);
    }
  }

  protected async download(env: PlacedEnvironment, path: string): Promise<Readable> {
    const id = this.stack(env);
    const g = await this.gateway(id);
    const q = new URLSearchParams({ path, sandbox_id: id });
    const res = await fetch(`${g.base}/download?${q}`, {
      redirect: "error",
      headers: { authorization: `Bearer ${g.token}` },
    });
    if (res.status >= 300 || !res.body) await answer(res);
    return Readable.fromWeb(res.body as Parameters<typeof Readable.fromWeb>[0]);
  }
}
