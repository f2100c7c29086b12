/**
 * How a route is written: one object holding its method, path, summary, body, query and response
 * schemas, and its handler. The body and query are parsed with those same schemas before the
 * handler runs, the key is checked when the route says so, and the OpenAPI document is generated
 * from the same objects (openapi-document.ts): a route cannot say one thing and do another.
 */

import { DenvError, isDenvError } from "@denv/protocol";
import { Hono, type MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { z } from "zod";
import { type Need, needOfMethod } from "../people/access-rules.ts";
import { requireKey } from "./api-auth.ts";
import type { ApiContext, ApiEnv } from "./api-deps.ts";
import { anonymousBody } from "./request-bodies.ts";

/** 1 MiB: every JSON body but the ones that carry data. */
export const JSON_LIMIT_BYTES = 1024 * 1024;

type Infer<S> = S extends z.ZodType ? z.infer<S> : undefined;

export interface ApiRoute<
  B extends z.ZodType | undefined = z.ZodType | undefined,
  Q extends z.ZodType | undefined = z.ZodType | undefined,
> {
  method: "get" | "post" | "put" | "patch" | "delete";
  /** OpenAPI style: /v1/envs/{id}. */
  path: string;
  /**
   * The route's method in the generated clients, "group.verb" (`envs.fork`: `client.envs.fork(id,
   * body)` in TypeScript, `client.envs.fork(id, body)` in Python); unique across routes.
   */
  name: `${string}.${string}`;
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
  responseType?: "json" | "ndjson" | "tar" | "event-stream" | "multiplexed" | "any";
  status?: number;
  /** Needs an API key (Authorization: Bearer) or a console session (its cookie, and CSRF token for changes). */
  auth: boolean;
  /**
   * What the caller's role must allow (access-rules.ts): by default a GET reads and anything else
   * changes. "read" on a POST: a request that changes nothing of the team's (signing out,
   * answering a device login, accepting an invitation); "admin": the team's admins only.
   */
  needs?: Need;
  /**
   * How large a body may be (default JSON_LIMIT_BYTES); null: not limited here (it streams). A route
   * anyone may call takes its body within this limit and the anonymous budget (request-bodies.ts).
   */
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
  } catch (err) {
    // The body's own refusals (its budget, a sender gone idle) are said as they are.
    if (isDenvError(err)) throw err;
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

/**
 * A route's JSON answer, checked against its response schema (the other half of the wire the
 * parsing of requests checks): a success that says something else than its schema is a fault of
 * the server's, answered as one (internal, its words in the log). Errors and answers that are not
 * JSON (tars, streams) pass as they are.
 */
export async function checkedAnswer(r: ApiRoute, answer: Response): Promise<Response> {
  if (!r.response || (r.responseType ?? "json") !== "json") return answer;
  if (answer.status < 200 || answer.status >= 300) return answer;
  if (!(answer.headers.get("content-type") ?? "").includes("application/json")) return answer;
  const checked = r.response.safeParse(await answer.clone().json());
  if (checked.success) return answer;
  throw new Error(
    `the answer of ${r.method.toUpperCase()} ${r.path} does not match its schema: ${issues(checked.error, "(answer)")}`,
  );
}

/**
 * A resource's routes as one Hono sub-app. Nothing of a body is read before the caller is known to
 * be allowed: the key (and the role it must have) first, then the body's limit (Hono's reads a body
 * of no declared length to count it). A route anyone may call takes its body within the anonymous
 * budget (request-bodies.ts), which counts what the limit reads.
 */
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
    const limit = r.bodyLimitBytes ?? JSON_LIMIT_BYTES;
    if (r.auth) {
      chain.push(requireKey(r.needs ?? needOfMethod(r.method)));
      if (r.bodyLimitBytes !== null) chain.push(limitBody(limit));
    } else if (r.method !== "get" && !r.anyMethodAndSubpaths) chain.push(anonymousBody(limit));
    const handle = async (c: ApiContext) => {
      const body =
        r.body && (r.bodyType ?? "json") === "json" ? await parseBody(c.req.raw, r.body) : undefined;
      let query: unknown;
      if (r.query) {
        const q = r.query.safeParse(c.req.query());
        if (!q.success) throw new DenvError("invalid_argument", issues(q.error, "(query)"));
        query = q.data;
      }
      const answer = await r.handler(c, { body, query } as never);
      return c.var.deps.checkAnswers ? checkedAnswer(r, answer) : answer;
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
