/**
 * Secrets the server must use again later (a cloud provider's API token), encrypted at rest with
 * AES-256-GCM. The key is DENV_SECRET_KEY (32 bytes, base64) or, by default, a random key the
 * server creates once in its data directory (mode 0600): a copy of the store alone does not reveal
 * the tokens. (API keys, join tokens and host secrets are only ever compared, so they are hashed.)
 */
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DenvError } from "@denv/protocol";

const SEALED_TEXT = "sealed:v1:";

export class SecretBox {
  private readonly key: Buffer;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new DenvError("invalid_argument", "the secret key must be 32 bytes");
    this.key = key;
  }

  /** DENV_SECRET_KEY, else <dataDir>/secret.key (created on first use). */
  static open(dataDir: string, envKey = process.env.DENV_SECRET_KEY): SecretBox {
    if (envKey) return new SecretBox(Buffer.from(envKey, "base64"));
    const path = join(dataDir, "secret.key");
    if (!existsSync(path)) {
      mkdirSync(dataDir, { recursive: true });
      writeFileSync(path, randomBytes(32).toString("base64"), { mode: 0o600, flag: "wx" });
    }
    chmodSync(path, 0o600);
    return new SecretBox(Buffer.from(readFileSync(path, "utf8").trim(), "base64"));
  }

  /**
   * Text kept at rest that may hold a team's secrets (an uploaded .env and compose file, a resolved
   * spec with its interpolated values): "sealed:v1:" + the sealed form. Null stays null.
   */
  sealText(plain: string): string;
  sealText(plain: string | null): string | null;
  sealText(plain: string | null): string | null {
    return plain === null ? null : `${SEALED_TEXT}${this.seal(plain)}`;
  }

  /** Opens sealTexted text; text stored before sealing (no prefix) is returned as it is. */
  openText(stored: string): string;
  openText(stored: string | null): string | null;
  openText(stored: string | null): string | null {
    if (stored === null) return null;
    return stored.startsWith(SEALED_TEXT) ? this.open(stored.slice(SEALED_TEXT.length)) : stored;
  }

  static isSealedText(stored: string): boolean {
    return stored.startsWith(SEALED_TEXT);
  }

  /** A key for one purpose, derived from this one (HMAC-SHA256 of the label): the same on every replica. */
  derive(label: string): string {
    return createHmac("sha256", this.key).update(label).digest("base64url");
  }

  /** "v1:" + base64(iv | tag | ciphertext). */
  seal(plain: string): string {
    const iv = randomBytes(12);
    const c = createCipheriv("aes-256-gcm", this.key, iv);
    const body = Buffer.concat([c.update(plain, "utf8"), c.final()]);
    return `v1:${Buffer.concat([iv, c.getAuthTag(), body]).toString("base64")}`;
  }

  open(sealed: string): string {
    if (!sealed.startsWith("v1:"))
      throw new DenvError("internal", "an encrypted secret has an unknown format");
    const raw = Buffer.from(sealed.slice(3), "base64");
    const d = createDecipheriv("aes-256-gcm", this.key, raw.subarray(0, 12));
    d.setAuthTag(raw.subarray(12, 28));
    try {
      return Buffer.concat([d.update(raw.subarray(28)), d.final()]).toString("utf8");
    } catch {
      throw new DenvError(
        "internal",
        "a stored secret cannot be decrypted with this server's key (DENV_SECRET_KEY changed?)",
      );
    }
  }
}
