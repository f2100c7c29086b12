/**
 * The console's only way to the server: /v1, as any client, through the generated named methods
 * (`api.envs.fork(id, { name })`, the SDK's own), with the session cookie the browser holds and,
 * on every change, the session's CSRF token.
 */
import { type CallArgs, NamedOperations, OPERATIONS, type Operations } from "@denv/sdk/schema";

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

/**
 * The API as the console calls it: each operation sent with the session's cookie (and its CSRF
 * token on a change); an error answer becomes an ApiError carrying denv's code and message.
 */
class ConsoleApi extends NamedOperations {
  async call<K extends keyof Operations>(op: K, args: CallArgs<K>): Promise<Operations[K]["response"]> {
    const spec = OPERATIONS[op];
    let path: string = spec.path;
    for (const p of spec.params)
      path = path.replace(`{${p}}`, encodeURIComponent((args.params as Record<string, string>)[p] ?? ""));
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(args.query ?? {})) if (v !== undefined) query.set(k, v);
    const headers: Record<string, string> = {};
    if (spec.body === "json") headers["content-type"] = "application/json";
    if (spec.method !== "GET" && csrf) headers["x-csrf-token"] = csrf;
    const res = await fetch(query.size ? `${path}?${query}` : path, {
      method: spec.method,
      headers,
      credentials: "same-origin",
      body: spec.body === "json" ? JSON.stringify(args.body ?? {}) : undefined,
    });
    const text = await res.text();
    const data = text ? (JSON.parse(text) as unknown) : null;
    if (!res.ok) {
      const e = (data as { error?: { code?: string; message?: string } } | null)?.error;
      throw new ApiError(res.status, e?.code ?? "internal", e?.message ?? `${res.status} ${res.statusText}`);
    }
    return data as Operations[K]["response"];
  }
}

/** The console's client of /v1. */
export const api = new ConsoleApi();

/** The signed-in person, or null when there is no session. */
export async function currentSession(): Promise<Session | null> {
  try {
    const s = await api.auth.session();
    setCsrf(s.csrf_token);
    return s;
  } catch (err) {
    if (err instanceof ApiError && (err.status === 401 || err.status === 403)) return null;
    throw err;
  }
}

/** One line a service wrote, as GET /v1/envs/{id}/logs sends it (newline-delimited JSON). */
export interface LogLine {
  service: string;
  stream: "stdout" | "stderr";
  time: string;
  line: string;
}

/** The last lines of an environment's services (or of one), oldest first. */
export async function logLines(
  envId: string,
  options: { service?: string; tail: number },
): Promise<LogLine[]> {
  const q = new URLSearchParams({ tail: String(options.tail) });
  if (options.service) q.set("service", options.service);
  const res = await fetch(`/v1/envs/${encodeURIComponent(envId)}/logs?${q}`, { credentials: "same-origin" });
  const text = await res.text();
  if (!res.ok) {
    const e = (JSON.parse(text || "null") as { error?: { code?: string; message?: string } } | null)?.error;
    throw new ApiError(res.status, e?.code ?? "internal", e?.message ?? `${res.status} ${res.statusText}`);
  }
  return text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as LogLine);
}

/** What a streamed exec says as it runs: output as it is written, then its result or error. */
export type ExecEvent =
  | { kind: "stdout"; text: string }
  | { kind: "stderr"; text: string }
  | { kind: "result"; exitCode: number }
  | { kind: "error"; message: string };

/**
 * POST /v1/envs/{id}/exec/stream: the request as the body's first line (no stdin), the answer read
 * frame by frame as the command writes (an 8-byte header: kind, three zero bytes, a big-endian
 * length; then the bytes), so a long command shows its output while it runs.
 */
export async function execStream(
  envId: string,
  request: { service?: string; command: string },
  onEvent: (e: ExecEvent) => void,
): Promise<void> {
  const headers: Record<string, string> = { "content-type": "application/octet-stream" };
  if (csrf) headers["x-csrf-token"] = csrf;
  const res = await fetch(`/v1/envs/${encodeURIComponent(envId)}/exec/stream`, {
    method: "POST",
    headers,
    credentials: "same-origin",
    body: `${JSON.stringify(request)}\n`,
  });
  if (!res.ok || !res.body) {
    const e = ((await res.json().catch(() => null)) as { error?: { code?: string; message?: string } } | null)
      ?.error;
    throw new ApiError(res.status, e?.code ?? "internal", e?.message ?? `${res.status} ${res.statusText}`);
  }
  const reader = res.body.getReader();
  const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  let buf = new Uint8Array(0);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const next = new Uint8Array(buf.length + value.length);
    next.set(buf);
    next.set(value, buf.length);
    buf = next;
    while (buf.length >= 8) {
      const length = new DataView(buf.buffer, buf.byteOffset + 4, 4).getUint32(0);
      if (buf.length < 8 + length) break;
      const kind = buf[0];
      const payload = buf.slice(8, 8 + length);
      buf = buf.slice(8 + length);
      if (kind === 1) onEvent({ kind: "stdout", text: decoders.stdout.decode(payload, { stream: true }) });
      else if (kind === 2)
        onEvent({ kind: "stderr", text: decoders.stderr.decode(payload, { stream: true }) });
      else if (kind === 3) {
        const r = JSON.parse(new TextDecoder().decode(payload)) as { exit_code: number };
        onEvent({ kind: "result", exitCode: r.exit_code });
      } else if (kind === 4) {
        const e = JSON.parse(new TextDecoder().decode(payload)) as {
          error?: { message?: string };
          message?: string;
        };
        onEvent({ kind: "error", message: e.error?.message ?? e.message ?? "the exec failed" });
      }
    }
  }
}
