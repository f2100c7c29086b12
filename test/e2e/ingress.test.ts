/**
 * Ingress names on the real engine, reached as a user's machine reaches them: a client in a network
 * namespace of its own whose resolv.conf points at a dnsmasq the test started (answering
 * *.denv.test with the server's address), over TLS from a certificate signed by a CA the test made.
 * The machine's own resolver is never touched. Covers the deploy's ingress phase evidence (names,
 * certificate, probes), private names behind the environment's token and public ones without it,
 * WebSocket, E2B's `{port}-{id}` form with the unmodified SDK in host mode, and names released
 * with their environment.
 */
import assert from "node:assert/strict";
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { joinServer, Sidecar } from "@denv/denvd";
import { type RunningServer, startServer } from "@denv/server";
import { freePort } from "../harness/net.ts";
import { LOCAL_REGISTRY, openTestHost, repoRoot, type TestHost } from "../harness/test-host.ts";

const run = promisify(execFile);
const ADMIN = `dk_ingress_${Date.now()}`;
// One /30 per test process, so a leftover of another run never collides with this one.
const OCTET = 1 + (process.pid % 250);
const NS = `denv-ing-${OCTET}`;
const VETH = `dving${OCTET}`;
const PEER = `dvinp${OCTET}`;
const ROOT_IP = `10.253.${OCTET}.1`;
const NS_IP = `10.253.${OCTET}.2`;
const IMAGE = "127.0.0.1:5000/denv/openenv-echo:0.1";

let dir: string;
let server: RunningServer;
let host: TestHost;
let sidecar: Sidecar;
let dnsmasq: ChildProcess;
let portsPort: number;
let otherKey: string;
let caPath: string;
let leafPem: string;

async function api(method: string, path: string, body?: unknown, key = ADMIN) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, data: (await res.json()) as any };
}

/** Runs the client inside the namespace: DNS from its dnsmasq, the test's CA trusted. */
async function inNamespace(args: string[], env: Record<string, string> = {}): Promise<any> {
  const { stdout } = await run(
    "ip",
    ["netns", "exec", NS, process.execPath, join(repoRoot, "test/e2e/fixtures/ingress-client.ts"), ...args],
    {
      cwd: repoRoot,
      env: { PATH: process.env.PATH ?? "", NODE_EXTRA_CA_CERTS: caPath, ...env },
      timeout: 180_000,
    },
  );
  return JSON.parse(stdout.trim().split("\n").pop() as string);
}

function removeNamespace(): void {
  execFileSync("sh", ["-c", `ip netns del ${NS} 2>/dev/null; ip link del ${VETH} 2>/dev/null; true`]);
  rmSync(`/etc/netns/${NS}`, { recursive: true, force: true });
}

/** A CA, and a certificate it signs for *.denv.test and the readable names of env alpha of shop. */
function makeCertificates(): { cert: string; key: string } {
  const o = (...a: string[]) => execFileSync("openssl", a, { cwd: dir, stdio: "pipe" });
  o(
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-keyout",
    "ca.key",
    "-out",
    "ca.pem",
    "-days",
    "2",
    "-subj",
    "/CN=denv test CA",
  );
  o(
    "req",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-keyout",
    "leaf.key",
    "-out",
    "leaf.csr",
    "-subj",
    "/CN=denv.test",
  );
  writeFileSync(
    join(dir, "leaf.ext"),
    "subjectAltName=DNS:*.denv.test,DNS:*.alpha.shop.denv.test,DNS:denv.test\nextendedKeyUsage=serverAuth\n",
  );
  o(
    "x509",
    "-req",
    "-in",
    "leaf.csr",
    "-CA",
    "ca.pem",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-out",
    "leaf.pem",
    "-days",
    "1",
    "-extfile",
    "leaf.ext",
  );
  caPath = join(dir, "ca.pem");
  leafPem = readFileSync(join(dir, "leaf.pem"), "utf8");
  return { cert: join(dir, "leaf.pem"), key: join(dir, "leaf.key") };
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "denv-ingress-"));
  removeNamespace();
  // The namespace: a veth pair to the root namespace, and its own resolver on its loopback.
  for (const cmd of [
    `ip netns add ${NS}`,
    `ip link add ${VETH} type veth peer name ${PEER}`,
    `ip link set ${PEER} netns ${NS}`,
    `ip addr add ${ROOT_IP}/30 dev ${VETH}`,
    `ip link set ${VETH} up`,
    `ip netns exec ${NS} ip addr add ${NS_IP}/30 dev ${PEER}`,
    `ip netns exec ${NS} ip link set ${PEER} up`,
    `ip netns exec ${NS} ip link set lo up`,
  ])
    execFileSync("sh", ["-c", cmd]);
  mkdirSync(`/etc/netns/${NS}`, { recursive: true });
  writeFileSync(`/etc/netns/${NS}/resolv.conf`, "nameserver 127.0.0.1\n");
  dnsmasq = spawn(
    "ip",
    [
      "netns",
      "exec",
      NS,
      "dnsmasq",
      "--keep-in-foreground",
      "--conf-file=/dev/null",
      "--no-resolv",
      "--no-hosts",
      "--bind-interfaces",
      "--listen-address=127.0.0.1",
      `--address=/denv.test/${ROOT_IP}`,
      "--pid-file=",
    ],
    { stdio: "ignore" },
  );
  const tls = makeCertificates();
  portsPort = await freePort();
  server = await startServer({
    dataDir: join(dir, "data"),
    adminKey: ADMIN,
    fetchAllow: LOCAL_REGISTRY,
    host: ROOT_IP,
    portsPort,
    portsTls: { certPath: tls.cert, keyPath: tls.key },
    ingress: { domain: `denv.test:${portsPort}` },
  });
  host = await openTestHost({});
  const token = (await api("POST", "/v1/hosts/join-token")).data.token as string;
  const joined = await joinServer(server.url, token, "ingress-host");
  sidecar = new Sidecar({ serverUrl: server.url, secret: joined.secret, denvd: host.denvd });
  sidecar.start();
  await sidecar.ready;
  otherKey = (await api("POST", "/v1/teams", { name: "other" })).data.api_key;
  // dnsmasq answers once it has bound: wait for the first answer, however long the machine takes.
  for (let i = 0; ; i++) {
    const r = await run("ip", ["netns", "exec", NS, "getent", "hosts", "probe.denv.test"]).catch(() => null);
    if (r?.stdout.includes(ROOT_IP)) break;
    if (dnsmasq.exitCode !== null || i > 600) throw new Error("dnsmasq did not answer in the namespace");
    await new Promise((r) => setTimeout(r, 100));
  }
});

after(async () => {
  await sidecar?.stop();
  await server?.close();
  await host?.close();
  dnsmasq?.kill();
  removeNamespace();
  await rm(dir, { recursive: true, force: true });
});

const compose = `x-denv:
  kind: service
  ingress: { public: [web] }
services:
  web: { image: ${IMAGE}, ports: ["8000"] }
  api: { image: ${IMAGE}, ports: ["8000"] }
`;

let envId: string;
let ingressToken: string;

test("a project with a published port: the ingress phase records each name, the certificate and a probe from outside the stack", async () => {
  assert.equal(
    (await api("POST", "/v1/projects", { name: "shop", kind: "service", source: "./shop" })).status,
    201,
  );
  assert.equal((await api("PUT", "/v1/projects/shop/source", { compose })).status, 200);
  const { status, data } = await api("POST", "/v1/projects/shop/deploy?wait=true", { env: "alpha" });
  assert.equal(status, 200, JSON.stringify(data));
  assert.equal(data.status, "succeeded", JSON.stringify(data.phases));
  const phase = data.phases.find((p: any) => p.name === "ingress");
  assert.equal(phase.status, "succeeded", JSON.stringify(phase));
  const ev = phase.evidence;
  envId = (await api("GET", "/v1/envs/alpha")).data.id;
  const hex = envId.replace(/^env_/, "");
  assert.equal(ev.domain, `denv.test:${portsPort}`);
  const leaf = new X509Certificate(leafPem);
  assert.equal(ev.certificate.fingerprint_sha256, leaf.fingerprint256.replaceAll(":", "").toLowerCase());
  assert.equal(ev.certificate.not_after, new Date(leaf.validTo).toISOString());
  const byHost = new Map(ev.names.map((n: any) => [n.host, n]));
  assert.deepEqual([...byHost.keys()].sort(), [
    `8000-${hex}.denv.test`,
    "api.alpha.shop.denv.test",
    "web.alpha.shop.denv.test",
  ]);
  // Both services publish 8000: `{port}-{id}` reaches the first by name, and the other is said.
  assert.equal((byHost.get(`8000-${hex}.denv.test`) as any).service, "api");
  assert.match(ev.refused[0].reason, /reaches port 8000 of api/);
  for (const n of ev.names) {
    assert.equal(n.url, `https://${n.host}:${portsPort}`);
    assert.equal(n.covered_by_certificate, true, n.host);
    // The probe went through the listener by name, TLS and all: the service's own answer came back.
    assert.ok(n.probe.status > 0 && n.probe.status < 500 && n.probe.status !== 401, JSON.stringify(n));
    assert.equal(n.probe.tls.fingerprint_sha256, ev.certificate.fingerprint_sha256);
    assert.ok(
      Number.isFinite(n.probe.ms) && n.probe.ms >= 0,
      `the probe says how long it took: ${JSON.stringify(n.probe)}`,
    );
  }
  assert.equal((byHost.get("web.alpha.shop.denv.test") as any).public, true);
  assert.equal((byHost.get("api.alpha.shop.denv.test") as any).public, false);
  const ingress = await api("GET", "/v1/envs/alpha/ingress");
  assert.equal(ingress.status, 200);
  ingressToken = ingress.data.token;
  assert.match(ingressToken, /^dit_/);
  assert.equal(ingress.data.names.length, 3);
  assert.equal((await api("GET", `/v1/envs/${envId}/ingress`, undefined, otherKey)).status, 404);
  // The token is derived, never stored.
  const stored = JSON.stringify(await server.store.selectFrom("ingress_names").selectAll().execute());
  assert.ok(!stored.includes(ingressToken));
});

test("names resolve by DNS in a namespace of their own; a private name needs the environment's token", async () => {
  const url = (h: string, path: string) => `https://${h}:${portsPort}${path}`;
  const pub = await inNamespace(["fetch", url("web.alpha.shop.denv.test", "/health")]);
  assert.equal(pub.status, 200, JSON.stringify(pub));
  assert.equal(pub.resolved, ROOT_IP);
  assert.deepEqual(JSON.parse(pub.body), { status: "healthy" });
  const denied = await inNamespace(["fetch", url("api.alpha.shop.denv.test", "/health")]);
  assert.equal(denied.status, 401);
  assert.match(JSON.parse(denied.body).error.message, /private/);
  const wrong = await inNamespace([
    "fetch",
    url("api.alpha.shop.denv.test", "/health"),
    JSON.stringify({ "denv-ingress-token": `${ingressToken.slice(0, -4)}0000` }),
  ]);
  assert.equal(wrong.status, 401);
  const ok = await inNamespace([
    "fetch",
    url("api.alpha.shop.denv.test", "/health"),
    JSON.stringify({ "denv-ingress-token": ingressToken }),
  ]);
  assert.equal(ok.status, 200, JSON.stringify(ok));
  // By query parameter (a browser's way), and the service never sees the token either way.
  const seen = await inNamespace([
    "fetch",
    url("api.alpha.shop.denv.test", `/debug/headers?_denv_token=${ingressToken}`),
    JSON.stringify({ "e2b-traffic-access-token": ingressToken, cookie: "a=b" }),
  ]);
  assert.equal(seen.status, 200, JSON.stringify(seen));
  const headers = JSON.parse(seen.body);
  assert.equal(headers["e2b-traffic-access-token"], undefined);
  assert.equal(headers["denv-ingress-token"], undefined);
  assert.equal(headers.cookie, undefined);
  assert.equal(headers["x-forwarded-host"], `api.alpha.shop.denv.test:${portsPort}`);
  assert.ok(!JSON.stringify(headers).includes(ingressToken));
  const portForm = await inNamespace([
    "fetch",
    url(`8000-${envId.replace(/^env_/, "")}.denv.test`, "/health"),
    JSON.stringify({ "denv-ingress-token": ingressToken }),
  ]);
  assert.equal(portForm.status, 200);
  const unknown = await inNamespace(["fetch", url("nope.alpha.shop.denv.test", "/")]);
  assert.equal(unknown.status, 404);
  // envd's name serves envd's routes only: not E2B's control plane, even with a key.
  const control = await inNamespace([
    "fetch",
    url(`49983-${envId.replace(/^env_/, "")}.denv.test`, "/v2/sandboxes"),
    JSON.stringify({ "x-api-key": ADMIN }),
  ]);
  assert.equal(control.status, 404);
  // A WebSocket by a public name.
  const ws = await inNamespace(["ws", `wss://web.alpha.shop.denv.test:${portsPort}/ws`]);
  assert.equal(ws.opened, "open", JSON.stringify(ws));
  assert.equal(ws.replies[1].data.observation.echoed, "over ingress");
  const wsDenied = await inNamespace(["ws", `wss://api.alpha.shop.denv.test:${portsPort}/ws`]);
  assert.equal(wsDenied.opened, "http 401");
});

test("the unmodified E2B SDK in host mode: envd at 49983-{id} and getHost(port) by name", async () => {
  const out = await inNamespace(["e2b", IMAGE], {
    E2B_API_URL: `${server.url}/e2b`,
    E2B_API_KEY: ADMIN,
  });
  assert.equal(out.error, undefined, JSON.stringify(out));
  assert.equal(out.stdout, "from-host-mode\n1000\n");
  assert.equal(out.read, "written by name");
  assert.match(out.envd_url, new RegExp(`^https://49983-[a-z0-9]+\\.denv\\.test:${portsPort}$`));
  assert.match(out.host, new RegExp(`^8000-[a-z0-9]+\\.denv\\.test:${portsPort}$`));
  assert.deepEqual(out.signed, {
    upload: 200,
    download: 200,
    body: "by signed url",
    tampered: 401,
    other_path: 401,
    unsigned: 401,
  });
  assert.equal(out.without_token, 401);
  assert.equal(out.with_token, 200);
  assert.deepEqual(JSON.parse(out.health), { status: "healthy" });
});

test("a destroyed environment's names answer 404, and another may claim them", async () => {
  assert.equal((await api("DELETE", "/v1/envs/alpha")).data.status, "succeeded");
  const gone = await inNamespace(["fetch", `https://web.alpha.shop.denv.test:${portsPort}/health`]);
  assert.equal(gone.status, 404);
  const left = await server.store
    .selectFrom("ingress_names")
    .selectAll()
    .where("environment_id", "=", envId)
    .execute();
  assert.deepEqual(left, []);
});
