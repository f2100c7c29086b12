/**
 * @module @denv/sdk — a typed client of denv's /v1 API. The types and the operation table come
 * from the server's OpenAPI document (schema.gen.ts); errors carry the server's stable codes.
 */
import { commandDeadlineMs } from "@denv/protocol";
import { apiError, DenvApiError } from "./errors.ts";
import { type CallArgs, NamedOperations, OPERATIONS, type Operations } from "./schema.gen.ts";

export { DenvApiError } from "./errors.ts";

/** Where the server is, and the key. */
export interface ClientOptions {
  /** e.g. http://127.0.0.1:7070 */
  baseUrl: string;
  apiKey: string;
  /**
   * Per-request timeout of the calls that answer at once (default 30 minutes; long operations,
   * deploy with wait, need minutes). A command's call waits for the command's own timeout plus a
   * margin instead (commandDeadlineMs), and streams.
   */
  timeoutMs?: number;
  /**
   * How long a streamed answer (a command's output) may send nothing before it is given up as
   * `timeout` (default 5 minutes; the server sends a keep-alive every 15 s while a command is quiet).
   */
  idleTimeoutMs?: number;
  /**
   * How requests are sent (default: the global fetch). The server's own MCP endpoint passes its
   * app's handler, so its tools reach /v1 in process, through the same routes and checks.
   */
  fetch?: (input: string, init?: RequestInit) => Promise<Response>;
}

type OpId = keyof Operations;

/** Output a command's whole answer holds when the request names no limit (as the server's). */
export const DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024;
/** Default per-request timeout of the calls that answer at once. */
const DEFAULT_TIMEOUT_MS = 30 * 60_000;
/** Default silence after which a streamed answer is given up. */
const DEFAULT_IDLE_TIMEOUT_MS = 5 * 60_000;

/**
 * A streamed answer's watch: aborts when nothing arrived for `idleMs` (a server that stopped
 * answering: a running command's stream carries keep-alives) or when `totalMs` passed (the
 * command's own deadline and the margin). `why()` says which, for the `timeout` error.
 */
function streamWatch(idleMs: number, totalMs: number) {
  const controller = new AbortController();
  let reason = "";
  const fire = (why: string) => {
    reason = why;
    controller.abort(new DOMException(why, "TimeoutError"));
  };
  let idle = setTimeout(() => fire(`the server sent nothing for ${idleMs} ms`), idleMs);
  const total = setTimeout(() => fire(`no answer within the command's deadline (${totalMs} ms)`), totalMs);
  return {
    signal: controller.signal,
    touch() {
      clearTimeout(idle);
      idle = setTimeout(() => fire(`the server sent nothing for ${idleMs} ms`), idleMs);
    },
    clear() {
      clearTimeout(idle);
      clearTimeout(total);
    },
    why: () => reason,
  };
}

/**
 * A streamed answer of newline-delimited JSON, a message at a time: an HTTP error is thrown as
 * its code, an {"error"} line likewise, and every chunk (keep-alives, empty lines, included) shows
 * the watch the server is there.
 */
async function* ndjsonAnswer<T>(
  res: Response,
  watch: { touch(): void },
): AsyncGenerator<T & { error?: undefined }> {
  if (!res.ok || !res.body) {
    const e = (await res.json().catch(() => ({}))) as { error?: { code: string; message: string } };
    throw apiError(e.error?.code ?? "internal", e.error?.message ?? `HTTP ${res.status}`, res.status);
  }
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of res.body) {
    watch.touch();
    buf += decoder.decode(chunk as Uint8Array, { stream: true });
    const lines = buf.split("\n");
    buf = lines.pop() ?? "";
    for (const text of lines) {
      if (!text.trim()) continue;
      const msg = JSON.parse(text) as T & { error?: { code: string; message: string } };
      if (msg.error) throw apiError(msg.error.code, msg.error.message, 200);
      yield msg as T & { error?: undefined };
    }
  }
}

/** The longest a timer waits (about 24.8 days): setTimeout fires at once past it. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** One line of an environment's logs (GET /v1/envs/{id}/logs). */
export interface LogLine {
  service: string;
  stream: "stdout" | "stderr";
  /** The engine's time for it (RFC 3339, to the nanosecond); empty when it kept none. */
  time: string;
  line: string;
}

/** A request's failure: a deadline that passed is `timeout`; anything else, the server unreached. */
function transportError(err: unknown, baseUrl: string, why?: string): DenvApiError {
  const e = err as Error & { cause?: { code?: string; message?: string } };
  if (why || e?.name === "TimeoutError") return apiError("timeout", `${baseUrl}: ${why || e.message}`, 0);
  // fetch's own limits (no headers, or no body bytes, for 5 minutes) are deadlines too.
  if (e?.cause?.code === "UND_ERR_HEADERS_TIMEOUT" || e?.cause?.code === "UND_ERR_BODY_TIMEOUT")
    return apiError("timeout", `${baseUrl}: ${e.cause.message ?? e.cause.code}`, 0);
  return apiError("unavailable", `cannot reach ${baseUrl}: ${e?.message}`, 0);
}

/**
 * The API, typed from the OpenAPI document: named methods by resource (`client.envs.fork(id,
 * { name })`, generated) over one `call` by operation; Denv builds on it.
 */
export class DenvClient extends NamedOperations {
  readonly options: ClientOptions;

  private readonly fetch: (input: string, init?: RequestInit) => Promise<Response>;

  constructor(options: ClientOptions) {
    super();
    this.options = { ...options, baseUrl: options.baseUrl.replace(/\/$/, "") };
    this.fetch = options.fetch ?? ((input, init) => fetch(input, init));
  }

  url(path: string, query?: Record<string, string | undefined>): string {
    const u = new URL(`${this.options.baseUrl}${path}`);
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) u.searchParams.set(k, v);
    return u.toString();
  }

  /** Calls one operation of the API by its operationId. */
  async call<K extends OpId>(op: K, args: CallArgs<K>): Promise<Operations[K]["response"]> {
    const spec = OPERATIONS[op];
    let path: string = spec.path;
    for (const p of spec.params) {
      const v = (args.params as Record<string, string> | undefined)?.[p];
      if (v === undefined) throw new TypeError(`${op} needs params.${p}`);
      path = path.replace(`{${p}}`, encodeURIComponent(v));
    }
    const headers: Record<string, string> = { authorization: `Bearer ${this.options.apiKey}` };
    let body: string | Uint8Array<ArrayBuffer> | undefined;
    if (spec.body === "json") {
      headers["content-type"] = "application/json";
      body = JSON.stringify(args.body ?? {});
    } else if (spec.body === "tar" || spec.body === "binary") {
      headers["content-type"] = spec.body === "tar" ? "application/x-tar" : "application/octet-stream";
      body = args.body as Uint8Array<ArrayBuffer>;
    }
    // A command waits for its own deadline (and the margin), not a limit of the client's.
    const timeoutMs =
      op === "postV1EnvsByIdExec"
        ? commandDeadlineMs((args.body as { timeout_ms?: number } | undefined)?.timeout_ms)
        : (this.options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    let res: Response;
    try {
      res = await this.fetch(this.url(path, args.query), {
        method: spec.method,
        headers,
        body,
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      throw transportError(err, this.options.baseUrl);
    }
    if (!res.ok) {
      const e = (await res.json().catch(() => ({}))) as {
        error?: { code: string; message: string; details?: unknown };
      };
      throw apiError(
        e.error?.code ?? "internal",
        e.error?.message ?? `HTTP ${res.status}`,
        res.status,
        e.error?.details,
      );
    }
    if (spec.response === "json") return (await res.json()) as Operations[K]["response"];
    return new Uint8Array(await res.arrayBuffer()) as Operations[K]["response"];
  }

  /**
   * Runs a command and answers as POST …/exec does (its output whole, in the body's encoding), but
   * over the streamed form: the answer starts at once and carries keep-alives, so a command of
   * hours reaches its own deadline instead of a transport's.
   */
  async exec(
    envId: string,
    body: Operations["postV1EnvsByIdExec"]["body"],
  ): Promise<Operations["postV1EnvsByIdExec"]["response"]> {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    // Held whole here, so bounded as the server bounds its whole-output answer by default.
    const bounded = { ...body, max_output_bytes: body.max_output_bytes ?? DEFAULT_MAX_OUTPUT_BYTES };
    const r = await this.execStream(envId, bounded, (which, data) =>
      (which === "stdout" ? out : err).push(data),
    );
    const encoding = body.encoding ?? "utf8";
    return {
      ...r,
      stdout: Buffer.concat(out).toString(encoding),
      stderr: Buffer.concat(err).toString(encoding),
      encoding,
    };
  }

  /**
   * Runs a command and hands its output over as it comes (POST …/exec?stream=true); resolves to
   * the result (exit code, timed_out, …) once the command has ended.
   */
  async execStream(
    envId: string,
    body: Operations["postV1EnvsByIdExec"]["body"],
    onOutput: (stream: "stdout" | "stderr", data: Buffer) => void,
  ): Promise<Operations["postV1EnvsByIdExec"]["response"]> {
    const watch = streamWatch(
      this.options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS,
      commandDeadlineMs(body.timeout_ms),
    );
    try {
      return await this.readExecLines(envId, body, onOutput, watch);
    } catch (err) {
      if (err instanceof DenvApiError) throw err;
      throw transportError(err, this.options.baseUrl, watch.why() || undefined);
    } finally {
      watch.clear();
    }
  }

  private async readExecLines(
    envId: string,
    body: Operations["postV1EnvsByIdExec"]["body"],
    onOutput: (stream: "stdout" | "stderr", data: Buffer) => void,
    watch: ReturnType<typeof streamWatch>,
  ): Promise<Operations["postV1EnvsByIdExec"]["response"]> {
    const res = await this.fetch(this.url(`/v1/envs/${encodeURIComponent(envId)}/exec`, { stream: "true" }), {
      method: "POST",
      headers: { authorization: `Bearer ${this.options.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: watch.signal,
    });
    for await (const msg of ndjsonAnswer<{
      stream?: "stdout" | "stderr";
      data?: string;
      result?: Operations["postV1EnvsByIdExec"]["response"];
    }>(res, watch)) {
      if (msg.stream && msg.data !== undefined) onOutput(msg.stream, Buffer.from(msg.data, "base64"));
      else if (msg.result) return msg.result;
    }
    throw apiError("unavailable", "the exec stream ended without a result", 200);
  }

  /**
   * An environment's logs, a line at a time to `onLine` (awaited: a slow reader slows the stream):
   * every service's or `service`'s, the last `tail` lines of each or those `since` a time
   * ("2026-12-06T14:00:00Z") or a duration back ("10m"); with `follow`, until `signal` aborts.
   */
  async logs(
    envId: string,
    options: { service?: string; tail?: number; since?: string; follow?: boolean; signal?: AbortSignal },
    onLine: (line: LogLine) => void | Promise<void>,
  ): Promise<void> {
    // Followed, it has no deadline but the caller's; quiet, the server's keep-alives show it is there.
    const watch = streamWatch(
      this.options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS,
      options.follow ? MAX_TIMER_MS : commandDeadlineMs(undefined),
    );
    const stop = () => watch.clear();
    options.signal?.addEventListener("abort", stop);
    try {
      const res = await this.fetch(
        this.url(`/v1/envs/${encodeURIComponent(envId)}/logs`, {
          service: options.service,
          tail: options.tail === undefined ? undefined : String(options.tail),
          since: options.since,
          follow: options.follow ? "true" : undefined,
        }),
        {
          headers: { authorization: `Bearer ${this.options.apiKey}` },
          signal: options.signal ? AbortSignal.any([watch.signal, options.signal]) : watch.signal,
        },
      );
      for await (const line of ndjsonAnswer<LogLine>(res, watch)) await onLine(line);
    } catch (err) {
      if (options.signal?.aborted) return;
      if (err instanceof DenvApiError) throw err;
      throw transportError(err, this.options.baseUrl, watch.why() || undefined);
    } finally {
      options.signal?.removeEventListener("abort", stop);
      watch.clear();
    }
  }

  /** A request of the API's byte routes, its failure mapped to the error of its code. */
  private async send(
    method: string,
    path: string,
    query: Record<string, string | undefined>,
    init: {
      headers?: Record<string, string>;
      body?: RequestInit["body"] | AsyncIterable<Uint8Array>;
      signal?: AbortSignal;
    } = {},
  ): Promise<Response> {
    let res: Response;
    try {
      res = await this.fetch(this.url(path, query), {
        method,
        headers: { authorization: `Bearer ${this.options.apiKey}`, ...init.headers },
        body: init.body as RequestInit["body"],
        // A body that streams goes out as it is made (fetch needs to be told).
        ...(init.body && typeof init.body === "object" && !(init.body instanceof Uint8Array)
          ? { duplex: "half" }
          : {}),
        signal: init.signal ?? AbortSignal.timeout(this.options.timeoutMs ?? DEFAULT_TIMEOUT_MS),
      } as RequestInit);
    } catch (err) {
      throw transportError(err, this.options.baseUrl);
    }
    if (!res.ok) {
      const e = (await res.json().catch(() => ({}))) as {
        error?: { code: string; message: string; details?: unknown };
      };
      throw apiError(
        e.error?.code ?? "internal",
        e.error?.message ?? `HTTP ${res.status}`,
        res.status,
        e.error?.details,
      );
    }
    return res;
  }

  /**
   * Extracts a tar at `query.path` (PUT …/files); the tar may be a stream, sent as it is made, so
   * its size is not bounded by memory.
   */
  async putTar(
    envId: string,
    query: { path: string; service?: string; user?: string },
    tar: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
  ): Promise<{ entries: number; bytes: number }> {
    const res = await this.send("PUT", `/v1/envs/${encodeURIComponent(envId)}/files`, query, {
      headers: { "content-type": "application/x-tar" },
      body: tar,
    });
    return (await res.json()) as { entries: number; bytes: number };
  }

  /**
   * Uploads a build context (PUT /v1/projects/{id}/contexts/{digest}): a tar whose sha256 is
   * `digest`, which the server checks before keeping it.
   */
  async putBuildContext(
    project: string,
    digest: string,
    tar: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
  ): Promise<{ digest: string; size_bytes: number }> {
    const res = await this.send(
      "PUT",
      `/v1/projects/${encodeURIComponent(project)}/contexts/${encodeURIComponent(digest)}`,
      {},
      { headers: { "content-type": "application/x-tar" }, body: tar },
    );
    return (await res.json()) as { digest: string; size_bytes: number };
  }

  /**
   * A tar of `query.path` as a stream (GET …/files): a missing path or a refusal is thrown before
   * the first byte; a failure later ends the stream with an error.
   */
  async getTar(
    envId: string,
    query: { path: string; service?: string; user?: string },
  ): Promise<ReadableStream<Uint8Array>> {
    const res = await this.send("GET", `/v1/envs/${encodeURIComponent(envId)}/files`, query);
    return res.body ?? new ReadableStream({ start: (c) => c.close() });
  }

  /**
   * Runs a command with its stdin streamed (POST …/exec/stream): the request's line, then stdin
   * as it is read; output is handed over as it comes. Resolves to the result once it has ended.
   */
  async execWithStdin(
    envId: string,
    body: Omit<Operations["postV1EnvsByIdExec"]["body"], "stdin">,
    stdin: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
    onOutput: (stream: "stdout" | "stderr", data: Buffer) => void | Promise<void>,
  ): Promise<Operations["postV1EnvsByIdExec"]["response"]> {
    const watch = streamWatch(
      this.options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS,
      commandDeadlineMs(body.timeout_ms),
    );
    try {
      return await this.readExecFrames(envId, body, stdin, onOutput, watch);
    } catch (err) {
      if (err instanceof DenvApiError && err.code !== "unavailable") throw err;
      if (watch.why()) throw transportError(err, this.options.baseUrl, watch.why());
      throw err instanceof DenvApiError ? err : transportError(err, this.options.baseUrl);
    } finally {
      watch.clear();
    }
  }

  private async readExecFrames(
    envId: string,
    body: Omit<Operations["postV1EnvsByIdExec"]["body"], "stdin">,
    stdin: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
    onOutput: (stream: "stdout" | "stderr", data: Buffer) => void | Promise<void>,
    watch: ReturnType<typeof streamWatch>,
  ): Promise<Operations["postV1EnvsByIdExec"]["response"]> {
    async function* request() {
      yield Buffer.from(`${JSON.stringify(body)}\n`);
      for await (const chunk of stdin as AsyncIterable<Uint8Array>) {
        watch.touch();
        yield chunk;
      }
    }
    const res = await this.send(
      "POST",
      `/v1/envs/${encodeURIComponent(envId)}/exec/stream`,
      {},
      {
        headers: { "content-type": "application/octet-stream" },
        body: ReadableStream.from(request()),
        signal: watch.signal,
      },
    );
    // Frames: u8 kind (1 stdout, 2 stderr, 3 result, 4 error, 5 keep-alive), three zero bytes,
    // u32 length (BE).
    let pending = Buffer.alloc(0);
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      watch.touch();
      pending = pending.length ? Buffer.concat([pending, chunk]) : Buffer.from(chunk);
      while (pending.length >= 8) {
        const length = pending.readUInt32BE(4);
        if (pending.length < 8 + length) break;
        const kind = pending[0];
        const payload = pending.subarray(8, 8 + length);
        pending = pending.subarray(8 + length);
        if (kind === 1 || kind === 2) await onOutput(kind === 1 ? "stdout" : "stderr", Buffer.from(payload));
        else if (kind === 3)
          return JSON.parse(payload.toString()) as Operations["postV1EnvsByIdExec"]["response"];
        else if (kind === 4) {
          const e = (JSON.parse(payload.toString()) as { error: { code: string; message: string } }).error;
          throw apiError(e.code, e.message, 200);
        }
      }
    }
    throw apiError("unavailable", "the exec stream ended without a result", 200);
  }

  /** A GET route's body as text (a data sheet as markdown, say), its failure mapped to its code. */
  async getText(path: string, query: Record<string, string | undefined> = {}): Promise<string> {
    return (await this.send("GET", path, query)).text();
  }

  /**
   * Runs a call that answers with a deployment's verdict (snapshot, rollback, verify, destroy,
   * deploy with wait). The server holds a request at most about 4 minutes, what HTTP clients wait,
   * then answers `timeout` naming the deployment, which goes on: it is followed here to its verdict.
   */
  async untilVerdict(
    call: () => Promise<Operations["getV1DeploymentsById"]["response"]>,
  ): Promise<Operations["getV1DeploymentsById"]["response"]> {
    try {
      return await call();
    } catch (err) {
      const id =
        err instanceof DenvApiError
          ? (err.details as { deployment_id?: unknown } | null)?.deployment_id
          : null;
      if (!(err instanceof DenvApiError) || err.code !== "timeout" || typeof id !== "string") throw err;
      // The event stream ends with the verdict; the record is read once more as the answer.
      for await (const d of this.deploymentEvents(id))
        if (d.status !== "running" && d.status !== "queued") break;
      return this.deployments.get(id);
    }
  }

  /** Server-sent events of a deployment's phases, until its verdict. */
  async *deploymentEvents(
    deploymentId: string,
    options: { signal?: AbortSignal } = {},
  ): AsyncGenerator<Operations["getV1DeploymentsById"]["response"]> {
    const res = await this.fetch(this.url(`/v1/deployments/${encodeURIComponent(deploymentId)}/events`), {
      headers: { authorization: `Bearer ${this.options.apiKey}` },
      ...(options.signal ? { signal: options.signal } : {}),
    });
    if (!res.ok || !res.body)
      throw apiError("unavailable", `event stream answered ${res.status}`, res.status);
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of res.body) {
      buf += decoder.decode(chunk as Uint8Array, { stream: true });
      let idx = buf.indexOf("\n\n");
      while (idx !== -1) {
        const frame = buf.slice(0, idx);
        buf = buf.slice(idx + 2);
        const data = frame
          .split("\n")
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).trim())
          .join("\n");
        if (data) yield JSON.parse(data);
        idx = buf.indexOf("\n\n");
      }
    }
  }
}

export type { Operations } from "./schema.gen.ts";
export { OPERATIONS } from "./schema.gen.ts";
