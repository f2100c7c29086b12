/**
 * Who is asking, checked on every route that needs it: an API key, or a console session with its
 * CSRF token on changes; each request counted against its caller's rate limit.
 */
import { DenvError } from "@denv/protocol";
import type { MiddlewareHandler } from "hono";
import { getCookie } from "hono/cookie";
import { assertAllowed, type Need, SAFE_METHODS } from "../people/access-rules.ts";
import { csrfTokenOf, SESSION_COOKIE } from "../people/session-cookie.ts";
import type { RateLimiter } from "../rate-limit.ts";
import { findSession, type Role, roleIn } from "../store/people-store.ts";
import { apiKeyById, findApiKey } from "../store/team-store.ts";
import type { ApiContext, ApiEnv } from "./api-deps.ts";

/**
 * A caller established in process: the E2B gateway acting for the key that made a sandbox (its
 * envd calls carry the sandbox's access token, not the key). Passed only as app.fetch's second
 * argument, which a request from outside never sets, so no header or body can claim it.
 */
export const IN_PROCESS_CALLER = Symbol("denv.in-process-caller");
export interface InProcessCaller {
  /** The API key acted for: checked again on every request, so a revoked key stops its sandboxes' calls. */
  keyId: string;
}

function inProcessCaller(c: ApiContext): InProcessCaller | undefined {
  const env = c.env as Record<symbol, unknown> | undefined;
  return env && typeof env === "object" ? (env[IN_PROCESS_CALLER] as InProcessCaller | undefined) : undefined;
}

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
 * rate limit, its team and role set; then the role is held to what the route needs.
 */
export const requireKey =
  (needs: Need): MiddlewareHandler<ApiEnv> =>
  async (c, next) => {
    const key = /^Bearer (.+)$/.exec(c.req.header("authorization") ?? "")?.[1];
    const { store } = c.var.deps;
    const caller = inProcessCaller(c);
    if (caller || key) {
      const row = caller ? await apiKeyById(store, caller.keyId) : await findApiKey(store, key as string);
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
      if (!SAFE_METHODS.has(c.req.method) && c.req.header("x-csrf-token") !== csrfTokenOf(token))
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
    assertAllowed(c.var.role, needs);
    await next();
  };
