/**
 * Device authorization (RFC 8628's shape) for `denv login` without a key in hand: the CLI asks for
 * a code, a signed-in person approves its short user code in the console, and the CLI's next poll
 * trades the device code for a new API key of that person's team, made there and then (so no key
 * ever waits in the store). The device code is stored as sha256; a code is used once.
 */
import { randomInt } from "node:crypto";
import { DenvError } from "@denv/protocol";
import { hashSecret, newId, newSecret, now } from "../ids.ts";
import type { Store } from "./open-store.ts";
import { type Role, roleIn } from "./people-store.ts";
import { createApiKeyRecord } from "./team-store.ts";

/** Ten minutes to approve. */
export const DEVICE_CODE_TTL_MS = 10 * 60_000;
/** How often the CLI may poll; polling faster is answered slow_down. */
export const DEVICE_POLL_INTERVAL_MS = 2000;
/** No vowels or look-alikes (RFC 8628 §6.1): 20 letters, 8 of them ≈ 34 bits. */
const USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ";

function userCode(): string {
  const c = Array.from({ length: 8 }, () => USER_CODE_ALPHABET[randomInt(USER_CODE_ALPHABET.length)]).join(
    "",
  );
  return `${c.slice(0, 4)}-${c.slice(4)}`;
}

/** What a person may type: case and the dash do not matter. */
export function normalizeUserCode(input: string): string | null {
  const c = input.toUpperCase().replace(/[^A-Z]/g, "");
  if (c.length !== 8 || [...c].some((x) => !USER_CODE_ALPHABET.includes(x))) return null;
  return `${c.slice(0, 4)}-${c.slice(4)}`;
}

export async function createDeviceCode(
  store: Store,
  clientName: string,
): Promise<{ deviceCode: string; userCode: string; expiresAt: string }> {
  const deviceCode = newSecret("ddc");
  const code = userCode();
  const expiresAt = new Date(Date.now() + DEVICE_CODE_TTL_MS).toISOString();
  await store
    .insertInto("device_codes")
    .values({
      id: newId("dev"),
      device_code_hash: hashSecret(deviceCode),
      user_code: code,
      client_name: clientName,
      status: "pending",
      user_id: null,
      team_id: null,
      key_id: null,
      created_at: now(),
      expires_at: expiresAt,
      last_poll_at: null,
    })
    .execute();
  return { deviceCode, userCode: code, expiresAt };
}

/** A pending request by its user code, for the approval page; not_found when unknown or spent. */
export async function pendingDevice(store: Store, code: string) {
  const normal = normalizeUserCode(code);
  const row = normal
    ? await store.selectFrom("device_codes").selectAll().where("user_code", "=", normal).executeTakeFirst()
    : undefined;
  const live = row !== undefined && row.status === "pending" && row.expires_at > now();
  if (!live || !row)
    throw new DenvError(
      "not_found",
      "no pending login has that code: it may have expired (10 minutes) or been used",
    );
  return row;
}

/** The person's answer: approved in the team they act in, with their role there; or denied. */
export async function answerDevice(
  store: Store,
  code: string,
  who: { userId: string; teamId: string },
  approve: boolean,
): Promise<void> {
  const row = await pendingDevice(store, code);
  const r = await store
    .updateTable("device_codes")
    .set(approve ? { status: "approved", user_id: who.userId, team_id: who.teamId } : { status: "denied" })
    .where("id", "=", row.id)
    .where("status", "=", "pending")
    .executeTakeFirst();
  if (Number(r.numUpdatedRows) !== 1) throw new DenvError("conflict", "that login was answered already");
}

export type DevicePoll =
  | { state: "pending" | "slow_down" | "denied" | "expired" }
  | { state: "approved"; apiKey: string; keyId: string; teamId: string; role: Role };

/**
 * The CLI's poll: pending, slow_down (faster than the interval), denied, expired, or — once only —
 * approved with a new key named after the client. Unknown device codes are not_found.
 */
export async function pollDevice(store: Store, deviceCode: string): Promise<DevicePoll> {
  const row = await store
    .selectFrom("device_codes")
    .selectAll()
    .where("device_code_hash", "=", hashSecret(deviceCode))
    .executeTakeFirst();
  if (!row || row.status === "used")
    throw new DenvError("not_found", "this device code is not valid (or was used)");
  if (row.expires_at <= now()) return { state: "expired" };
  if (row.status === "denied") return { state: "denied" };
  const last = row.last_poll_at ? Date.parse(row.last_poll_at) : 0;
  await store.updateTable("device_codes").set({ last_poll_at: now() }).where("id", "=", row.id).execute();
  if (row.status === "pending")
    return Date.now() - last < DEVICE_POLL_INTERVAL_MS / 2 ? { state: "slow_down" } : { state: "pending" };
  // approved: taken by exactly one poll, which makes the key.
  const took = await store
    .updateTable("device_codes")
    .set({ status: "used" })
    .where("id", "=", row.id)
    .where("status", "=", "approved")
    .executeTakeFirst();
  if (Number(took.numUpdatedRows) !== 1) throw new DenvError("not_found", "this device code was used");
  const userId = row.user_id as string;
  const teamId = row.team_id as string;
  // The role now, not at approval: a member demoted in between gets the lesser key.
  const role = await roleIn(store, userId, teamId);
  if (!role) return { state: "denied" };
  const key = await createApiKeyRecord(store, teamId, row.client_name, false, undefined, { userId, role });
  await store.updateTable("device_codes").set({ key_id: key.id }).where("id", "=", row.id).execute();
  return { state: "approved", apiKey: key.secret, keyId: key.id, teamId, role };
}
