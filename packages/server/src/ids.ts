import { createHash, randomBytes } from "node:crypto";

/** Ids look like the seed's: ver_…, env_…, dep_…; 12 hex digits of randomness. */
export const newId = (prefix: string) => `${prefix}_${randomBytes(6).toString("hex")}`;

/** A secret shown once: a prefix people can recognise, then 32 random bytes. */
export const newSecret = (prefix: string) => `${prefix}_${randomBytes(32).toString("base64url")}`;

/** Secrets are high-entropy, so one sha256 is enough to store them safely. */
export const hashSecret = (secret: string) => createHash("sha256").update(secret).digest("hex");

export const now = () => new Date().toISOString();
