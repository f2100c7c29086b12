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
import type { z } from "zod";
import type { BuildContexts } from "../build-contexts.ts";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { Admission } from "../deploy/admission.ts";
import type { Deployer } from "../deploy/deployer.ts";
import type { PoolKeeper } from "../deploy/pool-keeper.ts";
import type { FetchPolicy } from "../fetch-policy.ts";
import type { HostHub } from "../host-hub.ts";
import type { RateLimiter } from "../rate-limit.ts";
import type { Store } from "../store/open-store.ts";
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
  joinTokenTtlMs: number;
  downloadsDir: string;
  /** Build contexts uploaded with local projects (build-contexts.ts). */
  buildContexts: BuildContexts;
  /** /v1/mcp's sessions (mcp-routes.ts). */
  mcp: McpSessions;
}

export type ApiEnv = { Variables: { deps: ApiDeps; teamId: string; admin: boolean; keyId: string } };
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
  /** Needs an API key (Authorization: Bearer). */
  auth: boolean;
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

/** The key in Authorization: Bearer, checked, counted against its rate limit, and its team set. */
const requireKey: MiddlewareHandler<ApiEnv> = async (c, next) => {
  const key = /^Bearer (.+)$/.exec(c.req.header("authorization") ?? "")?.[1];
  if (!key)
    throw new DenvError("unauthenticated", "send an API key as `Authorization: Bearer <key>` (denv login)");
  const row = await findApiKey(c.var.deps.store, key);
  if (!row) throw new DenvError("unauthenticated", "this API key is not valid");
  const allowed = c.var.deps.limiter.take(row.id);
  if (!allowed.ok) {
    c.header("retry-after", String(Math.max(1, Math.ceil(allowed.retryAfterMs / 1000))));
    throw new DenvError(
      "rate_limited",
      `this key is over its rate limit; retry in ${allowed.retryAfterMs} ms (Retry-After)`,
      { details: { retry_after_ms: allowed.retryAfterMs } },
    );
  }
  c.set("teamId", row.team_id);
  c.set("admin", row.admin === 1);
  c.set("keyId", row.id);
  await next();
};

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
    if (r.auth) chain.push(requireKey);
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
