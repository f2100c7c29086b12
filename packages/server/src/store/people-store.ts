/**
 * People: users with an email and a password (scrypt), their memberships of teams with a role, and
 * their console sessions. A session is a cookie's token plus a CSRF token, both stored as sha256
 * (high-entropy secrets); each request of a session acts in one team with the member's role.
 */
import { DenvError } from "@denv/protocol";
import type { Insertable, Selectable } from "kysely";
import { hashSecret, newId, newSecret, now } from "../ids.ts";
import { hashPassword, verifyPassword } from "../people/password-hash.ts";
import type { Store } from "./open-store.ts";
import type { InvitationsTable, SessionsTable } from "./schema.ts";
import { createTeam } from "./team-store.ts";

export const ROLES = ["admin", "member", "read-only"] as const;
export type Role = (typeof ROLES)[number];

/** 12 hours of use; a person signs in again after that. */
export const SESSION_TTL_MS = 12 * 3600_000;

export const normalizeEmail = (email: string) => email.trim().toLowerCase();

/**
 * A new person: with a team of their own, whose admin they are, or (invited) in the team that
 * invited them with the invitation's role.
 */
export async function signUp(
  store: Store,
  input: { email: string; password: string; teamName: string; joinTeam?: { id: string; role: Role } },
): Promise<{ userId: string; teamId: string }> {
  const email = normalizeEmail(input.email);
  if (await store.selectFrom("users").select("id").where("email", "=", email).executeTakeFirst())
    throw new DenvError("conflict", `${email} already has an account: sign in instead`);
  const userId = newId("usr");
  const password_hash = await hashPassword(input.password);
  const teamId = input.joinTeam?.id ?? (await createTeam(store, input.teamName));
  // The email is unique in the table: of two sign-ups racing, the second fails here.
  await store
    .insertInto("users")
    .values({ id: userId, email, password_hash, created_at: now() })
    .execute()
    .catch(() => {
      throw new DenvError("conflict", `${email} already has an account: sign in instead`);
    });
  await store
    .insertInto("memberships")
    .values({ user_id: userId, team_id: teamId, role: input.joinTeam?.role ?? "admin", created_at: now() })
    .execute();
  return { userId, teamId };
}

/**
 * The person whose email and password these are, or unauthenticated. An unknown email costs the
 * same hash as a wrong password, so the answer's time does not tell which emails have accounts.
 */
export async function checkPassword(store: Store, emailIn: string, password: string): Promise<string> {
  const user = await store
    .selectFrom("users")
    .select(["id", "password_hash"])
    .where("email", "=", normalizeEmail(emailIn))
    .executeTakeFirst();
  unknownUserHash ??= hashPassword(newSecret("unknown"));
  const ok = await verifyPassword(password, user?.password_hash ?? (await unknownUserHash));
  if (!user || !ok) throw new DenvError("unauthenticated", "that email and password do not match an account");
  return user.id;
}

/** A hash of a random password, made once: what an unknown email is checked against. */
let unknownUserHash: Promise<string> | undefined;

export async function membershipsOf(
  store: Store,
  userId: string,
): Promise<{ team_id: string; team_name: string; role: Role }[]> {
  const rows = await store
    .selectFrom("memberships")
    .innerJoin("teams", "teams.id", "memberships.team_id")
    .select(["memberships.team_id", "teams.name as team_name", "memberships.role"])
    .where("memberships.user_id", "=", userId)
    .orderBy("memberships.created_at")
    .execute();
  return rows.map((r) => ({ ...r, role: r.role as Role }));
}

export async function roleIn(store: Store, userId: string, teamId: string): Promise<Role | null> {
  const m = await store
    .selectFrom("memberships")
    .select("role")
    .where("user_id", "=", userId)
    .where("team_id", "=", teamId)
    .executeTakeFirst();
  return (m?.role as Role | undefined) ?? null;
}

/** A session in the person's first team (or the one given): the cookie's token and the CSRF token. */
export async function createSession(
  store: Store,
  userId: string,
  teamId?: string,
): Promise<{ token: string; csrf: string; teamId: string; expiresAt: string }> {
  const teams = await membershipsOf(store, userId);
  const team = teamId ? teams.find((t) => t.team_id === teamId) : teams[0];
  if (!team) throw new DenvError("forbidden", "this account is not a member of that team");
  const token = newSecret("dss");
  const csrf = newSecret("dcs");
  const expiresAt = new Date(Date.now() + SESSION_TTL_MS).toISOString();
  await store
    .insertInto("sessions")
    .values({
      id: newId("ses"),
      user_id: userId,
      team_id: team.team_id,
      token_hash: hashSecret(token),
      csrf_hash: hashSecret(csrf),
      created_at: now(),
      expires_at: expiresAt,
    })
    .execute();
  return { token, csrf, teamId: team.team_id, expiresAt };
}

/** The live session this cookie token is, or undefined (unknown or expired). */
export async function findSession(
  store: Store,
  token: string,
): Promise<Selectable<SessionsTable> | undefined> {
  const s = await store
    .selectFrom("sessions")
    .selectAll()
    .where("token_hash", "=", hashSecret(token))
    .executeTakeFirst();
  if (!s || s.expires_at <= now()) return undefined;
  return s;
}

export async function endSession(store: Store, sessionId: string): Promise<void> {
  await store.deleteFrom("sessions").where("id", "=", sessionId).execute();
}

export async function userEmail(store: Store, userId: string): Promise<string | null> {
  return (
    (await store.selectFrom("users").select("email").where("id", "=", userId).executeTakeFirst())?.email ??
    null
  );
}

/** A session's end, by its id. */
export async function sessionExpiry(store: Store, sessionId: string): Promise<string | undefined> {
  return (
    await store.selectFrom("sessions").select("expires_at").where("id", "=", sessionId).executeTakeFirst()
  )?.expires_at;
}

// --- A team's API keys, members and invitations: each read and change scoped to the team given. ---

/** The team's keys, oldest first, with their person's email; only `userId`'s when one is given. */
export function teamKeys(store: Store, teamId: string, onlyOfUserId: string | null) {
  let q = store
    .selectFrom("api_keys")
    .leftJoin("users", "users.id", "api_keys.user_id")
    .select([
      "api_keys.id",
      "api_keys.name",
      "api_keys.prefix",
      "api_keys.role",
      "api_keys.created_at",
      "users.email as user_email",
    ])
    .where("api_keys.team_id", "=", teamId)
    .orderBy("api_keys.created_at");
  if (onlyOfUserId !== null) q = q.where("api_keys.user_id", "=", onlyOfUserId);
  return q.execute();
}

export function teamKey(store: Store, teamId: string, keyId: string) {
  return store
    .selectFrom("api_keys")
    .select(["id", "user_id"])
    .where("id", "=", keyId)
    .where("team_id", "=", teamId)
    .executeTakeFirst();
}

export async function deleteTeamKey(store: Store, teamId: string, keyId: string): Promise<void> {
  await store.deleteFrom("api_keys").where("id", "=", keyId).where("team_id", "=", teamId).execute();
}

/** The team's members with their emails, oldest first. */
export function teamMembers(store: Store, teamId: string) {
  return store
    .selectFrom("memberships")
    .innerJoin("users", "users.id", "memberships.user_id")
    .select(["memberships.user_id", "users.email", "memberships.role", "memberships.created_at"])
    .where("memberships.team_id", "=", teamId)
    .orderBy("memberships.created_at")
    .execute();
}

export function teamMember(store: Store, teamId: string, userId: string) {
  return store
    .selectFrom("memberships")
    .innerJoin("users", "users.id", "memberships.user_id")
    .select(["memberships.user_id", "users.email", "memberships.created_at", "memberships.role"])
    .where("memberships.team_id", "=", teamId)
    .where("memberships.user_id", "=", userId)
    .executeTakeFirst();
}

/** The team's admins' user ids. */
export async function teamAdmins(store: Store, teamId: string): Promise<string[]> {
  const rows = await store
    .selectFrom("memberships")
    .select("user_id")
    .where("team_id", "=", teamId)
    .where("role", "=", "admin")
    .execute();
  return rows.map((r) => r.user_id);
}

/** A member's role, and their keys' (a key carries its person's role: a demotion reaches it). */
export async function setMemberRole(store: Store, teamId: string, userId: string, role: Role): Promise<void> {
  await store
    .updateTable("memberships")
    .set({ role })
    .where("team_id", "=", teamId)
    .where("user_id", "=", userId)
    .execute();
  await store
    .updateTable("api_keys")
    .set({ role })
    .where("team_id", "=", teamId)
    .where("user_id", "=", userId)
    .execute();
}

/** A member out of the team, with their keys and sessions for it. */
export async function removeMember(store: Store, teamId: string, userId: string): Promise<void> {
  for (const table of ["memberships", "api_keys", "sessions"] as const)
    await store.deleteFrom(table).where("team_id", "=", teamId).where("user_id", "=", userId).execute();
}

/** A membership of a team (none made twice). */
export async function addMembership(
  store: Store,
  userId: string,
  teamId: string,
  role: string,
): Promise<void> {
  await store
    .insertInto("memberships")
    .values({ user_id: userId, team_id: teamId, role, created_at: now() })
    .onConflict((oc) => oc.columns(["user_id", "team_id"]).doNothing())
    .execute();
}

export async function insertInvitation(store: Store, row: Insertable<InvitationsTable>): Promise<void> {
  await store.insertInto("invitations").values(row).execute();
}

export function teamInvitations(store: Store, teamId: string) {
  return store
    .selectFrom("invitations")
    .select(["id", "email", "role", "created_at", "expires_at", "accepted_at"])
    .where("team_id", "=", teamId)
    .orderBy("created_at")
    .execute();
}

/** An invitation by its token's hash (open or not: the caller says which it takes). */
export function invitationByTokenHash(store: Store, tokenHash: string) {
  return store.selectFrom("invitations").selectAll().where("token_hash", "=", tokenHash).executeTakeFirst();
}

/**
 * Takes an open invitation for one person: true when this call took it, false when another had
 * already (two people opening one link at once: one of them gets it).
 */
export async function takeInvitation(store: Store, invitationId: string): Promise<boolean> {
  const r = await store
    .updateTable("invitations")
    .set({ accepted_at: now() })
    .where("id", "=", invitationId)
    .where("accepted_at", "is", null)
    .executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}

/** Gives an invitation back when what it was taken for failed (the account could not be made). */
export async function releaseInvitation(store: Store, invitationId: string): Promise<void> {
  await store.updateTable("invitations").set({ accepted_at: null }).where("id", "=", invitationId).execute();
}
