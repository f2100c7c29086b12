/**
 * What the E2B gateway's parts share: the store, the server's key, /v1 in process, the processes
 * started in each sandbox, and how a call names its sandbox (by id and team for the control plane;
 * by E2b-Sandbox-Id and its access token for envd).
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { IngressNames } from "../ingress/ingress-names.ts";
import { allows, type Need, refusal } from "../people/access-rules.ts";
import { RateLimiter } from "../rate-limit.ts";
import { e2bSandbox, teamE2bSandbox } from "../store/e2b-store.ts";
import type { Store } from "../store/open-store.ts";
import type { Role } from "../store/people-store.ts";
import type { E2bSandboxesTable } from "../store/schema.ts";
import { apiKeyById, teamKeyRoles } from "../store/team-store.ts";
import { ConnectError, parseJson } from "./connect-protocol.ts";
import { EnvdProcesses } from "./envd-processes.ts";
import { resumeSandbox } from "./sandbox-pause.ts";

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

/** The key a call acts as: the one that asked, with its team and its role now. */
export interface E2bCaller {
  id: string;
  team_id: string;
  role: Role;
}

/** An envd call: its sandbox, the key it acts as, and (a signed URL's) the user it was signed for. */
export interface EnvdCall {
  s: Sandbox;
  caller: E2bCaller;
  /** Set for a signed URL only: the user it signs ("" signs none: the service's own user). */
  signedUser?: string;
}

export interface E2bContext {
  store: Store;
  secrets: SecretBox;
  v1: V1Call;
  limiter: RateLimiter;
  nowMs: () => number;
  ingress: IngressNames | null;
  watchPollMs: number;
  processes: EnvdProcesses;
  /**
   * The sandbox's envd access token for one key: `ea_`, the key's id, and a MAC of the sandbox, its
   * salt and the key's id under the server's key (never stored). A call with it acts as that key.
   */
  tokenOf(s: Pick<Sandbox, "environment_id" | "token_salt">, keyId: string): string;
  /** The team's sandbox by its E2B id, or null (another team's is null too). */
  sandboxOf(teamId: string, sandboxId: string): Promise<Sandbox | null>;
  /**
   * The sandbox an envd call is for (E2b-Sandbox-Id with an X-Access-Token made for a key of its
   * team), and the key it acts as, whose role must allow what the call needs; else unauthenticated
   * or permission_denied.
   */
  envdCall(c: Headed, needs: Need): Promise<EnvdCall>;
  /**
   * A /files call: by its X-Access-Token, or by a signed URL's `signature` (what the SDK's
   * uploadUrl and downloadUrl make from the token: `v1_` + SHA-256 of path, operation, user, token
   * and expiry), which must not have expired.
   */
  filesCall(
    c: Headed & { req: { query(name: string): string | undefined } },
    operation: "read" | "write",
  ): Promise<EnvdCall>;
}

export const envIdOf = (sandboxId: string) => `env_${sandboxId}`;
export const sandboxIdOf = (envId: string) => envId.replace(/^env_/, "");
const SANDBOX_ID = /^[a-z0-9]{1,64}$/;
/** `ea_` + the key id's hex + `_` + the MAC (base64url). */
const ACCESS_TOKEN = /^ea_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$/;

export function e2bContext(options: E2bGatewayOptions): E2bContext {
  const { store, secrets } = options;
  const limiter = options.limiter ?? new RateLimiter();
  const nowMs = options.nowMs ?? Date.now;
  const tokenOf = (s: Pick<Sandbox, "environment_id" | "token_salt">, keyId: string) =>
    `ea_${keyId.replace(/^key_/, "")}_${secrets.derive(`e2b-envd:${s.environment_id}:${s.token_salt}:${keyId}`)}`;
  /** The sandbox an envd call's E2b-Sandbox-Id names (any team's: its token or signature decides). */
  const headerSandbox = async (c: Headed): Promise<Sandbox | undefined> => {
    const id = c.req.header("e2b-sandbox-id") ?? "";
    if (!SANDBOX_ID.test(id)) return undefined;
    return e2bSandbox(store, envIdOf(id));
  };
  /** A call counted against the rate limit of the key it acts as. */
  const takeTurn = (keyId: string) => {
    const turn = limiter.take(keyId);
    if (!turn.ok)
      throw new ConnectError(
        "resource_exhausted",
        `this key is over its rate limit; retry in ${turn.retryAfterMs} ms`,
      );
  };
  const wrongToken = () =>
    new ConnectError("unauthenticated", "the sandbox's access token (X-Access-Token) is missing or wrong");
  /** The key a token was made for, if it was made for this sandbox, and that key is still its team's. */
  const callerOfToken = async (s: Sandbox | undefined, token: string): Promise<E2bCaller> => {
    const m = ACCESS_TOKEN.exec(token);
    if (!s || !m) throw wrongToken();
    const keyId = `key_${m[1]}`;
    if (!sameSecret(tokenOf(s, keyId), token)) throw wrongToken();
    // Checked again on every call: a revoked key, or one moved to another role, acts no more as it was.
    const key = await apiKeyById(store, keyId);
    if (!key || key.team_id !== s.team_id)
      throw new ConnectError("unauthenticated", "the key this access token was made for is no longer valid");
    takeTurn(key.id);
    return { id: key.id, team_id: key.team_id, role: key.role as Role };
  };
  const held = (caller: E2bCaller, needs: Need) => {
    if (!allows(caller.role, needs)) throw new ConnectError("permission_denied", refusal(caller.role, needs));
  };
  /**
   * The sandbox an envd call acts on: not a paused one, unless it was made with autoResume and the
   * caller may change it: then it is resumed first (sandbox-pause.ts), as E2B's autoResume does.
   */
  const awake = async (s: Sandbox, caller: E2bCaller): Promise<Sandbox> => {
    if (!s.paused_version_id || !s.auto_resume || !allows(caller.role, "change")) return notPaused(s);
    const deps = { store, v1: options.v1, nowMs, dropStreams: () => {} };
    await resumeSandbox(deps, s, caller.id, DEFAULT_TIMEOUT_S);
    return (await teamE2bSandbox(store, s.team_id, s.environment_id)) ?? notPaused(s);
  };
  return {
    store,
    secrets,
    v1: options.v1,
    limiter,
    nowMs,
    ingress: options.ingress ?? null,
    watchPollMs: options.watchPollMs ?? 250,
    processes: new EnvdProcesses(),
    tokenOf,
    async sandboxOf(teamId, sandboxId) {
      if (!SANDBOX_ID.test(sandboxId)) return null;
      const s = await teamE2bSandbox(store, teamId, envIdOf(sandboxId));
      return s ?? null;
    },
    async envdCall(c, needs) {
      const port = c.req.header("e2b-sandbox-port") ?? ENVD_PORT;
      if (port !== ENVD_PORT)
        throw new ConnectError(
          "unimplemented",
          `port ${port} is not served here (only envd's, ${ENVD_PORT})`,
        );
      const s = await headerSandbox(c);
      const caller = await callerOfToken(s, c.req.header("x-access-token") ?? "");
      held(caller, needs);
      return { s: await awake(s as Sandbox, caller), caller };
    },
    async filesCall(c, operation) {
      const needs: Need = operation === "read" ? "read" : "change";
      const signature = c.req.query("signature");
      if (signature === undefined) return this.envdCall(c, needs);
      const s = await headerSandbox(c);
      const expiration = c.req.query("signature_expiration");
      if (expiration !== undefined && !/^[0-9]{1,12}$/.test(expiration))
        throw new ConnectError("invalid_argument", "signature_expiration is not a time in seconds");
      const refused = () =>
        new ConnectError("unauthenticated", `the signature does not sign this ${operation} of this path`);
      if (!s) throw refused();
      const user = c.req.query("username") ?? "";
      // The signature is made from a token, which names the key it acts as: each of the team's
      // live tokens for this sandbox is tried (a handful: the keys that asked for one).
      const keys = await teamKeyRoles(store, s.team_id);
      const path = c.req.query("path") ?? "";
      const key = keys.find((k) => {
        const raw = [path, operation, user, tokenOf(s, k.id)]
          .concat(expiration === undefined ? [] : [expiration])
          .join(":");
        const want = `v1_${createHash("sha256").update(raw).digest("base64").replace(/=+$/, "")}`;
        return sameSecret(want, signature);
      });
      if (!key) throw refused();
      if (expiration !== undefined && Number(expiration) * 1000 < nowMs())
        throw new ConnectError("unauthenticated", "the signed URL has expired");
      const caller = { id: key.id, team_id: key.team_id, role: key.role as Role };
      takeTurn(key.id);
      held(caller, needs);
      // The user is the one signed, and only that: a header never names it for a signed URL.
      return { s: await awake(s, caller), caller, signedUser: user === "" ? "" : checkedUser(user) };
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
