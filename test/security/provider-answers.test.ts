/**
 * Round 4's finding 4: a provider's answers steered the server past the fetch policy. An allowed
 * E2B or Daytona endpoint answered 307 to an address the administrator did not allow: the drivers
 * followed it, sent the team's provider key there, and put its body in the error; Daytona's
 * `toolboxProxyUrl`, taken from the provider's answer, was never checked, so a sandbox's commands
 * went with the key to any address the answer named. Here, against a live server with the
 * providers' own SDKs: hostile endpoints on loopback that redirect to an "internal" service beside
 * them, a Daytona double naming that service as a sandbox's toolbox, and an allowed name that
 * resolves to this machine. The internal service must see nothing, and no error may carry what it
 * would have said.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type RunningServer, startServer } from "@denv/server";
import { type DaytonaDouble, startDaytonaDouble } from "../doubles/daytona-double.ts";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";

const ADMIN = `dk_prov_${randomBytes(8).toString("hex")}`;
const SECRET = "INTERNAL-SERVICE-SECRET";
let server: RunningServer;
let dataDir: string;
let internal: Server;
let internalUrl: string;
let front: Server;
let frontUrl: string;
let daytona: DaytonaDouble;
/** What the internal service was asked, with the credentials it was sent. */
const internalSaw: string[] = [];

async function listen(s: Server): Promise<string> {
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

const api = async (method: string, path: string, body?: unknown) => {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, text: await res.text() };
};

before(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "denv-prov-"));
  internal = createServer((req, res) => {
    internalSaw.push(
      `${req.method} ${req.url} key=${req.headers["x-api-key"] ?? req.headers.authorization ?? "none"}`,
    );
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ message: SECRET }));
  });
  internalUrl = await listen(internal);
  // An endpoint the administrator allowed, whose every answer sends the client on to the internal one.
  front = createServer((req, res) => res.writeHead(307, { location: `${internalUrl}${req.url}` }).end());
  frontUrl = await listen(front);
  daytona = await startDaytonaDouble();
  server = await startServer({
    dataDir,
    adminKey: ADMIN,
    fetchAllow: [
      ...LOCAL_REGISTRY,
      new URL(frontUrl).host,
      new URL(daytona.url).host,
      // The internal service's port, allowed by a name: the name resolves to this machine, whose
      // address the administrator did not allow.
      `localhost:${new URL(internalUrl).port}`,
    ],
  });
});

after(async () => {
  await server?.close();
  await daytona?.close();
  internal?.close();
  front?.close();
  await rm(dataDir, { recursive: true, force: true });
});

test("an allowed E2B or Daytona endpoint that redirects elsewhere: no key sent there, nothing of its answer shown", async () => {
  for (const [provider, token] of [
    ["e2b", `e2b_${randomBytes(20).toString("hex")}`],
    ["daytona", `dtn_${randomBytes(20).toString("hex")}`],
  ] as const) {
    const r = await api("POST", "/v1/clouds", {
      provider,
      name: `hostile-${provider}`,
      token,
      api_url: frontUrl,
    });
    assert.notEqual(r.status, 201, `${provider}: ${r.text}`);
    assert.match(r.text, /is not a host this server connects to for teams/, `${provider}: ${r.text}`);
    assert.ok(!r.text.includes(SECRET), `${provider}'s error shows the internal service's answer: ${r.text}`);
  }
  assert.deepEqual(internalSaw, [], "the internal service was reached");
  assert.equal((await api("GET", "/v1/clouds")).text.includes("hostile"), false, "nothing was kept");
});

test("a sandbox whose toolbox Daytona's answer puts on another host gets no command and no key", async () => {
  const c = await api("POST", "/v1/clouds", {
    provider: "daytona",
    name: "daytona",
    token: daytona.apiKey,
    api_url: daytona.url,
  });
  assert.equal(c.status, 201, c.text);
  daytona.toolboxAt(`${internalUrl}/toolbox`);
  try {
    const made = await api("POST", "/v1/targets/daytona/sandboxes", {
      image: "127.0.0.1:5000/denv/opsbox:bookworm",
      name: "steered",
    });
    assert.notEqual(made.status, 201, made.text);
    assert.match(made.text, /toolboxProxyUrl: 127\.0\.0\.1:\d+ is not a host this server fetches from/);
    assert.ok(!made.text.includes(SECRET));
  } finally {
    daytona.toolboxAt(null);
  }
  assert.deepEqual(internalSaw, [], "the internal service was reached");
});

test("an allowed name that resolves to this machine is not connected to", async () => {
  for (const provider of ["daytona", "e2b", "hetzner"]) {
    const r = await api("POST", "/v1/clouds", {
      provider,
      name: `by-name-${provider}`,
      token: `${provider}_${randomBytes(20).toString("hex")}`,
      api_url: `http://localhost:${new URL(internalUrl).port}`,
      ...(provider === "hetzner" ? { server_type: "cx22", location: "fsn1" } : {}),
    });
    assert.notEqual(r.status, 201, r.text);
    assert.match(
      r.text,
      /localhost resolves to (127\.0\.0\.1|::1), an address of this machine or a private network/,
      `${provider}: ${r.text}`,
    );
  }
  assert.deepEqual(internalSaw, [], "the service behind the name saw nothing");
});
