/**
 * What the server holds of request bodies sent by anyone at all. Routes that take a body before
 * the sender is known (sign-up, sign-in, device codes, host join, GitHub's webhook) share one
 * budget of bytes in flight: a body is admitted only while its size (declared, or counted as it
 * arrives) fits, so a crowd of slow uploads costs the budget and no more, and a sender that stops
 * sending is cut after BODY_IDLE_MS. Each such route's own limit is the size its payload can have.
 */
import type { IncomingMessage } from "node:http";
import { DenvError } from "@denv/protocol";
import type { Context, MiddlewareHandler } from "hono";
import type { ApiEnv } from "./api-deps.ts";

/** An anonymous JSON body (credentials, a device code, a join token): a few KiB at most. */
export const ANONYMOUS_JSON_LIMIT_BYTES = 16 * 1024;
/** A body with no byte for this long is cut: its sender is holding the budget, not sending. */
export const BODY_IDLE_MS = 30_000;

/**
 * Requests whose bodies are refused unread: once the answer is sent their connection is closed
 * (server.ts), rather than read to its end and dropped as a connection kept alive would need (a
 * crowd of refused senders would otherwise cost the server reading every byte they send).
 */
const refusedUnread = new WeakSet<IncomingMessage>();

/** Marks a request's body as refused unread (see refusedUnread); the answer says the connection closes. */
export function refuseUnreadBody(c: Context): void {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  if (incoming) refusedUnread.add(incoming);
  c.header("connection", "close");
}

/** Whether a finished answer's request still has a refused body coming: its connection should go. */
export function closesUnread(req: IncomingMessage): boolean {
  return refusedUnread.has(req) && !req.complete;
}

const busy = () =>
  new DenvError(
    "unavailable",
    "the server is taking in as many unauthenticated request bodies as it holds at once; retry shortly",
    { details: { retry_after_ms: 1000 } },
  );

/** The refusal of a body past its route's limit. */
export function tooLarge(limitBytes: number): DenvError {
  return new DenvError(
    "payload_too_large",
    `the request body is over ${limitBytes} bytes (${Math.round(limitBytes / 1024 ** 2)} MiB); send less at a time`,
  );
}

/**
 * The body of a route anyone may call: within the route's limit and the anonymous budget. A
 * declared length past the limit, or one that does not fit the budget, is refused before anything
 * is read; a body of no declared length is counted as it is read (never read ahead of the handler).
 * The bytes go back when the request is answered. A body idle for BODY_IDLE_MS is cut.
 */
export function anonymousBody(limitBytes: number, idleMs = BODY_IDLE_MS): MiddlewareHandler<ApiEnv> {
  return async (c, next) => {
    const raw = c.req.raw;
    if (!raw.body) return next();
    const budget = c.var.deps.anonymousBodies;
    let held = 0;
    let seen = 0;
    const declared = c.req.header("content-length");
    if (declared !== undefined) {
      const n = Number(declared);
      if (n > limitBytes) {
        refuseUnreadBody(c);
        throw tooLarge(limitBytes);
      }
      // A length that is no number is the parser's to refuse; what comes is counted as it comes.
      if (Number.isSafeInteger(n) && n > 0) {
        if (!budget.take(n)) {
          refuseUnreadBody(c);
          throw busy();
        }
        held = n;
      }
    }
    const counted = held === 0;
    const reader = raw.body.getReader();
    let idle: NodeJS.Timeout | undefined;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const timedOut = new Promise<never>((_, reject) => {
          idle = setTimeout(
            () =>
              reject(
                new DenvError(
                  "timeout",
                  `the request body stopped arriving (nothing for ${Math.round(idleMs / 1000)} s)`,
                ),
              ),
            idleMs,
          );
        });
        try {
          const { value, done } = await Promise.race([reader.read(), timedOut]);
          if (done) return controller.close();
          seen += value.length;
          if (seen > limitBytes) {
            refuseUnreadBody(c);
            throw tooLarge(limitBytes);
          }
          if (counted) {
            if (!budget.take(value.length)) {
              refuseUnreadBody(c);
              throw busy();
            }
            held += value.length;
          }
          controller.enqueue(value);
        } catch (err) {
          void reader.cancel().catch(() => {});
          // A sender that went away mid-body is no fault of the server's (nor worth its log).
          controller.error(
            err instanceof DenvError
              ? err
              : new DenvError("invalid_argument", "the request body was cut off before its end"),
          );
        } finally {
          clearTimeout(idle);
        }
      },
      cancel(reason) {
        clearTimeout(idle);
        return reader.cancel(reason);
      },
    });
    c.req.raw = new Request(raw, { body, duplex: "half" } as RequestInit);
    try {
      await next();
      // A body larger than its route takes is refused unread too (its limit threw, or answered).
      if (c.res.status === 413 || c.error) refuseUnreadBody(c);
    } catch (err) {
      refuseUnreadBody(c);
      throw err;
    } finally {
      clearTimeout(idle);
      budget.giveBack(held);
    }
  };
}
