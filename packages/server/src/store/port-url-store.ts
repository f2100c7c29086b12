/**
 * Port URLs (`port_urls`): each a token's hash, the environment and port it reaches, made by a
 * team and revoked with its environment.
 */
import { hashSecret, newId, now } from "../ids.ts";
import type { Store } from "./open-store.ts";

/** A port URL's record for a token the caller made (and shows once). */
export async function insertPortUrl(
  store: Store,
  o: { teamId: string; environmentId: string; service: string | null; port: number; token: string },
): Promise<void> {
  await store
    .insertInto("port_urls")
    .values({
      id: newId("pu"),
      team_id: o.teamId,
      environment_id: o.environmentId,
      service: o.service,
      port: o.port,
      token_hash: hashSecret(o.token),
      created_at: now(),
    })
    .execute();
}

/** An environment's port URLs, oldest first (never their tokens: only hashes are kept). */
export function environmentPortUrls(
  store: Store,
  environmentId: string,
): Promise<{ id: string; port: number; service: string | null; created_at: string }[]> {
  return store
    .selectFrom("port_urls")
    .select(["id", "port", "service", "created_at"])
    .where("environment_id", "=", environmentId)
    .orderBy("created_at")
    .execute();
}

/** Revokes an environment's port URLs (those to one port, or all); returns how many. */
export async function revokePortUrls(store: Store, environmentId: string, port?: number): Promise<number> {
  let q = store.deleteFrom("port_urls").where("environment_id", "=", environmentId);
  if (port !== undefined) q = q.where("port", "=", port);
  const r = await q.executeTakeFirst();
  return Number(r.numDeletedRows);
}

/** What a token reaches: the port and service, and its environment's state and place. */
export function portUrlByToken(store: Store, token: string) {
  return store
    .selectFrom("port_urls")
    .innerJoin("environments", "environments.id", "port_urls.environment_id")
    .select([
      "port_urls.port",
      "port_urls.service",
      "port_urls.environment_id",
      "environments.idle_pause_s",
      "environments.status",
      "environments.host_id",
      "environments.stack_id",
      "environments.name",
    ])
    .where("port_urls.token_hash", "=", hashSecret(token))
    .executeTakeFirst();
}
