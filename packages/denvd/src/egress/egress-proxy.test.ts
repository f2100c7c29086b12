/**
 * The egress proxy against upstreams this test starts on loopback, reached through the proxy's
 * connect hook under documentation addresses (198.51.100.0/24): loopback itself is never reached
 * by a policy, and no test sends anything off this machine. Hostile callers throughout.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer as createHttpServer, request } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { type AddressInfo, connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, beforeEach, test } from "node:test";
import { connect as tlsConnect } from "node:tls";
import { type ParsedEgressPolicy, parseEgressPolicy } from "@denv/spec";
import { EgressProxy, type EgressRecord } from "./egress-proxy.ts";

const MIRROR = "198.51.100.10";
const RAW = "198.51.100.20";
let dir: string;
let cert: Buffer;
let httpUpstream: ReturnType<typeof createHttpServer>;
let httpsUpstream: ReturnType<typeof createHttpsServer>;
let front: Server;
let proxy: EgressProxy;
let records: EgressRecord[];
let lookups: string[];
let dialed: string[];
let policy: ParsedEgressPolicy;
let rebindAnswers: string[][];
const ports: Record<string, number> = {};

function parse(allow: string[], deny: string[] = []): ParsedEgressPolicy {
  const p = parseEgressPolicy({ allow, deny });
  if ("errors" in p) throw new Error(p.errors.join("; "));
  return p;
}

const listen = (s: Server | ReturnType<typeof createHttpServer>) =>
  new Promise<number>((r) => s.listen(0, "127.0.0.1", () => r((s.address() as AddressInfo).port)));

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "egress-proxy-"));
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      join(dir, "key.pem"),
      "-out",
      join(dir, "cert.pem"),
      "-days",
      "1",
      "-subj",
      "/CN=pkg.mirror.test",
      "-addext",
      "subjectAltName=DNS:pkg.mirror.test,DNS:other.test",
    ],
    { stdio: "ignore" },
  );
  cert = readFileSync(join(dir, "cert.pem"));
  const answer = (req: import("node:http").IncomingMessage, res: import("node:http").ServerResponse) => {
    let bytes = 0;
    req.on("data", (c: Buffer) => {
      bytes += c.length;
    });
    req.on("end", () =>
      res.end(JSON.stringify({ method: req.method, url: req.url, host: req.headers.host, bytes })),
    );
  };
  httpUpstream = createHttpServer(answer);
  httpsUpstream = createHttpsServer({ key: readFileSync(join(dir, "key.pem")), cert }, answer);
  ports.http = await listen(httpUpstream);
  ports.https = await listen(httpsUpstream);
  front = createServer((s) => proxy.accept(s, { address: "172.30.0.5", port: s.remotePort ?? 0 }));
  ports.front = await listen(front);
});

after(() => {
  front.close();
  httpUpstream.close();
  httpsUpstream.close();
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  records = [];
  lookups = [];
  dialed = [];
  rebindAnswers = [[MIRROR], ["127.0.0.1"]];
  policy = parse(["pkg.mirror.test", "rebind.test", "loop.test", `${RAW}:7000`], ["blocked.mirror.test"]);
  proxy?.close();
  proxy = new EgressProxy({
    policy: () => policy,
    resolve: async (name) => {
      lookups.push(name);
      if (name === "rebind.test") return rebindAnswers.shift() ?? ["127.0.0.1"];
      if (name === "loop.test") return ["127.0.0.1"];
      return [MIRROR];
    },
    connect: (address, port) => {
      dialed.push(`${address}:${port}`);
      const to = port === 443 ? ports.https : ports.http;
      return connect({ host: "127.0.0.1", port: to as number });
    },
    serviceOf: (a) => (a === "172.30.0.5" ? "box" : null),
    record: (r) => records.push(r),
    maxUploadBytes: 64 * 1024,
    idleTimeoutMs: 60_000,
  });
});

/** A forward-proxy request: its status and body. */
function viaProxy(url: string, opts: { method?: string; host?: string; body?: Buffer } = {}) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request({
      host: "127.0.0.1",
      port: ports.front,
      method: opts.method ?? "GET",
      path: url,
      headers: { host: opts.host ?? new URL(url).host },
    });
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(opts.body);
  });
}

/** Opens a CONNECT tunnel; resolves with the socket and the proxy's answer's head and body. */
function tunnel(target: string): Promise<{ socket: Socket; status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port: ports.front as number });
    let got = Buffer.alloc(0);
    const onData = (c: Buffer) => {
      got = Buffer.concat([got, c]);
      const end = got.indexOf("\r\n\r\n");
      if (end < 0) return;
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(got.toString("latin1"))?.[1] ?? 0);
      if (status !== 200) return; // read the refusal's body to its end
      socket.off("data", onData);
      resolve({ socket, status, text: got.toString() });
    };
    socket.on("data", onData);
    socket.on("end", () => {
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(got.toString("latin1"))?.[1] ?? 0);
      resolve({ socket, status, text: got.toString() });
    });
    socket.on("error", reject);
    socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
  });
}

/** TLS through a tunnel, trusting the test's own certificate: what the upstream answered. */
function httpsThrough(socket: Socket, servername: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const tls = tlsConnect({ socket, servername, ca: cert });
    tls.on("secureConnect", () =>
      tls.write(`GET /tls HTTP/1.1\r\nHost: ${servername}\r\nConnection: close\r\n\r\n`),
    );
    let out = "";
    let secure = false;
    tls.once("secureConnect", () => {
      secure = true;
    });
    tls.on("data", (c: Buffer) => {
      out += c.toString();
      // One answer is all the test asks for: the upstream keeps the connection as it likes.
      if (out.includes("}")) tls.end();
    });
    const done = () => (secure ? resolve(out) : reject(new Error("closed before the handshake ended")));
    tls.on("end", done);
    tls.on("close", done);
    tls.on("error", reject);
  });
}

test("HTTP to an allowed name goes through to the address the proxy resolved, with its Host, and is logged", async () => {
  const r = await viaProxy("http://PKG.Mirror.Test./simple/?q=1");
  assert.equal(r.status, 200);
  const seen = JSON.parse(r.body);
  assert.deepEqual([seen.url, seen.host], ["/simple/?q=1", "pkg.mirror.test."]);
  assert.deepEqual(dialed, [`${MIRROR}:80`]);
  const [rec] = records;
  assert.equal(rec?.allowed, true);
  assert.equal(rec?.rule, "pkg.mirror.test");
  assert.equal(rec?.service, "box");
  assert.equal(rec?.address, MIRROR);
  assert.ok((rec?.bytes_in ?? 0) > 0);
});

test("HTTP elsewhere is a 403 at once, naming why and what the policy allows; the name is never looked up", async () => {
  const r = await viaProxy("http://answers.example.test/key");
  assert.equal(r.status, 403);
  assert.match(
    r.body,
    /denv egress: refused: answers\.example\.test:80 is not in the environment's egress allow list/,
  );
  assert.match(r.body, /allows: pkg\.mirror\.test, rebind\.test, loop\.test, 198\.51\.100\.20:7000/);
  assert.deepEqual(lookups, []);
  assert.deepEqual(dialed, []);
  const denied = await viaProxy("http://blocked.mirror.test/");
  assert.equal(denied.status, 403);
  assert.match(denied.body, /denied by the rule blocked\.mirror\.test/);
  assert.deepEqual(
    records.map((x) => [x.allowed, x.destination]),
    [
      [false, "answers.example.test:80"],
      [false, "blocked.mirror.test:80"],
    ],
  );
});

test("a Host header naming another host than the URL is refused; so is a URL that is not absolute http", async () => {
  const r = await viaProxy("http://pkg.mirror.test/", { host: "answers.example.test" });
  assert.equal(r.status, 400);
  assert.match(r.body, /Host header \(answers\.example\.test\) names another host than the URL/);
  assert.equal((await viaProxy("http://pkg.mirror.test:8080/", { host: "pkg.mirror.test" })).status, 400);
  const relative = await viaProxy("/etc/passwd", { host: "pkg.mirror.test" });
  assert.equal(relative.status, 400);
  assert.match(relative.body, /not an absolute http:\/\/ URL/);
  assert.deepEqual(dialed, []);
});

test("HTTPS by CONNECT passes through undecrypted: the caller verifies the upstream's own certificate", async () => {
  const t = await tunnel("pkg.mirror.test:443");
  assert.equal(t.status, 200);
  const answer = await httpsThrough(t.socket, "pkg.mirror.test");
  assert.match(answer, /"url":"\/tls"/);
  t.socket.destroy();
  assert.deepEqual(dialed, [`${MIRROR}:443`]);
  await waitForRecord();
  assert.equal(records[0]?.kind, "connect");
  assert.ok((records[0]?.bytes_out ?? 0) > 0 && (records[0]?.bytes_in ?? 0) > 0);
});

test("a TLS server name other than the CONNECT's host closes the tunnel before a byte reaches the upstream", async () => {
  let upstreamBytes = 0;
  const counting = (s: Socket) => s.on("data", (c: Buffer) => (upstreamBytes += c.length));
  httpsUpstream.on("connection", counting);
  try {
    const t = await tunnel("pkg.mirror.test:443");
    assert.equal(t.status, 200);
    await assert.rejects(httpsThrough(t.socket, "other.test"));
    await waitForRecord();
    assert.equal(records[0]?.allowed, false);
    assert.match(
      records[0]?.reason ?? "",
      /TLS server name other\.test is not the CONNECT's host pkg\.mirror\.test/,
    );
    assert.equal(upstreamBytes, 0);
  } finally {
    httpsUpstream.off("connection", counting);
  }
});

test("CONNECT to the address an allowed name resolves to is a raw address: refused; an address rule lets one through", async () => {
  const raw = await tunnel(`${MIRROR}:443`);
  assert.equal(raw.status, 403);
  assert.match(raw.text, /a raw address needs an address rule/);
  const other = await tunnel("203.0.113.9:443");
  assert.equal(other.status, 403);
  const allowed = await tunnel(`${RAW}:7000`);
  assert.equal(allowed.status, 200);
  allowed.socket.destroy();
  assert.deepEqual(dialed, [`${RAW}:7000`]);
  assert.deepEqual(lookups, []);
});

test("DNS rebinding: the proxy connects to the address it checked, and an allowed name resolving to loopback is refused", async () => {
  const first = await viaProxy("http://rebind.test/");
  assert.equal(first.status, 200);
  assert.deepEqual(dialed, [`${MIRROR}:80`], "the checked address, not a second lookup's");
  const second = await viaProxy("http://rebind.test/");
  assert.equal(second.status, 403);
  assert.match(second.body, /127\.0\.0\.1 is this machine's loopback: never reached/);
  const loop = await tunnel("loop.test:443");
  assert.equal(loop.status, 403);
  assert.deepEqual(dialed, [`${MIRROR}:80`]);
  assert.deepEqual(lookups, ["rebind.test", "rebind.test", "loop.test"], "one lookup per connection");
});

test("look-alike, junk and IPv6 targets are refused without a lookup", async () => {
  for (const target of [
    "pkg.mіrror.test:443",
    "pkg.mirror.test:0",
    "[::1]:443",
    "pkg.mirror.test",
    "a..b:443",
  ]) {
    const t = await tunnel(target);
    assert.ok(t.status === 400 || t.status === 403, `${target}: ${t.status}`);
    t.socket.destroy();
  }
  assert.deepEqual(lookups, []);
  assert.deepEqual(dialed, []);
});

test("an upload past the limit is cut off, through HTTP and through a tunnel, and the log says why", async () => {
  await assert.rejects(
    viaProxy("http://pkg.mirror.test/upload", { method: "POST", body: Buffer.alloc(1024 * 1024) }),
  );
  await waitForRecord();
  assert.match(records[0]?.error ?? "", /upload limit of 65536 bytes/);
  records.length = 0;
  const t = await tunnel("pkg.mirror.test:443");
  const closed = new Promise((r) => t.socket.on("close", r));
  t.socket.on("error", () => {});
  // Not TLS: plain bytes pass (the port is the policy's business, not the protocol).
  t.socket.write(Buffer.alloc(1024 * 1024, 1));
  await closed;
  await waitForRecord();
  assert.match(records[0]?.error ?? "", /upload limit/);
});

test("a narrowed policy closes an open connection it no longer allows, and refuses the next", async () => {
  const t = await tunnel("pkg.mirror.test:443");
  assert.equal(t.status, 200);
  const closed = new Promise((r) => t.socket.on("close", r));
  t.socket.on("error", () => {});
  t.socket.write("hello");
  policy = parse(["other.test"]);
  await waitFor(() => proxy.recheck() === 1 || records.length > 0);
  await closed;
  await waitForRecord();
  assert.match(records[0]?.error ?? "", /egress policy changed/);
  const next = await tunnel("pkg.mirror.test:443");
  assert.equal(next.status, 403);
});

/** Waits on observed progress: until the check holds (a test's own timeout bounds it). */
async function waitFor(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((r) => setImmediate(r));
}
const waitForRecord = () => waitFor(() => records.length > 0);
