/**
 * x-denv.egress as a policy, on the real engine, against the test's own internet (a network
 * namespace with HTTP, HTTPS and TCP upstreams and its own CA: test-internet.ts): the stack's
 * network still has no route out; its gateway hands every connection to denvd's proxy on the
 * host, which lets the allowed ones through and refuses the rest at once, readably, and logs each.
 * The box's clients find the proxy by the variables every HTTP client reads (Python's urllib here).
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { ResolvedSpec } from "@denv/protocol";
import { pinSpec, RegistryPinner, validateCompose } from "@denv/spec";
import { type DeployedStack, deployStack, openTestHost, type TestHost } from "../harness/test-host.ts";
import { startTestInternet, type TestInternet } from "../harness/test-internet.ts";
import { waitFor } from "../harness/wait-for.ts";

let host: TestHost;
let net: TestInternet;
let deployed: DeployedStack;

/** Fetches a URL from inside the box with Python's urllib (it reads HTTP_PROXY/HTTPS_PROXY). */
const FETCH = `
import os, ssl, sys, tempfile, urllib.request, urllib.error
url, ca = sys.argv[1], sys.argv[2]
ctx = None
if ca:
    f = tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False); f.write(ca); f.close()
    ctx = ssl.create_default_context(cafile=f.name)
try:
    r = urllib.request.urlopen(url, timeout=60, context=ctx)
    print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except Exception as e:
    print("error", repr(e))
`;

/** A TCP exchange from inside the box: through the gateway by CONNECT, or straight at the address. */
const TCP = `
import socket, sys
how, target = sys.argv[1], sys.argv[2]
host, port = target.rsplit(":", 1)
try:
    if how == "direct":
        s = socket.create_connection((host, int(port)), timeout=10)
    else:
        s = socket.create_connection(("denv-egress", 3128), timeout=30)
        s.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
        head = b""
        while b"\\r\\n\\r\\n" not in head:
            chunk = s.recv(4096)
            if not chunk: break
            head += chunk
        if not head.startswith(b"HTTP/1.1 200"):
            print("refused", head.decode(errors="replace")); sys.exit(0)
    s.sendall(b"ping")
    print("echo", s.recv(100).decode())
except Exception as e:
    print("error", repr(e))
`;

async function inBox(stackId: string, argv: string[]): Promise<string> {
  const r = await host.denvd.exec(stackId, "box", { command: argv });
  assert.equal(r.exitCode, 0, r.stderr.toString());
  return r.stdout.toString().trim();
}
const fetchIn = (stackId: string, url: string, ca = "") => inBox(stackId, ["python3", "-c", FETCH, url, ca]);
const tcpIn = (stackId: string, how: "proxy" | "direct", target: string) =>
  inBox(stackId, ["python3", "-c", TCP, how, target]);

async function specFor(internet: TestInternet): Promise<ResolvedSpec> {
  const text = `
services:
  box:
    image: 127.0.0.1:5000/denv/opsbox:bookworm
    user: "1000:1000"
    command: ["sleep", "infinity"]
x-denv:
  kind: agent
  agent: { service: box }
  egress:
    allow: ["pkg.mirror.test", "${internet.address}:7000"]
    deny: ["blocked.mirror.test"]
`;
  const r = validateCompose(text, { env: {}, projectName: "egress-policy" });
  if (!r.ok) throw new Error(JSON.stringify(r.errors));
  return pinSpec(r.spec, new RegistryPinner());
}

before(async () => {
  net = await startTestInternet(["pkg.mirror.test", "other.mirror.test", "blocked.mirror.test"]);
  host = await openTestHost({
    egressHosts: Object.fromEntries(net.names.map((n) => [n, [net.address]])),
  });
  deployed = await deployStack(host.denvd, await specFor(net), { name: "egress" });
});

after(async () => {
  await host?.close();
  await net?.close();
});

test("an allowed name answers by HTTP and HTTPS (the box verifies the upstream's own certificate); anything else is a 403 at once, naming the policy", async () => {
  const id = deployed.stack.id;
  assert.equal(deployed.evidence.egress.result, "blocked", "the network itself still has no way out");
  const http = await fetchIn(id, "http://pkg.mirror.test/simple/");
  assert.match(http, /^200 /);
  assert.equal(JSON.parse(http.slice(4)).host, "pkg.mirror.test");
  const https = await fetchIn(id, "https://pkg.mirror.test/tls", net.caPem);
  assert.match(https, /^200 /);
  assert.equal(JSON.parse(https.slice(4)).url, "/tls");
  const other = await fetchIn(id, "http://other.mirror.test/answers");
  assert.match(
    other,
    /^403 denv egress: refused: other\.mirror\.test:80 is not in the environment's egress allow list/,
  );
  assert.match(other, /allows: pkg\.mirror\.test, 198\.19\.\d+\.\d+:7000/);
  assert.match(await fetchIn(id, "https://other.mirror.test/", net.caPem), /^error .*403/);
  assert.match(
    await fetchIn(id, "http://blocked.mirror.test/"),
    /^403 .*denied by the rule blocked\.mirror\.test/,
  );
  const log = host.denvd.egressLog(id).records;
  const byDest = (d: string) => log.filter((r) => r.destination === d);
  assert.deepEqual(
    byDest("pkg.mirror.test:80").map((r) => [r.service, r.allowed, r.rule, r.address]),
    [["box", true, "pkg.mirror.test", net.address]],
  );
  assert.equal(byDest("pkg.mirror.test:443")[0]?.kind, "connect");
  assert.ok((byDest("pkg.mirror.test:443")[0]?.bytes_in ?? 0) > 0);
  assert.deepEqual(
    byDest("other.mirror.test:80").map((r) => [r.service, r.allowed]),
    [["box", false]],
  );
});

test("TCP: an address rule's port passes by CONNECT; a direct connect has no route; a raw address without a rule is refused", async () => {
  const id = deployed.stack.id;
  assert.equal(await tcpIn(id, "proxy", `${net.address}:7000`), "echo ping");
  assert.match(
    await tcpIn(id, "direct", `${net.address}:7000`),
    /^error .*(unreachable|No route|timed out)/i,
  );
  assert.match(
    await tcpIn(id, "proxy", `${net.address}:80`),
    /^refused HTTP\/1\.1 403.*a raw address needs an address rule/s,
  );
  assert.match(
    await tcpIn(id, "proxy", "127.0.0.1:7000"),
    /^refused HTTP\/1\.1 403.*loopback: never reached/s,
  );
});

test("a fork of the version has its own gateway with the version's policy", async () => {
  const fork = await host.denvd.fork(deployed.version.id, { name: "egress-fork" });
  try {
    assert.match(await fetchIn(fork.stack.id, "http://pkg.mirror.test/"), /^200 /);
    assert.match(await fetchIn(fork.stack.id, "http://other.mirror.test/"), /^403 /);
    assert.deepEqual(
      host.denvd.egressLog(fork.stack.id).records.map((r) => r.destination),
      ["pkg.mirror.test:80", "other.mirror.test:80"],
      "each environment its own log",
    );
  } finally {
    await host.denvd.destroy(fork.stack.id);
  }
});

test("the policy changes while the environment runs: the next request follows it, and a tunnel it no longer allows is closed", async () => {
  const id = deployed.stack.id;
  // A tunnel held open by a box process while the policy narrows under it: it marks the moment
  // its tunnel carries bytes, then waits for what comes next.
  const holder = host.denvd.exec(id, "box", {
    command: [
      "python3",
      "-c",
      `
import socket
s = socket.create_connection(("denv-egress", 3128), timeout=300)
s.sendall(b"CONNECT ${net.address}:7000 HTTP/1.1\\r\\n\\r\\n")
print(s.recv(100).split(b"\\r\\n")[0].decode(), flush=True)
s.sendall(b"x"); s.recv(10)
open("/tmp/tunnel-open", "w").close()
print("closed" if s.recv(10) == b"" else "data", flush=True)
`,
    ],
  });
  await waitFor(
    "the tunnel to carry bytes",
    async () =>
      (await host.denvd.exec(id, "box", { command: ["test", "-f", "/tmp/tunnel-open"] })).exitCode === 0,
  );
  const changed = await host.denvd.setEgress(id, { allow: ["other.mirror.test"], deny: [] });
  assert.equal(changed.closed, 1);
  assert.match((await holder).stdout.toString(), /^HTTP\/1\.1 200 Connection Established\nclosed\n$/);
  assert.match(await fetchIn(id, "http://pkg.mirror.test/"), /^403 /);
  assert.match(await fetchIn(id, "http://other.mirror.test/"), /^200 /);
  assert.deepEqual(host.denvd.stack(id).egressPolicy, { allow: ["other.mirror.test"], deny: [] });
  const closed = host.denvd
    .egressLog(id)
    .records.find((r) => r.destination === `${net.address}:7000` && r.error);
  assert.match(closed?.error ?? "", /egress policy changed/);
  await assert.rejects(
    host.denvd.setEgress(id, { allow: ["*"], deny: [] }),
    /allow\[0\]: "\*": "\*" alone is every name/,
  );
});

test("a version taken after a change keeps it: its forks follow it, and a rollback to an earlier version takes that one's again", async () => {
  const id = deployed.stack.id;
  const { version } = await host.denvd.snapshot(id);
  const fork = await host.denvd.fork(version.id, { name: "egress-changed" });
  try {
    assert.match(await fetchIn(fork.stack.id, "http://other.mirror.test/"), /^200 /);
    assert.match(await fetchIn(fork.stack.id, "http://pkg.mirror.test/"), /^403 /);
  } finally {
    await host.denvd.destroy(fork.stack.id);
  }
  await host.denvd.rollback(id, deployed.version.id);
  assert.equal(host.denvd.stack(id).egressPolicy, undefined);
  assert.match(await fetchIn(id, "http://pkg.mirror.test/"), /^200 /);
  assert.match(await fetchIn(id, "http://other.mirror.test/"), /^403 /);
});

test("the gateway holds no capability and is nothing the agent can exec into; destroy removes it and its socket", async () => {
  const id = deployed.stack.id;
  const gateways = await host.docker.listContainers({
    filters: JSON.stringify({ label: [`dev.denv.environment=${id}`, "dev.denv.service=denv-egress"] }),
  });
  assert.equal(gateways.length, 1);
  const info = await host.docker.getContainer(gateways[0]?.Id as string).inspect();
  assert.deepEqual(info.HostConfig.CapDrop, ["ALL"]);
  assert.equal(info.HostConfig.ReadonlyRootfs, true);
  await assert.rejects(host.denvd.exec(id, "denv-egress", { command: ["true"] }));
  const relay = join(host.stateDir, "egress", id, "relay");
  assert.ok(existsSync(relay));
  await host.denvd.destroy(id);
  assert.ok(!existsSync(relay));
  const left = await host.docker.listContainers({
    all: true,
    filters: JSON.stringify({ label: [`dev.denv.environment=${id}`] }),
  });
  assert.equal(left.length, 0);
});
