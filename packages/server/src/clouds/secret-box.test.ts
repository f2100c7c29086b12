import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { userData } from "./provisioner.ts";
import { SecretBox } from "./secret-box.ts";

test("a sealed secret opens with the same key only, and tampering is detected", () => {
  const box = new SecretBox(randomBytes(32));
  const sealed = box.seal("hz-token-123");
  assert.match(sealed, /^v1:/);
  assert.equal(sealed.includes("hz-token-123"), false);
  assert.notEqual(box.seal("hz-token-123"), sealed, "a fresh IV each time");
  assert.equal(box.open(sealed), "hz-token-123");
  assert.throws(() => new SecretBox(randomBytes(32)).open(sealed), /cannot be decrypted/);
  const raw = Buffer.from(sealed.slice(3), "base64");
  raw[raw.length - 1] = (raw[raw.length - 1] as number) ^ 1;
  assert.throws(() => box.open(`v1:${raw.toString("base64")}`), /cannot be decrypted/);
  assert.throws(() => new SecretBox(randomBytes(16)), /32 bytes/);
});

test("without DENV_SECRET_KEY the key is made once in the data directory, owner-only", () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-secret-"));
  try {
    const a = SecretBox.open(dir, undefined);
    assert.equal(statSync(join(dir, "secret.key")).mode & 0o777, 0o600);
    assert.equal(SecretBox.open(dir, undefined).open(a.seal("x")), "x", "the same key next start");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("cloud-init user data quotes what it passes to the installer", () => {
  const u = userData({ serverUrl: "https://denv.example.com", token: "djt_a'b", name: "denv-1" });
  assert.match(u, /^#!\/bin\/sh\n/);
  assert.ok(u.includes("--token 'djt_a'\\''b'"), u);
  assert.ok(u.includes("curl -fsSL 'https://denv.example.com/install.sh' | sh -s --"));
});
