/**
 * How a route is written: one object holding its method, path, summary, body, query and response
 * schemas, and its handler. The body and query are parsed with those same schemas before the
 * handler runs, the key is checked when the route says so, and the OpenAPI document is generated
 * from the same objects (openapi-document.ts): a route cannot say one thing and do another.
 */

import type { McpSessions } from "@denv/mcp";
import { DenvError } from "@denv/protocol";
import { type Context, Hono, type MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { getCookie } from "hono/cookie";
import type { z } from "zod";
import type { BuildContexts } from "../build-contexts.ts";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { Admission } from "../deploy/admission.ts";
import type { Deployer } from "../deploy/deployer.ts";
import type { PoolKeeper } from "../deploy/pool-keeper.ts";
import type { FetchPolicy } from "../fetch-policy.ts";
import type { HostHub } from "../host-hub.ts";
import { csrfTokenOf, SESSION_COOKIE } from "../people/session-cookie.ts";
import type { PortsOrigin } from "../ports-origin.ts";
import type { RateLimiter } from "../rate-limit.ts";
import type { Store } from "../store/open-store.ts";
import { findSession, type Role, roleIn } from "../store/people-store.ts";
import { findApiKey } from "../store/team-store.ts";

/** What routes use, set on every request's context (`c.var.deps`). */
export interface ApiDeps {
  store: Store;
  hub: HostHub;
  deployer: Deployer;
  /** Every create's turn on its host (admission.ts). */
  admission: Admission;
  /** Warm pools: creates of a pooled version take a ready member (pool-keeper.ts). */
  pools: PoolKeeper;
  secrets: SecretBox;
  fetchPolicy: FetchPolicy;
  limiter: RateLimiter;
  /** Sign-ups, sign-ins and device codes, per client address (no key to count them against). */
  anonymousLimiter: RateLimiter;
  /** The same per account (an email, a person), across addresses. */
  accountLimiter: RateLimiter;
  joinTokenTtlMs: number;
  downloadsDir: string;
  /** Build contexts uploaded with local projects (build-contexts.ts). */
  buildContexts: BuildContexts;
  /** /v1/mcp's sessions (mcp-routes.ts). */
  mcp: McpSessions;
  /** Where port URLs are served (never this origin). */
  portsOrigin: PortsOrigin;
  /** How often a quiet command's stream carries a keep-alive (KEEPALIVE_INTERVAL_MS). */
  keepAliveMs: number;
}

export type ApiEnv = {
  Variables: {
    deps: ApiDeps;
    teamId: string;
    admin: boolean;
    /** The key's id, or the session's for a person signed in to the console. */
    keyId: string;
    /** What the caller may do in the team: read-only callers may only read (GET). */
    role: Role;
    /** The person behind the request (a session, or a key made for them), if any. */
    userId: string | null;
    /** Set when the request came with a console session rather than a key. */
    sessionId: string | null;
  };
};
export type ApiContext = Context<ApiEnv>;

/** 1 MiB: every JSON body but the ones that carry data. */
export const JSON_LIMIT_BYTES = 1024 * 1024;

type Infer<S> = S extends z.ZodType ? z.infer<S> : undefined;

export interface ApiRoute<
  B extends z.ZodType | undefined = z.ZodType | undefined,
  Q extends z.ZodType | undefined = z.ZodType | undefined,
> {
  method: "get" | "post" | "put" | "delete";
  /** OpenAPI style: /v1/envs/{id}. */
  path: string;
  summary: string;
  /** A JSON body, parsed with this schema (a refusal is invalid_argument with each issue's path). */
  body?: B;
  /**
   * A body that is not JSON, read by the handler as a stream: a tar, or exec's stream form (one
   * line of the exec JSON, then the command's stdin to the end of the body).
   */
  bodyType?: "json" | "tar" | "exec-stream";
  /** The query string, parsed with this schema. */
  query?: Q;
  response?: z.ZodType;
  responseType?: "json" | "tar" | "event-stream" | "multiplexed" | "any";
  status?: number;
  /** Needs an API key (Authorization: Bearer) or a console session (its cookie, and CSRF token for changes). */
  auth: boolean;
  /**
   * A request that changes nothing of the team's (signing out, answering a device login, accepting
   * an invitation): read-only callers may make it too.
   */
  readOnlyToo?: boolean;
  /** How large a body may be (default JSON_LIMIT_BYTES); null: not limited here (it streams). */
  bodyLimitBytes?: number | null;
  /** Every method; the path's last segment ({path}) is any subpath, or none (port URLs). */
  anyMethodAndSubpaths?: boolean;
  handler: (c: ApiContext, input: { body: Infer<B>; query: Infer<Q> }) => Response | Promise<Response>;
}

/** Declares a route; the generic parameters make its handler's input typed from its schemas. */
export function route<
  B extends z.ZodType | undefined = undefined,
  Q extends z.ZodType | undefined = undefined,
>(r: ApiRoute<B, Q>): ApiRoute {
  return r as unknown as ApiRoute;
}

function issues(error: z.ZodError, where: string): string {
  return error.issues.map((i) => `${i.path.join(".") || where}: ${i.message}`).join("; ");
}

async function parseBody(req: Request, schema: z.ZodType): Promise<unknown> {
  let raw: unknown;
  try {
    const text = await req.text();
    raw = text ? JSON.parse(text) : {};
  } catch {
    throw new DenvError("invalid_argument", "the body is not valid JSON");
  }
  const r = schema.safeParse(raw);
  if (!r.success) throw new DenvError("invalid_argument", issues(r.error, "(body)"));
  return r.data;
}

const limiters = new Map<number, MiddlewareHandler>();
function limitBody(limitBytes: number): MiddlewareHandler {
  let mw = limiters.get(limitBytes);
  if (!mw) {
    mw = bodyLimit({
      maxSize: limitBytes,
      onError: () => {
        throw new DenvError(
          "payload_too_large",
          `the request body is over ${limitBytes} bytes (${Math.round(limitBytes / 1024 ** 2)} MiB); send less at a time`,
        );
      },
    });
    limiters.set(limitBytes, mw);
  }
  return mw;
}

const READS = new Set(["GET", "HEAD", "OPTIONS"]);

/** Counts a request against its caller's rate limit (a key, or a person's sessions together). */
export function takeTurn(
  c: ApiContext,
  who: string,
  limiter: RateLimiter = c.var.deps.limiter,
  what = "this key is over its rate limit",
): void {
  const allowed = limiter.take(who);
  if (!allowed.ok) {
    c.header("retry-after", String(Math.max(1, Math.ceil(allowed.retryAfterMs / 1000))));
    throw new DenvError("rate_limited", `${what}; retry in ${allowed.retryAfterMs} ms (Retry-After)`, {
      details: { retry_after_ms: allowed.retryAfterMs },
    });
  }
}

/**
 * Who is asking: the key in Authorization: Bearer, or else a console session's cookie (whose
 * state-changing requests must carry its CSRF token in X-CSRF-Token). Checked, counted against its
 * rate limit, its team and role set; a read-only caller may only read.
 */
const requireKey =
  (readOnlyToo: boolean): MiddlewareHandler<ApiEnv> =>
  async (c, next) => {
    const key = /^Bearer (.+)$/.exec(c.req.header("authorization") ?? "")?.[1];
    const { store } = c.var.deps;
    if (key) {
      const row = await findApiKey(store, key);
      if (!row) throw new DenvError("unauthenticated", "this API key is not valid");
      takeTurn(c, row.id);
      c.set("teamId", row.team_id);
      c.set("admin", row.admin === 1);
      c.set("keyId", row.id);
      c.set("role", row.role as Role);
      c.set("userId", row.user_id);
      c.set("sessionId", null);
    } else {
      const token = getCookie(c, SESSION_COOKIE);
      if (!token)
        throw new DenvError(
          "unauthenticated",
          "send an API key as `Authorization: Bearer <key>` (denv login), or sign in to the console",
        );
      const session = await findSession(store, token);
      if (!session) throw new DenvError("unauthenticated", "the console session has ended: sign in again");
      // A cookie goes with every request the browser makes, whoever's page asked: a change must also
      // carry the token only the console's own page can read.
      if (!READS.has(c.req.method) && c.req.header("x-csrf-token") !== csrfTokenOf(token))
        throw new DenvError("forbidden", "this request needs the session's CSRF token in X-CSRF-Token");
      const role = await roleIn(store, session.user_id, session.team_id);
      if (!role) throw new DenvError("unauthenticated", "this account is no longer a member of the team");
      takeTurn(c, `user:${session.user_id}`);
      c.set("teamId", session.team_id);
      c.set("admin", false);
      c.set("keyId", session.id);
      c.set("role", role);
      c.set("userId", session.user_id);
      c.set("sessionId", session.id);
    }
    if (c.var.role === "read-only" && !READS.has(c.req.method) && !readOnlyToo)
      throw new DenvError("forbidden", "this key or member is read-only: it may look, not change anything");
    await next();
  };

const requireKeyChanges = requireKey(false);
const requireKeyReadOnlyToo = requireKey(true);

/** A resource's routes as one Hono sub-app: body limit, then the key, then parsed input. */
export function resourceApp(routes: ApiRoute[]): Hono<ApiEnv> {
  const app = new Hono<ApiEnv>();
  // Hono's overloads type a fixed number of handlers; the chain here is built per route.
  const on = app.on.bind(app) as unknown as (
    method: string,
    path: string,
    ...handlers: MiddlewareHandler<ApiEnv>[]
  ) => void;
  for (const r of routes) {
    const chain: MiddlewareHandler<ApiEnv>[] = [];
    if (r.bodyLimitBytes !== null) chain.push(limitBody(r.bodyLimitBytes ?? JSON_LIMIT_BYTES));
    if (r.auth) chain.push(r.readOnlyToo ? requireKeyReadOnlyToo : requireKeyChanges);
    const handle = async (c: ApiContext) => {
      const body =
        r.body && (r.bodyType ?? "json") === "json" ? await parseBody(c.req.raw, r.body) : undefined;
      let query: unknown;
      if (r.query) {
        const q = r.query.safeParse(c.req.query());
        if (!q.success) throw new DenvError("invalid_argument", issues(q.error, "(query)"));
        query = q.data;
      }
      return r.handler(c, { body, query } as never);
    };
    const path = r.path.replace(/\{(\w+)\}/g, ":$1");
    if (r.anyMethodAndSubpaths) {
      const base = path.replace(/\/:\w+$/, "");
      on("ALL", base, ...chain, handle);
      on("ALL", `${base}/*`, ...chain, handle);
    } else on(r.method.toUpperCase(), path, ...chain, handle);
  }
  return app;
}
