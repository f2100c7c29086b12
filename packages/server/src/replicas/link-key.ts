/** The key replicas present to each other's /v1/replicas/link (peer-links.ts). */
import { createHash, timingSafeEqual } from "node:crypto";
import type { SecretBox } from "../clouds/secret-box.ts";

export function linkKey(secrets: SecretBox): string {
  return secrets.derive("denv replica link v1");
}

/** Compares two keys in time that does not depend on where they differ (hashed to one length). */
export function constantTimeEqual(a: string, b: string): boolean {
  const h = (s: string) => createHash("sha256").update(s).digest();
  return timingSafeEqual(h(a), h(b)) && a.length > 0;
}
