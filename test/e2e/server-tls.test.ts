/** `denv server` over TLS when given a certificate: the API answers over HTTPS, and plain HTTP does not. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { startServer } from "@denv/server";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";

test("with --tls-cert and --tls-key the API is served over HTTPS", async () => {
  const dir = await mkdtemp(join(tmpdir(), "denv-tls-"));
  const cert = join(dir, "cert.pem");
  const key = join(dir, "key.pem");
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      key,
      "-out",
      cert,
      "-days",
      "1",
      "-subj",
      "/CN=127.0.0.1",
      "-addext",
      "subjectAltName=IP:127.0.0.1",
    ],
    { stdio: "ignore" },
  );
  const server = await startServer({
    dataDir: join(dir, "data"),
    tls: { certPath: cert, keyPath: key },
    fetchAllow: LOCAL_REGISTRY,
    adminKey: "dk_tls_test",
  });
  try {
    assert.match(server.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    const body = await new Promise<string>((resolve, reject) => {
      const req = request(
        `${server.url}/v1/hosts`,
        { ca: readFileSync(cert), headers: { authorization: "Bearer dk_tls_test" } },
        (res) => {
          let data = "";
          res.on("data", (c: Buffer) => {
            data += c.toString();
          });
          res.on("end", () =>
            res.statusCode === 200 ? resolve(data) : reject(new Error(`HTTP ${res.statusCode}`)),
          );
        },
      );
      req.on("error", reject);
      req.end();
    });
    assert.deepEqual(JSON.parse(body), { hosts: [] });
    await assert.rejects(fetch(server.url.replace("https", "http")));
  } finally {
    await server.close();
    await rm(dir, { recursive: true, force: true });
  }
});
