/**
 * A stack's logs, as `docker compose logs` gives them: every service's lines (or one service's),
 * each with its service, stream and time, the last N per service or those since a time, and, when
 * followed, the lines written from then on until the reader goes or every service has ended. Lines
 * go out as newline-delimited JSON, each written before the next is read from the engine: a reader
 * that stops, stops it. The engine keeps them bounded and rotated (engine-create-options.ts).
 */
import { DenvError, type LogLine } from "@denv/protocol";
import type { FileSink } from "../exec/executor.ts";
import type { StackRecord } from "../host/state-store.ts";
import type { ContainerRuntime, LogEntry } from "../runtime/container-runtime.ts";

/**
 * An engine time as a key that sorts as time does: RFC 3339 as the engine writes it drops the
 * fraction's trailing zeros ("…:00.1Z" after "…:00.12Z" as text), so the fraction is padded to
 * nanoseconds. A time of another shape keeps its text.
 */
export function timeKey(time: string): string {
  return time.replace(
    /(T\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z$/,
    (_m, hms: string, frac?: string) => `${hms}.${(frac ?? "").padEnd(9, "0")}Z`,
  );
}

export interface LogRequest {
  service?: string;
  tailLines?: number;
  sinceMs?: number;
  follow: boolean;
}

/** The stack's services a request names, in the stack's start order; not_found naming the others. */
export function logServices(stack: StackRecord, service: string | undefined): [string, string][] {
  const all = Object.entries(stack.containers);
  if (service === undefined) {
    const order = stack.spec.start_order ?? [];
    return all.sort(([a], [b]) => order.indexOf(a) - order.indexOf(b));
  }
  // Own properties only: a service named "constructor" or "__proto__" is no service.
  const id = Object.hasOwn(stack.containers, service) ? stack.containers[service] : undefined;
  if (typeof id !== "string")
    throw new DenvError(
      "not_found",
      `environment ${stack.name} has no service ${JSON.stringify(service.slice(0, 64))}; it has ${Object.keys(stack.containers).join(", ")}`,
    );
  return [[service, id]];
}

/**
 * Writes the stack's lines to `write` (a line of JSON each) and resolves to how many, once done:
 * at once without follow, else when `gone` fires or every service's stream has ended.
 */
export async function writeServiceLogs(
  runtime: ContainerRuntime,
  stack: StackRecord,
  req: LogRequest,
  write: FileSink,
  gone: (stop: () => void) => void,
): Promise<{ lines: number }> {
  const services = logServices(stack, req.service);
  const options = {
    follow: req.follow,
    ...(req.tailLines === undefined ? {} : { tailLines: req.tailLines }),
    ...(req.sinceMs === undefined ? {} : { sinceMs: req.sinceMs }),
  };
  const reads = services.map(([service, id]) => ({ service, read: runtime.containerLogLines(id, options) }));
  let stopped = false;
  const stop = () => {
    stopped = true;
    for (const r of reads) r.read.stop();
  };
  gone(stop);
  let lines = 0;
  const send = async (service: string, e: LogEntry) => {
    const out: LogLine = { service, stream: e.stream, time: e.time, line: e.line };
    await write(Buffer.from(`${JSON.stringify(out)}\n`));
    lines++;
  };
  try {
    if (!req.follow) {
      // All of it, then by time across services (each service's own order kept where times tie).
      const all: { service: string; e: LogEntry }[] = [];
      for (const r of reads) for await (const e of r.read.lines) all.push({ service: r.service, e });
      const key = new Map(all.map(({ e }) => [e.time, timeKey(e.time)]));
      all.sort((a, b) => {
        const x = key.get(a.e.time) as string;
        const y = key.get(b.e.time) as string;
        return x < y ? -1 : x > y ? 1 : 0;
      });
      for (const { service, e } of all) {
        if (stopped) break;
        await send(service, e);
      }
      return { lines };
    }
    // Followed: each service's lines as they come, one write at a time.
    let writing = Promise.resolve();
    await Promise.all(
      reads.map(async (r) => {
        for await (const e of r.read.lines) {
          if (stopped) break;
          writing = writing.then(() => send(r.service, e));
          await writing;
        }
      }),
    );
    return { lines };
  } catch (err) {
    // The reader went away mid-write: what was asked for ended with it.
    if (stopped) return { lines };
    throw err;
  } finally {
    stop();
  }
}
