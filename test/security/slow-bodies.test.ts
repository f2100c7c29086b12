/**
 * Round 4's finding 3: GitHub's webhook read up to 25 MiB per request before checking anything, so
 * 40 connections each sending 24 MiB of a declared 25 took the server from 133 to 1,121 MiB. Here,
 * against `denv server` run as its own process (its RSS read from /proc), with a GitHub App
 * connected through the GitHub double (an App's id is as public as it is on github.com): the same
 * crowd, with lengths declared and without; a delivery for no connected App answered before its
 * body is sent; and the anonymous JSON routes refusing bodies larger than their payloads can be.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { connect, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { GitHubDouble } from "../doubles/github-double.ts";
import { repoRoot } from "../harness/test-host.ts";

const APP_ID = "515151";
const ADMIN = `dk_slow_${randomBytes(8).toString("hex")}`;
/** `denv server`, a process of its own. */
let server: { url: string; process: ChildProcess };
let double: GitHubDouble;
let dataDir: string;
const sockets: Socket[] = [];

/** What a delivery's headers say (its signature is well formed and wrong: the body decides that). */
function deliveryHead(appId: string, length: number | null): string {
  return [
    "POST /v1/github/webhook HTTP/1.1",
    `Host: ${new URL(server.url).host}`,
    "content-type: application/json",
    "x-github-event: push",
    `x-github-delivery: ${randomBytes(8).toString("hex")}`,
    `x-github-hook-installation-target-id: ${appId}`,
    `x-hub-signature-256: sha256=${"0".repeat(64)}`,
    length === null ? "transfer-encoding: chunked" : `content-length: ${length}`,
    "",
    "",
  ].join("\r\n");
}

/** Opens a connection and sends the head; what comes back is collected. */
async function open(head: string): Promise<{ socket: Socket; answer: () => string }> {
  const u = new URL(server.url);
  const socket = connect(Number(u.port), u.hostname);
  sockets.push(socket);
  let got = "";
  socket.on("data", (c) => {
    got += c.toString("latin1");
  });
  socket.on("error", () => {});
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  socket.write(head);
  return { socket, answer: () => got };
}

/** Writes `bytes` of the body in 1 MiB pieces, each once the socket took the last (or it closed). */
async function send(socket: Socket, bytes: number, chunked: boolean): Promise<void> {
  const piece = Buffer.alloc(1024 * 1024, 0x20);
  const frame = chunked
    ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from("\r\n")])
    : piece;
  for (let sent = 0; sent < bytes && !socket.destroyed; sent += piece.length) {
    if (!socket.write(frame))
      await new Promise((r) => {
        socket.once("drain", r);
        socket.once("close", r);
      });
  }
}

/** The server process's resident memory now, from /proc (bytes). */
function serverRss(): number {
  const status = readFileSync(`/proc/${server.process.pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1]) * 1024;
}

async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
  const { port } = probe.address() as { port: number };
  await new Promise((r) => probe.close(r));
  return port;
}

before(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "denv-slow-"));
  double = new GitHubDouble(dataDir);
  await double.start();
  const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  double.apps.set(APP_ID, {
    id: APP_ID,
    slug: "denv-slow",
    publicKeyPem: publicKey.export({ type: "spki", format: "pem" }).toString(),
  });
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [
      join(repoRoot, "packages/cli/bin/denv.js"),
      "server",
      "--data-dir",
      join(dataDir, "server"),
      "--port",
      String(port),
    ],
    {
      env: { ...process.env, DENV_ADMIN_KEY: ADMIN, DENV_FETCH_ALLOW: double.host },
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  server = { url: `http://127.0.0.1:${port}`, process: child };
  await new Promise<void>((resolve, reject) => {
    let out = "";
    child.stdout?.on("data", (c: Buffer) => {
      out += c.toString();
      if (out.includes("listening on")) resolve();
    });
    child.once("exit", (code) => reject(new Error(`denv server exited (${code}): ${out}`)));
  });
  const connected = await fetch(`${server.url}/v1/github/apps`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
    body: JSON.stringify({
      app_id: APP_ID,
      private_key: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
      webhook_secret: "a webhook secret of some length",
      api_url: double.url,
    }),
  });
  assert.equal(connected.status, 201, await connected.text());
});

after(async () => {
  for (const s of sockets) s.destroy();
  server?.process.kill("SIGTERM");
  await double?.close();
  await rm(dataDir, { recursive: true, force: true });
});

test("a delivery for no connected App is answered from its headers, before any of its body is sent", async () => {
  const { socket, answer } = await open(deliveryHead("999999", 24_000_000));
  // Waited on by what the socket does (an answer, or its end), not by a clock.
  while (!answer().includes("\r\n\r\n")) {
    assert.ok(!socket.destroyed && !socket.readableEnded, `the connection ended with no answer: ${answer()}`);
    await new Promise((r) => {
      socket.once("data", r);
      socket.once("end", r);
      socket.once("close", r);
    });
  }
  assert.match(answer(), /^HTTP\/1.1 404/);
  assert.match(answer(), /connection: close/i);
  socket.destroy();
});

test("40 slow deliveries of 22 MiB for a connected App (lengths declared, and chunked): the server holds its budget, not their bodies", async (t) => {
  const rssBefore = serverRss();
  let peak = rssBefore;
  const sample = setInterval(() => {
    peak = Math.max(peak, serverRss());
  }, 20);
  try {
    for (const chunked of [false, true]) {
      const crowd = await Promise.all(
        Array.from({ length: 40 }, () => open(deliveryHead(APP_ID, chunked ? null : 24_000_000))),
      );
      // Each sends 22 MiB of its 24 MB body, then nothing more (the connection stays open).
      await Promise.all(crowd.map((c) => send(c.socket, 22 * 1024 * 1024, chunked)));
      // Every one that did not fit the budget is refused at once: answered 503 with Retry-After,
      // its connection ended (a sender still sending may see the end before it reads the answer).
      const held = crowd.filter((c) => c.answer() === "" && !c.socket.destroyed);
      const refused = crowd.filter((c) => !held.includes(c));
      const what = crowd
        .map((c) => c.answer().split("\r\n")[0] || (c.socket.destroyed ? "closed" : "held"))
        .join(", ");
      assert.ok(held.length <= 3, `${held.length} of 40 held (${chunked ? "chunked" : "declared"}): ${what}`);
      for (const c of refused) {
        if (c.answer()) assert.match(c.answer(), /^HTTP\/1.1 503[\s\S]*retry-after: 1/i, what);
      }
      // (A refused sender still sending may see its connection end before it reads the answer:
      // how many do depends on the machine's pace, so only that some were said is asserted.)
      assert.ok(
        refused.some((c) => c.answer()),
        `the refusals were said: ${what}`,
      );
      t.diagnostic(`${chunked ? "chunked" : "declared"}: ${refused.length} refused, ${held.length} held`);
      for (const c of crowd) c.socket.destroy();
    }
  } finally {
    clearInterval(sample);
  }
  const grownMiB = (peak - rssBefore) / 1024 ** 2;
  t.diagnostic(
    `the server's RSS: ${(rssBefore / 1024 ** 2).toFixed(0)} MiB before, ${grownMiB.toFixed(0)} MiB more at its peak`,
  );
  // The budget is 64 MiB of bodies in flight (a held body is read into a string: twice that), and
  // refused senders' bytes are read and dropped for half a second; unbounded, these 40 held 880 MiB.
  assert.ok(grownMiB < 256, `the server grew by ${grownMiB.toFixed(0)} MiB`);
  // And it answers as before.
  assert.equal((await fetch(`${server.url}/healthz`)).status, 200);
});

test("sign-up, sign-in, device codes and host joins take no more than their payloads can be", async () => {
  for (const path of [
    "/v1/auth/signup",
    "/v1/auth/login",
    "/v1/device/code",
    "/v1/device/token",
    "/v1/hosts/join",
  ]) {
    const res = await fetch(`${server.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: "x@example.com", padding: "x".repeat(64 * 1024) }),
    });
    assert.equal(res.status, 413, `${path}: ${res.status}`);
  }
});
