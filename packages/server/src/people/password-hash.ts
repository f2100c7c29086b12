/**
 * People's passwords, stored as scrypt hashes: `scrypt$N$r$p$salt$hash` (base64url), so the cost can
 * rise later without breaking the hashes already stored. Passwords are low-entropy, unlike API keys
 * (one sha256 is enough for those): scrypt's memory-hard cost is what makes a stolen table slow to
 * guess from.
 */
import { randomBytes, scrypt, timingSafeEqual } from "node:crypto";

/** 2^15 × 8 × 128 bytes = 32 MiB and ≈ 60 ms on this machine per hash. */
const COST = { N: 2 ** 15, r: 8, p: 1 };
const KEY_BYTES = 32;
const MAX_MEMORY_BYTES = 64 * 1024 * 1024;
/** Long enough to be worth hashing, short enough that hashing it is not a way to burn CPU. */
export const PASSWORD_MIN_CHARS = 10;
export const PASSWORD_MAX_CHARS = 256;

function derive(password: string, salt: Buffer, cost: typeof COST): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password.normalize("NFKC"), salt, KEY_BYTES, { ...cost, maxmem: MAX_MEMORY_BYTES }, (err, key) =>
      err ? reject(err) : resolve(key),
    ),
  );
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(password, salt, COST);
  return ["scrypt", COST.N, COST.r, COST.p, salt.toString("base64url"), key.toString("base64url")].join("$");
}

/** True when `password` is the one `stored` was made from; a malformed stored value is false. */
export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [kind, n, r, p, salt, hash] = stored.split("$");
  if (kind !== "scrypt" || !salt || !hash) return false;
  const cost = { N: Number(n), r: Number(r), p: Number(p) };
  // Only costs this code could have written: a tampered row cannot ask for unbounded work.
  if (![cost.N, cost.r, cost.p].every(Number.isInteger) || cost.N > 2 ** 17 || cost.r > 16 || cost.p > 4)
    return false;
  const expected = Buffer.from(hash, "base64url");
  if (expected.length !== KEY_BYTES) return false;
  const key = await derive(password, Buffer.from(salt, "base64url"), cost);
  return timingSafeEqual(key, expected);
}
