import assert from "node:assert/strict";
import { test } from "node:test";
import { isDenvError } from "@denv/protocol";
import { Hono } from "hono";
import type { ApiDeps, ApiEnv } from "./api-deps.ts";
import { InFlightBytes } from "./in-flight-bytes.ts";
import { anonymousBody } from "./request-bodies.ts";

/** A route anyone may call, taking its body within `limitBytes` and a shared budget. */
function app(budget: InFlightBytes, limitBytes: number, idleMs?: number) {
  const a = new Hono<ApiEnv>();
  a.onError((err, c) =>
    isDenvError(err) ? c.json(err.toJSON(), err.httpStatus as 400) : c.json({ error: String(err) }, 500),
  );
  a.use("*", async (c, next) => {
    c.set("deps", { anonymousBodies: budget } as unknown as ApiDeps);
    await next();
  });
  a.post("/in", anonymousBody(limitBytes, idleMs), async (c) =>
    c.json({ bytes: (await c.req.text()).length }),
  );
  return a;
}

/** A body of no declared length, sent as it is pulled: `pieces` of `size` bytes, then it ends (or not). */
function streamed(pieces: number, size: number, end = true): ReadableStream<Uint8Array> {
  let sent = 0;
  return new ReadableStream({
    pull(c) {
      if (sent < pieces) {
        sent++;
        c.enqueue(new Uint8Array(size).fill(0x20));
      } else if (end) c.close();
      // Else: nothing more ever comes, and the stream does not end (a sender gone quiet).
    },
  });
}

const post = (
  a: Hono<ApiEnv>,
  body: string | ReadableStream<Uint8Array>,
  headers: Record<string, string> = {},
) => a.request("/in", { method: "POST", body, headers, duplex: "half" } as RequestInit);

test("a declared length past the limit, or past the budget's room, is refused before a byte is read", async () => {
  const budget = new InFlightBytes(1000);
  const a = app(budget, 600);
  let pulled = 0;
  const body = new ReadableStream({
    pull(c) {
      pulled++;
      c.enqueue(new Uint8Array(10));
    },
  });
  const big = await post(a, body, { "content-length": "700" });
  assert.equal(big.status, 413);
  assert.equal(big.headers.get("connection"), "close");
  assert.equal(budget.used, 0);
  // 500 of the 1000 are taken by another body in flight: 600 more do not fit.
  assert.ok(budget.take(500));
  const busy = await post(a, body, { "content-length": "600" });
  assert.equal(busy.status, 503);
  assert.equal(((await busy.json()) as { error: { code: string } }).error.code, "unavailable");
  assert.ok(pulled <= 1, `the refused bodies were read (${pulled} pulls)`);
  budget.giveBack(500);
  const ok = await post(a, "x".repeat(600), { "content-length": "600" });
  assert.equal(ok.status, 200);
  assert.equal(budget.used, 0, "a body's bytes go back once it is answered");
});

test("a body of no declared length is counted as it is read, against the limit and the budget", async () => {
  const budget = new InFlightBytes(1000);
  assert.equal((await post(app(budget, 10_000), streamed(3, 200))).status, 200);
  assert.equal(budget.used, 0);
  const overLimit = await post(app(budget, 500), streamed(3, 200));
  assert.equal(overLimit.status, 413);
  const overBudget = await post(app(budget, 10_000), streamed(6, 200));
  assert.equal(overBudget.status, 503);
  assert.equal(budget.used, 0, "a refused body's bytes go back too");
});

test("a sender that stops sending is cut after the idle time, and its bytes go back", async () => {
  const budget = new InFlightBytes(10_000);
  const quiet = await post(app(budget, 10_000, 50), streamed(2, 100, false));
  assert.equal(quiet.status, 504);
  assert.match(((await quiet.json()) as { error: { message: string } }).error.message, /stopped arriving/);
  assert.equal(budget.used, 0);
});
