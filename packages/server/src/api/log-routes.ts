/**
 * An environment's logs, as `docker compose logs` gives them: GET /v1/envs/{id}/logs answers
 * newline-delimited JSON, a line {"service", "stream", "time", "line"} for each line a service
 * wrote (every service, or ?service=), the last ?tail= per service or those ?since= a time, and
 * with ?follow=true the lines written from then on, until the caller goes away. A failure after the
 * first line is a last {"error"} line; one before it (no such service) is the HTTP error.
 */
import { DenvError, isDenvError } from "@denv/protocol";
import { stream } from "hono/streaming";
import { z } from "zod";
import { environmentTarget } from "../environments/team-targets.ts";
import type { LogsRequest } from "../targets/target.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { queryFlag } from "./api-schemas.ts";
import { awake, envOf, serviceOf } from "./environment-access.ts";

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * ?since= as ms since the epoch: an RFC 3339 time ("2026-12-06T14:00:00Z"), or a duration back
 * from now ("90s", "10m", "2h", "1d"), as `docker logs --since` takes them.
 */
export function sinceMsOf(text: string, nowMs: number): number {
  // Before the epoch is the beginning: nothing was written then.
  const ago = /^(\d{1,9})(ms|s|m|h|d)$/.exec(text);
  if (ago) return Math.max(0, nowMs - Number(ago[1]) * (UNIT_MS[ago[2] as string] as number));
  if (/^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d{1,9})?)?(Z|[+-]\d\d:\d\d)$/.test(text)) {
    const ms = Date.parse(text.replace(/(\.\d{3})\d+/, "$1"));
    if (Number.isFinite(ms)) return Math.max(0, Math.floor(ms));
  }
  throw new DenvError(
    "invalid_argument",
    `?since=${JSON.stringify(text.slice(0, 64))}: a time (2026-12-06T14:00:00Z) or a duration back from now (90s, 10m, 2h, 1d)`,
  );
}

export const logRoutes: ApiRoute[] = [
  route({
    method: "get",
    path: "/v1/envs/{id}/logs",
    name: "envs.logs",
    summary:
      'What the services wrote: NDJSON, {"service", "stream", "time", "line"} per line (?service=, ?tail= lines per service, ?since= a time or 10m, ?follow=true to keep reading)',
    query: z.object({
      service: z.string().min(1).max(63).optional().describe("One service (default: every service)"),
      tail: z
        .string()
        .regex(/^\d{1,6}$/, "a count of lines")
        .optional()
        .describe("The last N lines of each service"),
      since: z
        .string()
        .max(64)
        .optional()
        .describe("From a time (RFC 3339) or a duration back (90s, 10m, 2h)"),
      follow: queryFlag.describe("true: go on with lines as they are written, until the caller goes away"),
    }),
    responseType: "ndjson",
    auth: true,
    handler: async (c, { query }) => {
      // Where they come from is settled first: a missing environment or service is an HTTP error.
      const e = await awake(c, await envOf(c));
      const service = await serviceOf(c.var.deps, e, query.service);
      const { target, placed } = await environmentTarget(c.var.deps, e);
      const req: LogsRequest = {
        follow: query.follow === "true",
        ...(service === undefined ? {} : { service }),
        ...(query.tail === undefined ? {} : { tailLines: Math.min(Number(query.tail), 100_000) }),
        ...(query.since === undefined ? {} : { sinceMs: sinceMsOf(query.since, Date.now()) }),
      };
      const read = await target.logs(placed, req);
      c.header("content-type", "application/x-ndjson");
      return stream(c, async (s) => {
        s.onAbort(() => read.stop());
        // A quiet followed stream carries an empty line now and then: no transport between here and
        // the caller takes it for a dead connection.
        let writing = Promise.resolve();
        const write = (text: string) => {
          writing = writing.then(() => s.write(text).then(() => {}));
          return writing;
        };
        const keepAlive = setInterval(() => void write("\n").catch(() => {}), c.var.deps.keepAliveMs);
        try {
          for await (const line of read.lines) {
            if (s.aborted) break;
            await write(`${JSON.stringify(line)}\n`);
          }
        } catch (err) {
          if (!s.aborted)
            await write(
              `${JSON.stringify(isDenvError(err) ? err.toJSON() : { error: { code: "internal", message: (err as Error).message } })}\n`,
            ).catch(() => {});
        } finally {
          clearInterval(keepAlive);
          read.stop();
        }
      });
    },
  }),
];
