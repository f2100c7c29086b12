/**
 * The console session's cookie and its CSRF token. The cookie is HttpOnly (no script reads it),
 * Secure (browsers also keep Secure cookies for http://localhost and 127.0.0.1), SameSite=Strict
 * (another site's page never sends it) and lives as long as the session. The CSRF token is derived
 * from the session's secret token, so the server can hand it to the console's own page on each
 * load (GET /v1/auth/session) without storing it; only a page that can read that same-origin
 * answer can send it back.
 */
import { createHmac } from "node:crypto";
import type { Context } from "hono";
import { deleteCookie, setCookie } from "hono/cookie";

// __Host-: the browser keeps it only if it is Secure, for "/", and without a Domain, so no other
// host name (a port URL's origin among them) can set or be sent it.
export const SESSION_COOKIE = "__Host-denv_session";

export function csrfTokenOf(sessionToken: string): string {
  return createHmac("sha256", sessionToken).update("denv console csrf v1").digest("base64url");
}

export function setSessionCookie(c: Context, token: string, expiresAt: string): void {
  setCookie(c, SESSION_COOKIE, token, {
    httpOnly: true,
    secure: true,
    sameSite: "Strict",
    path: "/",
    expires: new Date(expiresAt),
  });
}

export function clearSessionCookie(c: Context): void {
  deleteCookie(c, SESSION_COOKIE, { path: "/", secure: true, httpOnly: true, sameSite: "Strict" });
}
