/**
 * The ports listener's wildcard certificate from an ACME CA over DNS-01, with a local ACME double
 * (acme-double.ts, never a public CA) that checks the challenge's TXT record through a dnsmasq the
 * test runs on loopback: the record is published by the DNS hook the server is given, as an
 * administrator's would update their zone. Issued on the first start, reused on the next, renewed
 * when near its end; a challenge the record does not answer fails the start, saying why.
 */
import assert from "node:assert/strict";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { Resolver } from "node:dns/promises";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { connect } from "node:tls";
import { type AcmeDns, startServer } from "@denv/server";
import { type AcmeDouble, startAcmeDouble } from "../doubles/acme-double.ts";
import { freePort } from "../harness/net.ts";

let dir: string;
let ca: string;
let double: AcmeDouble;
let dnsmasq: ChildProcess | undefined;
let dnsPort: number;
const records = new Map<string, Set<string>>();

/** dnsmasq serves the records now held (it reads them only at start, so it is started anew). */
async function serveRecords(): Promise<void> {
  dnsmasq?.kill();
  if (dnsmasq) await new Promise((r) => dnsmasq?.once("exit", r));
  const txt = [...records].flatMap(([name, values]) => [...values].map((v) => `--txt-record=${name},${v}`));
  dnsmasq = spawn(
    "dnsmasq",
    [
      "--keep-in-foreground",
      "--conf-file=/dev/null",
      "--no-resolv",
      "--no-hosts",
      "--bind-interfaces",
    ].concat([
      "--listen-address=127.0.0.1",
      `--port=${dnsPort}`,
      "--pid-file=",
      "--user=root",
      "--local=/denv.test/",
      ...txt,
    ]),
    { stdio: "ignore" },
  );
  // Until it answers: a name it holds resolves, whatever the machine's load.
  const r = new Resolver({ timeout: 500, tries: 1 });
  r.setServers([`127.0.0.1:${dnsPort}`]);
  for (let i = 0; ; i++) {
    const ok = await r.resolveTxt("probe.denv.test").then(
      () => true,
      // Any answer at all (no such name, here) means it is serving.
      (err: NodeJS.ErrnoException) => ["ENOTFOUND", "ENODATA", "EREFUSED"].includes(err.code ?? ""),
    );
    if (ok) return;
    if (i > 600 || dnsmasq.exitCode !== null) throw new Error("dnsmasq did not answer");
    await new Promise((res) => setTimeout(res, 50));
  }
}

/** The hook an administrator gives: publishes and withdraws the challenge's TXT record. */
const zone = (mangle = (v: string) => v): AcmeDns => ({
  async set(name, value) {
    records.set(name, new Set([...(records.get(name) ?? []), mangle(value)]));
    await serveRecords();
  },
  async unset(name, value) {
    records.get(name)?.delete(mangle(value));
    await serveRecords();
  },
});

/** The certificate the ports listener shows a client asking for a name under the domain. */
function served(url: string): Promise<{ fingerprint: string; authorized: boolean; names: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect(
      { host: u.hostname, port: Number(u.port), servername: "3000-abc123.denv.test", ca: readFileSync(ca) },
      () => {
        const c = s.getPeerCertificate();
        resolve({ fingerprint: c.fingerprint256, authorized: s.authorized, names: c.subjectaltname ?? "" });
        s.end();
      },
    );
    s.once("error", reject);
  });
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "denv-acme-"));
  execFileSync(
    "openssl",
    ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem"].concat([
      "-days",
      "2",
      "-subj",
      "/CN=denv ACME test CA",
    ]),
    { cwd: dir, stdio: "ignore" },
  );
  ca = join(dir, "ca.pem");
  dnsPort = await freePort();
  await serveRecords();
  double = await startAcmeDouble({
    dir,
    caCert: ca,
    caKey: join(dir, "ca.key"),
    resolver: `127.0.0.1:${dnsPort}`,
  });
});

after(async () => {
  await double?.close();
  dnsmasq?.kill();
  await rm(dir, { recursive: true, force: true });
});

const start = async (dataDir: string, dns: AcmeDns, renewBeforeMs?: number) => {
  const portsPort = await freePort();
  return startServer({
    dataDir,
    adminKey: "dk_acme_test",
    portsPort,
    ingress: { domain: `denv.test:${portsPort}` },
    acme: {
      directoryUrl: double.directoryUrl,
      email: "ops@denv.test",
      dns,
      ...(renewBeforeMs ? { renewBeforeMs } : {}),
    },
  });
};

test("the first start has *.DOMAIN issued over DNS-01; the next reuses it; one near its end is renewed", async () => {
  const dataDir = join(dir, "data");
  const first = await start(dataDir, zone());
  const issued = await served(first.portsUrl).finally(() => first.close());
  assert.equal(issued.authorized, true, "the listener's certificate chains to the test CA");
  assert.match(issued.names, /DNS:\*\.denv\.test/);
  assert.equal(double.finalized(), 1);
  assert.equal(records.get("_acme-challenge.denv.test")?.size ?? 0, 0, "the challenge's record is withdrawn");
  const stored = new X509Certificate(readFileSync(join(dataDir, "ingress-tls", "cert.pem")));
  assert.equal(stored.fingerprint256, issued.fingerprint);
  assert.equal(readFileSync(join(dataDir, "ingress-tls", "key.pem")).length > 0, true);
  execFileSync("test", [
    "!",
    "-r",
    join(dataDir, "ingress-tls", "key.pem"),
    "-o",
    "-O",
    join(dataDir, "ingress-tls", "key.pem"),
  ]);

  const second = await start(dataDir, zone());
  const again = await served(second.portsUrl).finally(() => second.close());
  assert.equal(again.fingerprint, issued.fingerprint);
  assert.equal(double.finalized(), 1, "a certificate with time left is not asked for again");

  // 90-day certificates, renewed when less than 100 days are left: at once.
  const third = await start(dataDir, zone(), 100 * 86_400_000);
  const renewed = await served(third.portsUrl).finally(() => third.close());
  assert.notEqual(renewed.fingerprint, issued.fingerprint);
  assert.equal(renewed.authorized, true);
  assert.equal(double.finalized(), 2);
});

test("a challenge the zone does not answer fails the start, saying why; nothing is stored", async () => {
  const dataDir = join(dir, "refused");
  const before = double.finalized();
  await assert.rejects(
    start(
      dataDir,
      zone((v) => `${v}-tampered`),
    ),
    /ACME: \*\.denv\.test could not be issued .*(no TXT record|invalid)/s,
  );
  assert.equal(double.finalized(), before);
  assert.throws(() => readFileSync(join(dataDir, "ingress-tls", "cert.pem")), /ENOENT/);
});
