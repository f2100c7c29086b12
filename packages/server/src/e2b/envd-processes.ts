/**
 * The processes E2B's `process.Process` service starts, kept by the gateway between calls: a
 * command started in the background is reached again by its pid (Connect, SendInput, SendSignal,
 * List) while it runs, whoever's request started it is gone.
 *
 * Each runs as a denv exec (POST /v1/envs/{id}/exec/stream, in process, as the sandbox's key), so a
 * command costs what an exec costs and the world's rules hold as through /v1. The command is started
 * under `/bin/sh -c 'echo $$ >&2; exec "$0" "$@"'`: the shell says its pid on stderr's first line
 * (kept back, never shown) and becomes the command, so the pid the SDK gets is the process's own
 * and a signal reaches it (`kill` in the same service, as the same user).
 */
import { PassThrough } from "node:stream";
import { ConnectError } from "./connect-protocol.ts";

/** What a process sends its watchers, in `process.ProcessEvent`'s JSON form. */
export type ProcessEvent =
  | { start: { pid: number } }
  | { data: { stdout: string } | { stderr: string } }
  | { end: { exitCode: number; exited: boolean; status: string; error?: string } };

export interface ProcessConfig {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
}

/** Runs an exec for the gateway: the stream form's response, read frame by frame. */
export type ExecStreamCall = (
  envId: string,
  request: Record<string, unknown>,
  stdin: PassThrough,
  signal: AbortSignal,
) => Promise<Response>;

/** Runs a short command in the environment (a signal's `kill`), to its end. */
export type ExecCall = (
  envId: string,
  request: Record<string, unknown>,
) => Promise<{ exit_code: number; stderr: string }>;

const MUX_STDOUT = 1;
const MUX_STDERR = 2;
const MUX_RESULT = 3;
const MUX_ERROR = 4;

/** Streams following one process at once. */
const MAX_WATCHERS = 64;

/**
 * A follower of a process's events: what it returns is awaited before the process's output is read
 * any further, so a follower that stops taking events (a client that stops reading its stream)
 * stops the command's output at its source, rather than having it pile up in the server.
 */
export type ProcessWatcher = (e: ProcessEvent) => void | Promise<void>;

export class EnvdProcess {
  readonly envId: string;
  readonly config: ProcessConfig;
  readonly tag: string | undefined;
  readonly user: string | undefined;
  pid = 0;
  ended: ProcessEvent | null = null;
  private readonly watchers = new Set<ProcessWatcher>();
  readonly stdin = new PassThrough();
  readonly abort = new AbortController();
  private started!: Promise<number>;

  constructor(envId: string, config: ProcessConfig, tag: string | undefined, user: string | undefined) {
    this.envId = envId;
    this.config = config;
    this.tag = tag;
    this.user = user;
  }

  /** Adds a watcher of its events from now on; returns how to stop watching. */
  watch(fn: ProcessWatcher): () => void {
    if (this.watchers.size >= MAX_WATCHERS)
      throw new ConnectError(
        "resource_exhausted",
        `process ${this.pid} already has ${MAX_WATCHERS} watchers`,
      );
    this.watchers.add(fn);
    return () => this.watchers.delete(fn);
  }

  /** Tells every watcher; resolves once each has taken the event (see ProcessWatcher). */
  private async emit(e: ProcessEvent): Promise<void> {
    if ("end" in e) this.ended = e;
    const taking: Promise<void>[] = [];
    for (const w of this.watchers) {
      const r = w(e);
      if (r instanceof Promise) taking.push(r.catch(() => {}));
    }
    if (!taking.length) return;
    // A process dropped (its sandbox killed) stops waiting on a follower that takes nothing.
    const dropped = new Promise<void>((r) =>
      this.abort.signal.aborted
        ? r()
        : this.abort.signal.addEventListener("abort", () => r(), { once: true }),
    );
    await Promise.race([Promise.all(taking), dropped]);
  }

  /** Starts it; resolves to its pid once the shell said it (or rejects if it never started). */
  start(run: ExecStreamCall, request: Record<string, unknown>): Promise<number> {
    this.started = new Promise<number>((resolve, reject) => {
      void this.read(run, request, resolve, reject);
    });
    return this.started;
  }

  private async read(
    run: ExecStreamCall,
    request: Record<string, unknown>,
    resolve: (pid: number) => void,
    reject: (err: Error) => void,
  ): Promise<void> {
    let pidLine: Buffer | null = Buffer.alloc(0);
    const fail = async (err: ConnectError) => {
      if (!this.pid) reject(err);
      else await this.emit({ end: { exitCode: -1, exited: false, status: "error", error: err.message } });
    };
    let res: Response;
    try {
      res = await run(this.envId, request, this.stdin, this.abort.signal);
    } catch (err) {
      await fail(asConnectError(err));
      return;
    }
    if (!res.ok || !res.body) {
      await fail(await responseError(res));
      return;
    }
    let buf = Buffer.alloc(0);
    try {
      for await (const chunk of res.body) {
        // Dropped (its sandbox killed or paused): nothing more is read, and the stream is let go.
        if (this.abort.signal.aborted) break;
        buf = buf.length ? Buffer.concat([buf, chunk as Uint8Array]) : Buffer.from(chunk as Uint8Array);
        while (buf.length >= 8) {
          const kind = buf[0] as number;
          const len = buf.readUInt32BE(4);
          if (buf.length < 8 + len) break;
          const payload = buf.subarray(8, 8 + len);
          buf = buf.subarray(8 + len);
          if (kind === MUX_STDERR && pidLine) {
            // The shell's first line on stderr is its pid; what follows on the same read is output.
            pidLine = Buffer.concat([pidLine, payload]);
            const nl = pidLine.indexOf(10);
            if (nl === -1) {
              if (pidLine.length > 32) {
                await fail(new ConnectError("internal", "the process did not say its pid"));
                this.abort.abort();
                return;
              }
              continue;
            }
            const pid = Number(pidLine.subarray(0, nl).toString());
            const rest = pidLine.subarray(nl + 1);
            pidLine = null;
            if (!Number.isInteger(pid) || pid <= 0) {
              await fail(new ConnectError("internal", "the process did not say its pid"));
              this.abort.abort();
              return;
            }
            this.pid = pid;
            resolve(pid);
            await this.emit({ start: { pid } });
            if (rest.length) await this.emit({ data: { stderr: rest.toString("base64") } });
          } else if (kind === MUX_STDOUT || kind === MUX_STDERR) {
            const field = kind === MUX_STDOUT ? "stdout" : "stderr";
            // Read no further until every follower has taken it: the command waits on its reader.
            await this.emit({ data: { [field]: payload.toString("base64") } as { stdout: string } });
          } else if (kind === MUX_RESULT) {
            const r = JSON.parse(payload.toString()) as { exit_code: number; timed_out?: boolean };
            if (!this.pid) {
              // Ended before the shell ran (the command could not start at all).
              reject(
                new ConnectError("failed_precondition", `the command could not start (exit ${r.exit_code})`),
              );
              return;
            }
            const status = r.timed_out ? "timed out" : `exit status ${r.exit_code}`;
            await this.emit({
              end: {
                exitCode: r.exit_code,
                exited: !r.timed_out,
                status,
                ...(r.timed_out ? { error: "the command ran past its timeout" } : {}),
              },
            });
          } else if (kind === MUX_ERROR) {
            const e = JSON.parse(payload.toString()) as { error?: { code?: string; message?: string } };
            await fail(fromDenvCode(e.error?.code, e.error?.message ?? "the command failed"));
          }
        }
      }
    } catch (err) {
      await fail(asConnectError(err));
    }
    if (!this.ended && this.pid)
      await this.emit({
        end: { exitCode: -1, exited: false, status: "error", error: "the command's stream ended" },
      });
  }
}

/** The most processes one sandbox may have running through envd's API at once. */
export const MAX_PROCESSES_PER_SANDBOX = 256;

/** A sandbox's processes, by pid. */
export class EnvdProcesses {
  private readonly byEnv = new Map<string, Map<number, EnvdProcess>>();

  /** Refuses a start past the sandbox's share (each running process holds an exec and its stream). */
  assertRoom(envId: string): void {
    if ((this.byEnv.get(envId)?.size ?? 0) >= MAX_PROCESSES_PER_SANDBOX)
      throw new ConnectError(
        "resource_exhausted",
        `this sandbox already runs ${MAX_PROCESSES_PER_SANDBOX} processes started here: kill some first`,
      );
  }

  /** Keeps a started process until it ends. */
  add(p: EnvdProcess): void {
    if (p.ended) return;
    let m = this.byEnv.get(p.envId);
    if (!m) {
      m = new Map();
      this.byEnv.set(p.envId, m);
    }
    m.set(p.pid, p);
    const unwatch = p.watch((e) => {
      if (!("end" in e)) return;
      unwatch();
      if (this.byEnv.get(p.envId)?.get(p.pid) === p) this.byEnv.get(p.envId)?.delete(p.pid);
    });
  }

  list(envId: string): EnvdProcess[] {
    return [...(this.byEnv.get(envId)?.values() ?? [])].filter((p) => !p.ended);
  }

  /** The process a selector ({pid} or {tag}) names in this sandbox, or not_found. */
  find(envId: string, selector: unknown): EnvdProcess {
    const s = (selector ?? {}) as { pid?: unknown; tag?: unknown };
    const all = this.list(envId);
    const p =
      s.pid !== undefined
        ? all.find((x) => x.pid === Number(s.pid))
        : typeof s.tag === "string"
          ? all.find((x) => x.tag === s.tag)
          : undefined;
    if (!p)
      throw new ConnectError(
        "not_found",
        s.pid !== undefined
          ? `no running process ${String(s.pid)}`
          : `no running process tagged ${String(s.tag)}`,
      );
    return p;
  }

  /** Every process of a sandbox that is killed: their streams end. */
  dropSandbox(envId: string): void {
    for (const p of this.byEnv.get(envId)?.values() ?? []) p.abort.abort();
    this.byEnv.delete(envId);
  }
}

/** denv's error codes as Connect's. */
export function fromDenvCode(code: string | undefined, message: string): ConnectError {
  const map: Record<string, ConnectError["code"]> = {
    not_found: "not_found",
    invalid_argument: "invalid_argument",
    unauthenticated: "unauthenticated",
    forbidden: "permission_denied",
    permission_denied: "permission_denied",
    conflict: "already_exists",
    is_directory: "invalid_argument",
    not_a_directory: "invalid_argument",
    rate_limited: "resource_exhausted",
    payload_too_large: "resource_exhausted",
    timeout: "deadline_exceeded",
    unavailable: "unavailable",
    host_unavailable: "unavailable",
    not_supported: "unimplemented",
  };
  return new ConnectError(map[code ?? ""] ?? "internal", message);
}

export async function responseError(res: Response): Promise<ConnectError> {
  const e = (await res.json().catch(() => ({}))) as { error?: { code?: string; message?: string } };
  return fromDenvCode(e.error?.code, e.error?.message ?? `HTTP ${res.status}`);
}

function asConnectError(err: unknown): ConnectError {
  return err instanceof ConnectError ? err : new ConnectError("unavailable", (err as Error).message);
}
