/**
 * The console's only way to the server: /v1, as any client, with the session cookie the browser
 * holds and, on every change, the session's CSRF token. Answers are typed from the same OpenAPI
 * document the SDK is generated from.
 */
import type { Operations } from "@denv/sdk/schema";

export type Answer<K extends keyof Operations> = Operations[K]["response"];
export type Session = Answer<"getV1AuthSession">;

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let csrf: string | null = null;

export function setCsrf(token: string | null): void {
  csrf = token;
}

/** A /v1 call; an error answer becomes an ApiError carrying denv's code and message. */
export async function api<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers["content-type"] = "application/json";
  if (method !== "GET" && csrf) headers["x-csrf-token"] = csrf;
  const res = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const data = text ? (JSON.parse(text) as unknown) : null;
  if (!res.ok) {
    const e = (data as { error?: { code?: string; message?: string } } | null)?.error;
    throw new ApiError(res.status, e?.code ?? "internal", e?.message ?? `${res.status} ${res.statusText}`);
  }
  return data as T;
}

/** The signed-in person, or null when there is no session. */
export async function currentSession(): Promise<Session | null> {
  try {
    const s = await api<Session>("GET", "/v1/auth/session");
    setCsrf(s.csrf_token);
    return s;
  } catch (err) {
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) return null;
    throw err;
  }
}
