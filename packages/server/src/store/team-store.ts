/** Teams, their API keys (stored as hashes) and the join tokens they mint for hosts. */

import type { Selectable } from "kysely";
import { hashSecret, newId, newSecret, now } from "../ids.ts";
import type { Store } from "./open-store.ts";
import type { ApiKeysTable } from "./schema.ts";

export async function createTeam(store: Store, name: string, admin = false): Promise<string> {
  const id = newId("team");
  await store
    .insertInto("teams")
    .values({ id, name, admin: admin ? 1 : 0, created_at: now() })
    .execute();
  return id;
}

export async function adminTeamId(store: Store): Promise<string | null> {
  const t = await store.selectFrom("teams").select("id").where("admin", "=", 1).executeTakeFirst();
  return t?.id ?? null;
}

export async function anyTeam(store: Store): Promise<boolean> {
  return (await store.selectFrom("teams").select("id").executeTakeFirst()) !== undefined;
}

/** A new team key (the given one, or a fresh secret); returns it: only its hash is kept. */
export async function createApiKey(
  store: Store,
  teamId: string,
  name: string,
  admin: boolean,
  key?: string,
): Promise<string> {
  return (await createApiKeyRecord(store, teamId, name, admin, key)).secret;
}

/** A new API key, a team's or (with `person`) one made for a member with their role; its id too. */
export async function createApiKeyRecord(
  store: Store,
  teamId: string,
  name: string,
  admin: boolean,
  key?: string,
  person?: { userId: string | null; role: string },
): Promise<{ id: string; secret: string }> {
  const secret = key ?? newSecret("dk");
  const id = newId("key");
  await store
    .insertInto("api_keys")
    .values({
      id,
      team_id: teamId,
      name,
      key_hash: hashSecret(secret),
      prefix: secret.slice(0, 8),
      admin: admin ? 1 : 0,
      created_at: now(),
      user_id: person?.userId ?? null,
      role: person?.role ?? "admin",
    })
    .execute();
  return { id, secret };
}

export function findApiKey(store: Store, key: string): Promise<Selectable<ApiKeysTable> | undefined> {
  return store.selectFrom("api_keys").selectAll().where("key_hash", "=", hashSecret(key)).executeTakeFirst();
}

/** A single-use token a host trades for its secret; returns the token (only its hash is kept). */
export async function createJoinToken(
  store: Store,
  teamId: string,
  ttlMs: number,
): Promise<{ token: string; expiresAt: string }> {
  const token = newSecret("djt");
  const expiresAt = new Date(Date.now() + ttlMs).toISOString();
  await store
    .insertInto("join_tokens")
    .values({
      id: newId("jt"),
      team_id: teamId,
      token_hash: hashSecret(token),
      expires_at: expiresAt,
      used_at: null,
      host_id: null,
    })
    .execute();
  return { token, expiresAt };
}

/** An API key's record by its id (a caller inside the server names its key so). */
export function apiKeyById(store: Store, keyId: string): Promise<Selectable<ApiKeysTable> | undefined> {
  return store.selectFrom("api_keys").selectAll().where("id", "=", keyId).executeTakeFirst();
}

/** The team's keys: their ids and roles (what an E2B access token may have been made for). */
export function teamKeyRoles(store: Store, teamId: string) {
  return store
    .selectFrom("api_keys")
    .select(["id", "team_id", "role"])
    .where("team_id", "=", teamId)
    .execute();
}
