import assert from "node:assert/strict";
import { once } from "node:events";
import type { IncomingMessage } from "node:http";
import { Duplex, PassThrough } from "node:stream";
import { after, test } from "node:test";
import { relayUpgrade } from "./port-tunnels.ts";

// The relay's timers are unref'd (they never hold a server open); this one holds the test open.
const keepAlive = setInterval(() => {}, 1000);
after(() => clearInterval(keepAlive));

const upgradeRequest = (headers: string[]) =>
  ({ method: "GET", rawHeaders: headers }) as unknown as IncomingMessage;

/** Settles when a stream has closed, whatever error its destruction came with. */
const closed = (s: Duplex) =>
  new Promise<void>((resolve) => s.on("error", () => {}).once("close", () => resolve()));

/** A connection whose two directions are apart: what is written to it is read from `sent`. */
function endpoint() {
  const incoming = new PassThrough();
  const sent = new PassThrough();
  return { duplex: Duplex.from({ readable: incoming, writable: sent }), incoming, sent };
}

test("a relayed connection idle past its limit is closed", async () => {
  const service = endpoint();
  const client = endpoint();
  relayUpgrade(
    { stream: service.duplex, port: 80 },
    "/ws",
    upgradeRequest(["Host", "x"]),
    client.duplex,
    Buffer.alloc(0),
    {
      idleMs: 30,
    },
  );
  await closed(service.duplex);
  assert.equal(client.duplex.destroyed, true);
});

test("a relayed connection is closed at its lifetime however busy it is", async () => {
  const service = endpoint();
  const client = endpoint();
  relayUpgrade(
    { stream: service.duplex, port: 80 },
    "/ws",
    upgradeRequest([]),
    client.duplex,
    Buffer.alloc(0),
    {
      idleMs: 60_000,
      lifetimeMs: 40,
    },
  );
  const busy = setInterval(() => client.incoming.write("x"), 5);
  await closed(service.duplex);
  clearInterval(busy);
  assert.equal(client.duplex.destroyed, true);
});

test("the request line and headers passed on: no credential, token or forged forwarding header", async () => {
  const service = endpoint();
  const client = endpoint();
  relayUpgrade(
    { stream: service.duplex, port: 8000 },
    "/ws?a=1",
    upgradeRequest([
      "Host",
      "web.alpha.shop.denv.test",
      "Cookie",
      "__Host-denv_session=dss_x",
      "Authorization",
      "Bearer dk_x",
      "Denv-Ingress-Token",
      "dit_x",
      "X-Forwarded-Host",
      "forged.example",
      "Upgrade",
      "websocket",
    ]),
    client.duplex,
    Buffer.alloc(0),
    {
      withhold: new Set(["denv-ingress-token"]),
      forwarded: { host: "web.alpha.shop.denv.test", proto: "https" },
    },
  );
  await once(service.sent, "readable");
  const head = String(service.sent.read());
  service.duplex.destroy();
  assert.match(head, /^GET \/ws\?a=1 HTTP\/1\.1\r\nHost: localhost:8000\r\n/);
  assert.match(head, /\r\nUpgrade: websocket\r\n/);
  assert.match(
    head,
    /\r\nX-Forwarded-Host: web\.alpha\.shop\.denv\.test\r\nX-Forwarded-Proto: https\r\n\r\n$/,
  );
  for (const gone of [/cookie/i, /authorization/i, /dit_x/, /forged/]) assert.doesNotMatch(head, gone);
});

test("the service's upgrade answer reaches the client with no cookie and no Clear-Site-Data, cut wherever its reads are", async () => {
  const answer = Buffer.from(
    [
      "HTTP/1.1 101 Switching Protocols",
      "Upgrade: websocket",
      "Connection: Upgrade",
      "Set-Cookie: denv_session=attacker-chosen; Domain=denv.test; Path=/",
      "set-cookie2: x=1",
      'Clear-Site-Data: "cookies"',
      "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
      "",
      "first frame",
    ].join("\r\n"),
  );
  for (const piece of [1, 7, answer.length]) {
    const service = endpoint();
    const client = endpoint();
    relayUpgrade(
      { stream: service.duplex, port: 8000 },
      "/ws",
      upgradeRequest([]),
      client.duplex,
      Buffer.alloc(0),
    );
    for (let i = 0; i < answer.length; i += piece) service.incoming.write(answer.subarray(i, i + piece));
    let got = "";
    for (let i = 0; i < 200 && !got.endsWith("first frame"); i++) {
      await new Promise((r) => setImmediate(r));
      const c = client.sent.read() as Buffer | null;
      if (c) got += c.toString("latin1");
    }
    service.duplex.destroy();
    assert.equal(
      got,
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\nfirst frame",
      `read ${piece} bytes at a time`,
    );
  }
});

test("an upgrade answer whose head never ends is not relayed past its bound", async () => {
  const service = endpoint();
  const client = endpoint();
  relayUpgrade(
    { stream: service.duplex, port: 8000 },
    "/ws",
    upgradeRequest([]),
    client.duplex,
    Buffer.alloc(0),
  );
  service.incoming.write(Buffer.alloc(80 * 1024, 0x61));
  await closed(client.duplex);
  assert.equal(client.sent.read(), null);
});
