import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { AcmeCertificates, dnsHook } from "./acme-certificates.ts";

test("the DNS hook is run as COMMAND set|unset NAME VALUE; a failing one says which call failed", async () => {
  await dnsHook("/bin/true").set("_acme-challenge.denv.test", "v");
  await assert.rejects(
    dnsHook("/bin/false").unset("_acme-challenge.denv.test", "v"),
    /the ACME DNS hook \/bin\/false unset _acme-challenge\.denv\.test failed/,
  );
});

test("nothing stored (or nothing readable) is no certificate to serve", () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-acme-unit-"));
  try {
    const certs = new AcmeCertificates(dir, "denv.test", {
      directoryUrl: "http://127.0.0.1:1/directory",
      email: "a@b",
      dns: dnsHook("/bin/true"),
    });
    assert.equal(certs.stored(), null);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
