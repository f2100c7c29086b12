/**
 * The server's log: one JSON object per line on stderr (pino), with a level, and the request and
 * deployment it belongs to. A request's id comes from its `x-request-id` (when it is a plain token)
 * or is made here, and is answered in the same header; a deployment's phases run under its id. Both
 * ride the async context (AsyncLocalStorage) into every line logged and every operation sent to a
 * host, so a host's log line names the request and deployment that caused it.
 *
 * `DENV_LOG_LEVEL` (trace, debug, info, warn, error; default info) sets what is written.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { pino } from "pino";

export interface Trace {
  request_id?: string;
  deployment_id?: string;
}

const traces = new AsyncLocalStorage<Trace>();

const stderr = pino.destination({ fd: 2, sync: true });
/** Who reads the lines besides stderr (captureServerLog): a test of what an operator is told. */
const readers = new Set<(line: string) => void>();
const root = pino(
  { level: process.env.DENV_LOG_LEVEL ?? "info", base: { service: "denv-server" } },
  {
    write(line: string) {
      stderr.write(line);
      for (const read of readers) read(line);
    },
  },
);

/** The lines logged from now until `stop()`, parsed (at info at least, whatever DENV_LOG_LEVEL says). */
export function captureServerLog(): { lines: () => Record<string, unknown>[]; stop(): void } {
  const lines: Record<string, unknown>[] = [];
  const read = (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>);
  const level = root.level;
  if (root.levels.values[level] !== undefined && (root.levels.values[level] as number) > 30)
    root.level = "info";
  readers.add(read);
  return {
    lines: () => [...lines],
    stop() {
      readers.delete(read);
      root.level = level;
    },
  };
}

/** The log, with the request and deployment of the work under way. */
export function serverLog(): pino.Logger {
  const t = traces.getStore();
  return t && (t.request_id || t.deployment_id) ? root.child(t) : root;
}

/** The ids of the work under way (sent with each host operation). */
export function currentTrace(): Trace | undefined {
  return traces.getStore();
}

/** Runs fn with these ids added to the current ones. */
export function withTrace<T>(ids: Trace, fn: () => T): T {
  return traces.run({ ...traces.getStore(), ...ids }, fn);
}

/** A request's id: the caller's, when it is a plain token of at most 100 characters. */
export function requestIdOf(header: string | undefined, fresh: () => string): string {
  return header && /^[A-Za-z0-9._:-]{1,100}$/.test(header) ? header : fresh();
}
