/**
 * Issue 33, finding 6: sign-in, sign-up and device-code limits counted per exact client address
 * gave whoever holds many addresses unlimited password guesses. Now an account has a budget of its
 * own, whatever the addresses: here 30 guesses at one password, each from a different loopback
 * address (127.0.0.2 …), are refused after the account's 20. (IPv6 addresses count by their /64:
 * rate-limit.test.ts.)
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { ACCOUNT_RATE_LIMIT, type RunningServer, startServer } from "@denv/server";

let server: RunningServer;
let dataDir: string;

before(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "denv-signin-"));
  // The account's bucket on a clock that stands still: what refills while scrypt runs on a busy
  // machine does not blur the count (the default refills one each 5 s).
  server = await startServer({
    dataDir,
    port: 0,
    accountRateLimit: { ...ACCOUNT_RATE_LIMIT, clock: () => 0 },
  });
});

after(async () => {
  await server?.close();
  await rm(dataDir, { recursive: true, force: true });
});

/** A POST from a chosen local address. */
function post(path: string, body: unknown, from: string): Promise<{ status: number; text: string }> {
  const u = new URL(path, server.url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: "POST",
        localAddress: from,
        headers: { "content-type": "application/json" },
      },
      (res) => {
        let text = "";
        res.on("data", (c: Buffer) => (text += c.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

test("guesses at one account from many addresses stop at the account's budget", async () => {
  const email = "target@example.com";
  const made = await post("/v1/auth/signup", { email, password: "correct horse battery" }, "127.0.0.1");
  assert.equal(made.status, 201, made.text);
  const statuses: number[] = [];
  let refusal = "";
  for (let i = 0; i < 30; i++) {
    const r = await post(
      "/v1/auth/login",
      { email: email.toUpperCase(), password: `guess-${i}` },
      `127.0.0.${i + 2}`,
    );
    statuses.push(r.status);
    if (r.status === 429) refusal = r.text;
  }
  // 20 guesses answered (each a wrong password), then refused, though no address tried twice.
  assert.deepEqual(statuses.slice(0, 20), Array(20).fill(401), statuses.join(","));
  assert.deepEqual(statuses.slice(20), Array(10).fill(429), statuses.join(","));
  assert.match(refusal, /too many attempts for this account/);
  // Another account is not held back by it, from an address that guessed above.
  const other = await post(
    "/v1/auth/signup",
    { email: "other@example.com", password: "another good one" },
    "127.0.0.5",
  );
  assert.equal(other.status, 201, other.text);
});
