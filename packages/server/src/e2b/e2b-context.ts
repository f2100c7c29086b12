/**
 * What the E2B gateway's parts share: the store, the server's key, /v1 in process, the processes
 * started in each sandbox, and how a call names its sandbox (by id and team for the control plane;
 * by E2b-Sandbox-Id and its access token for envd).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { IngressNames } from "../ingress/ingress-names.ts";
import { RateLimiter } from "../rate-limit.ts";
import type { Store } from "../store/open-store.ts";
import type { E2bSandboxesTable } from "../store/schema.ts";
import { ConnectError, parseJson } from "./connect-protocol.ts";
import { EnvdProcesses } from "./envd-processes.ts";

/** The envd version reported: the SDK takes the paths this gateway serves for it (stdin, multipart uploads). */
export const ENVD_VERSION = "0.5.7";
/** envd's port, as the SDK names it in E2b-Sandbox-Port: the only one served here. */
export const ENVD_PORT = "49983";
/** A sandbox's timeout when the create names none (E2B's API default), and the longest allowed. */
export const DEFAULT_TIMEOUT_S = 300;
export const MAX_TIMEOUT_S = 24 * 3600;
/** The most a control-plane request's JSON may hold (metadata and env vars included). */
export const CONTROL_BODY_LIMIT_BYTES = 1024 * 1024;

/** A call of /v1 in process, as an API key (by its id). */
export type V1Call = (keyId: string, path: string, init?: RequestInit) => Promise<Response>;

export type Sandbox = E2bSandboxesTable;

export interface E2bGatewayOptions {
  store: Store;
  secrets: SecretBox;
  v1: V1Call;
  /** The API's per-key limiter: the control plane's own answers count against it too. */
  limiter?: RateLimiter;
  /** The clock, in ms (tests drive it). */
  nowMs?: () => number;
  /** Ingress names: `domain` and `trafficAccessToken` in a sandbox's body (getHost works by it). */
  ingress?: IngressNames | null;
  /** How often a WatchDir stream lists its directory (default 250 ms). */
  watchPollMs?: number;
}

/** A request's headers, as the routes read them. */
export type Headed = { req: { header(name: string): string | undefined } };

export interface E2bContext {
  store: Store;
  secrets: SecretBox;
  v1: V1Call;
  limiter: RateLimiter;
  nowMs: () => number;
  ingress: IngressNames | null;
  watchPollMs: number;
  processes: EnvdProcesses;
  /** The sandbox's envd access token: derived from the server's key and its salt, never stored. */
  tokenOf(s: Pick<Sandbox, "environment_id" | "token_salt">): string;
  /** The team's sandbox by its E2B id, or null (another team's is null too). */
  sandboxOf(teamId: string, sandboxId: string): Promise<Sandbox | null>;
  /** The sandbox an envd call is for (E2b-Sandbox-Id and its X-Access-Token), or unauthenticated. */
  envdSandbox(c: Headed): Promise<Sandbox>;
  /**
   * A /files call's sandbox: by its X-Access-Token, or by a signed URL's `signature` (what the
   * SDK's uploadUrl and downloadUrl make from the token: `v1_` + SHA-256 of path, operation, user,
   * token and expiry), which must not have expired.
   */
  filesSandbox(
    c: Headed & { req: { query(name: string): string | undefined } },
    operation: "read" | "write",
  ): Promise<Sandbox>;
}

export const envIdOf = (sandboxId: string) => `env_${sandboxId}`;
export const sandboxIdOf = (envId: string) => envId.replace(/^env_/, "");
const SANDBOX_ID = /^[a-z0-9]{1,64}$/;

export function e2bContext(options: E2bGatewayOptions): E2bContext {
  const { store, secrets } = options;
  const tokenOf = (s: Pick<Sandbox, "environment_id" | "token_salt">) =>
    `ea_${secrets.derive(`e2b-envd:${s.environment_id}:${s.token_salt}`)}`;
  /** The sandbox an envd call's E2b-Sandbox-Id names (any team's: its token or signature decides). */
  const headerSandbox = async (c: Headed): Promise<Sandbox | undefined> => {
    const id = c.req.header("e2b-sandbox-id") ?? "";
    if (!SANDBOX_ID.test(id)) return undefined;
    return store
      .selectFrom("e2b_sandboxes")
      .selectAll()
      .where("environment_id", "=", envIdOf(id))
      .executeTakeFirst();
  };
  return {
    store,
    secrets,
    v1: options.v1,
    limiter: options.limiter ?? new RateLimiter(),
    nowMs: options.nowMs ?? Date.now,
    ingress: options.ingress ?? null,
    watchPollMs: options.watchPollMs ?? 250,
    processes: new EnvdProcesses(),
    tokenOf,
    async sandboxOf(teamId, sandboxId) {
      if (!SANDBOX_ID.test(sandboxId)) return null;
      const s = await store
        .selectFrom("e2b_sandboxes")
        .selectAll()
        .where("environment_id", "=", envIdOf(sandboxId))
        .where("team_id", "=", teamId)
        .executeTakeFirst();
      return s ?? null;
    },
    async envdSandbox(c) {
      const port = c.req.header("e2b-sandbox-port") ?? ENVD_PORT;
      if (port !== ENVD_PORT)
        throw new ConnectError(
          "unimplemented",
          `port ${port} is not served here (only envd's, ${ENVD_PORT})`,
        );
      const token = c.req.header("x-access-token") ?? "";
      const s = await headerSandbox(c);
      if (!s || !sameSecret(tokenOf(s), token))
        throw new ConnectError(
          "unauthenticated",
          "the sandbox's access token (X-Access-Token) is missing or wrong",
        );
      return notPaused(s);
    },
    async filesSandbox(c, operation) {
      const signature = c.req.query("signature");
      if (signature === undefined) return this.envdSandbox(c);
      const s = await headerSandbox(c);
      const expiration = c.req.query("signature_expiration");
      if (expiration !== undefined && !/^[0-9]{1,12}$/.test(expiration))
        throw new ConnectError("invalid_argument", "signature_expiration is not a time in seconds");
      const raw = [c.req.query("path") ?? "", operation, c.req.query("username") ?? "", s ? tokenOf(s) : ""]
        .concat(expiration === undefined ? [] : [expiration])
        .join(":");
      const want = `v1_${createHash("sha256").update(raw).digest("base64").replace(/=+$/, "")}`;
      if (!s || !sameSecret(want, signature))
        throw new ConnectError(
          "unauthenticated",
          `the signature does not sign this ${operation} of this path`,
        );
      if (expiration !== undefined && Number(expiration) * 1000 < (options.nowMs ?? Date.now)())
        throw new ConnectError("unauthenticated", "the signed URL has expired");
      return notPaused(s);
    },
  };
}

/** Equal secrets, compared in constant time. */
function sameSecret(want: string, got: string): boolean {
  const a = Buffer.from(want);
  const b = Buffer.from(got);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** A sandbox envd's calls may act on: not a paused one. */
function notPaused(s: Sandbox): Sandbox {
  if (s.paused_version_id)
    throw new ConnectError("failed_precondition", "the sandbox is paused: connect to it to resume it");
  return s;
}

/** Who a call acts as: `Authorization: Basic base64("user:")`, else the service's own user. */
export function userOf(c: Headed): string | undefined {
  const basic = /^Basic (.+)$/.exec(c.req.header("authorization") ?? "")?.[1];
  if (!basic) return undefined;
  return checkedUser(Buffer.from(basic, "base64").toString().split(":")[0] ?? "");
}

/** A user name or uid as a call may name it, or invalid_argument. */
export function checkedUser(user: string): string {
  if (!/^[a-z_][a-z0-9_.-]{0,31}$|^[0-9]{1,10}$/i.test(user))
    throw new ConnectError("invalid_argument", "the user is not a user name or uid");
  return user;
}

/** A timeout in whole seconds (1 to MAX_TIMEOUT_S), or the default when none is given. */
export function timeoutOf(v: unknown, fallback: number | null): number {
  if (v === undefined || v === null) {
    if (fallback === null) throw new ConnectError("invalid_argument", "timeout (seconds) is required");
    return fallback;
  }
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1 || v > MAX_TIMEOUT_S)
    throw new ConnectError(
      "invalid_argument",
      `timeout: a whole number of seconds from 1 to ${MAX_TIMEOUT_S}`,
    );
  return v;
}

export function stringRecord(v: unknown, what: string): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (typeof v !== "object" || Array.isArray(v))
    throw new ConnectError("invalid_argument", `${what} must be an object of strings`);
  const out: Record<string, string> = {};
  for (const [k, x] of Object.entries(v)) {
    if (typeof x !== "string") throw new ConnectError("invalid_argument", `${what}.${k} must be a string`);
    out[k] = x;
  }
  return out;
}

/** Paths are absolute here: a relative one has no home to resolve against yet. */
export function absolute(p: unknown): string {
  if (typeof p !== "string" || !p.startsWith("/"))
    throw new ConnectError("invalid_argument", `path ${JSON.stringify(p)} must be absolute (start with /)`);
  return p;
}

/** A request's body, read no further than `maxBytes` (more is refused, not held). */
export async function boundedBody(
  body: ReadableStream<Uint8Array> | null,
  maxBytes: number,
): Promise<Buffer> {
  const parts: Buffer[] = [];
  let n = 0;
  if (body)
    for await (const chunk of body) {
      n += chunk.length;
      if (n > maxBytes)
        throw new ConnectError("resource_exhausted", `the request body is over the ${maxBytes}-byte limit`);
      parts.push(Buffer.from(chunk));
    }
  return Buffer.concat(parts);
}

/** A request's JSON body, within `maxBytes`. */
export async function boundedJson(
  req: { raw: Request },
  maxBytes = CONTROL_BODY_LIMIT_BYTES,
): Promise<Record<string, unknown>> {
  return parseJson(await boundedBody(req.raw.body, maxBytes));
}
