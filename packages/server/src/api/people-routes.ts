/**
 * People and their access: signing up and in (a console session in a cookie), the session's team
 * and role, the team's members and invitations, and API keys listed and revoked per person. A
 * session is a client of /v1 like a key: every other route treats it the same (api-route.ts).
 */

import { randomBytes } from "node:crypto";
import { DenvError } from "@denv/protocol";
import { getCookie } from "hono/cookie";
import { z } from "zod";
import { createInvitation, mayTake, openInvitation } from "../people/invitations.ts";
import {
  clearSessionCookie,
  csrfTokenOf,
  SESSION_COOKIE,
  setSessionCookie,
} from "../people/session-cookie.ts";
import { clientBucketOf } from "../rate-limit.ts";
import {
  addMembership,
  checkPassword,
  createSession,
  deleteTeamKey,
  endSession,
  membershipsOf,
  normalizeEmail,
  type Role,
  releaseInvitation,
  removeMember,
  sessionExpiry,
  setMemberRole,
  signUp,
  takeInvitation,
  teamAdmins,
  teamInvitations,
  teamKey,
  teamKeys,
  teamMember,
  teamMembers,
  userEmail,
} from "../store/people-store.ts";
import { createApiKeyRecord } from "../store/team-store.ts";
import { takeTurn } from "./api-auth.ts";
import type { ApiContext } from "./api-deps.ts";
import { type ApiRoute, route } from "./api-route.ts";
import {
  apiKeySchema,
  invitationBody,
  invitationCreated,
  invitationSchema,
  memberBody,
  memberSchema,
  newKeyBody,
  newKeySchema,
  sessionSchema,
  signInBody,
  signUpBody,
  switchTeamBody,
} from "./people-schemas.ts";
import { ANONYMOUS_JSON_LIMIT_BYTES } from "./request-bodies.ts";

/**
 * Sign-ups, sign-ins and device codes are not keyed: each client address (an IPv6 address by its
 * /64) gets a small budget and, when the attempt names an account, so does the account, from
 * whichever addresses its attempts come.
 */
export function takeAnonymousTurn(c: ApiContext, what: string, account?: string): void {
  const incoming = (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming;
  const address = incoming?.socket?.remoteAddress;
  const who = address ? clientBucketOf(address) : "in-process";
  takeTurn(c, `${what}:${who}`, c.var.deps.anonymousLimiter, "too many attempts from this address");
  if (account !== undefined)
    takeTurn(c, `${what}:${account}`, c.var.deps.accountLimiter, "too many attempts for this account");
}

/** The session answer: who, in which team, with which role, and the CSRF token for changes. */
async function sessionAnswer(
  c: ApiContext,
  userId: string,
  teamId: string,
  token: string,
  expiresAt: string,
) {
  const teams = await membershipsOf(c.var.deps.store, userId);
  const team = teams.find((t) => t.team_id === teamId);
  if (!team) throw new DenvError("unauthenticated", "this account is no longer a member of the team");
  return {
    user: { id: userId, email: (await userEmail(c.var.deps.store, userId)) ?? "" },
    team: { id: team.team_id, name: team.team_name },
    role: team.role,
    teams: teams.map((t) => ({ id: t.team_id, name: t.team_name, role: t.role })),
    csrf_token: csrfTokenOf(token),
    expires_at: expiresAt,
  };
}

async function startSession(c: ApiContext, userId: string, teamId?: string) {
  const s = await createSession(c.var.deps.store, userId, teamId);
  setSessionCookie(c, s.token, s.expiresAt);
  return sessionAnswer(c, userId, s.teamId, s.token, s.expiresAt);
}

/** Only a person signed in to the console (keys cannot approve logins or manage people as a person). */
function person(c: ApiContext): { userId: string; sessionId: string } {
  const { userId, sessionId } = c.var;
  if (!userId || !sessionId)
    throw new DenvError("forbidden", "only a person signed in to the console can do this");
  return { userId, sessionId };
}

/** Takes an open invitation or says it is gone (another took it a moment ago). */
async function take(c: ApiContext, invitationId: string): Promise<void> {
  if (!(await takeInvitation(c.var.deps.store, invitationId)))
    throw new DenvError("not_found", "that invitation is not valid: it may have expired or been used");
}

export const peopleRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/auth/signup",
    name: "auth.signup",
    summary: "Create an account (with a team of its own, or in the team that invited it) and sign in",
    body: signUpBody,
    response: sessionSchema,
    status: 201,
    auth: false,
    bodyLimitBytes: ANONYMOUS_JSON_LIMIT_BYTES,
    handler: async (c, { body }) => {
      takeAnonymousTurn(c, "signup", normalizeEmail(body.email));
      const { store } = c.var.deps;
      if (body.invitation) {
        const inv = await openInvitation(store, body.invitation);
        if (!mayTake(inv, normalizeEmail(body.email)))
          throw new DenvError("forbidden", "that invitation was sent to another email address");
        // Taken before the account is made (a link is one person's), given back if that fails.
        await take(c, inv.id);
        const { userId } = await signUp(store, {
          ...body,
          teamName: "",
          joinTeam: { id: inv.team_id, role: inv.role as Role },
        }).catch(async (err: unknown) => {
          await releaseInvitation(store, inv.id);
          throw err;
        });
        return c.json(await startSession(c, userId, inv.team_id), 201);
      }
      const teamName = body.team_name ?? normalizeEmail(body.email).split("@")[0] ?? "team";
      const { userId, teamId } = await signUp(store, {
        email: body.email,
        password: body.password,
        teamName,
      });
      return c.json(await startSession(c, userId, teamId), 201);
    },
  }),
  route({
    method: "post",
    path: "/v1/auth/login",
    name: "auth.login",
    summary: "Sign in with email and password: a session cookie (HttpOnly, Secure, SameSite=Strict)",
    body: signInBody,
    response: sessionSchema,
    auth: false,
    bodyLimitBytes: ANONYMOUS_JSON_LIMIT_BYTES,
    handler: async (c, { body }) => {
      takeAnonymousTurn(c, "login", normalizeEmail(body.email));
      const userId = await checkPassword(c.var.deps.store, body.email, body.password);
      return c.json(await startSession(c, userId));
    },
  }),
  route({
    method: "get",
    path: "/v1/auth/session",
    name: "auth.session",
    summary: "The signed-in person, their team and role, and the CSRF token for changes",
    response: sessionSchema,
    auth: true,
    handler: async (c) => {
      const { userId } = person(c);
      const token = getCookie(c, SESSION_COOKIE) ?? "";
      const expiresAt = await sessionExpiry(c.var.deps.store, c.var.sessionId ?? "");
      if (!expiresAt) throw new DenvError("unauthenticated", "the session has ended: sign in again");
      return c.json(await sessionAnswer(c, userId, c.var.teamId, token, expiresAt));
    },
  }),
  route({
    method: "post",
    path: "/v1/auth/team",
    name: "auth.switchTeam",
    summary: "Act in another of the person's teams (a new session for it)",
    body: switchTeamBody,
    response: sessionSchema,
    auth: true,
    needs: "read",
    handler: async (c, { body }) => {
      const { userId, sessionId } = person(c);
      const answer = await startSession(c, userId, body.team_id);
      await endSession(c.var.deps.store, sessionId);
      return c.json(answer);
    },
  }),
  route({
    method: "post",
    path: "/v1/auth/logout",
    name: "auth.logout",
    summary: "End the console session",
    response: z.object({ signed_out: z.boolean() }),
    auth: true,
    needs: "read",
    handler: async (c) => {
      const { sessionId } = person(c);
      await endSession(c.var.deps.store, sessionId);
      clearSessionCookie(c);
      return c.json({ signed_out: true });
    },
  }),
  route({
    method: "get",
    path: "/v1/keys",
    name: "keys.list",
    summary: "API keys: a team admin sees the team's, anyone else their own",
    response: z.object({ keys: z.array(apiKeySchema) }),
    auth: true,
    handler: async (c) => {
      const rows = await teamKeys(
        c.var.deps.store,
        c.var.teamId,
        c.var.role === "admin" ? null : (c.var.userId ?? ""),
      );
      return c.json({
        keys: rows.map((k) => ({
          ...k,
          role: k.role as Role,
          user_email: k.user_email ?? null,
          current: k.id === c.var.keyId,
        })),
      });
    },
  }),
  route({
    method: "post",
    path: "/v1/keys",
    name: "keys.create",
    summary:
      "A new API key of this team, with the caller's role (format e2b: `e2b_` and 40 hex digits, the form E2B's SDKs check for); shown once, stored hashed",
    body: newKeyBody,
    response: newKeySchema,
    status: 201,
    auth: true,
    // A key of the caller's own role changes nothing of the team's: a read-only member may make one
    // (as a device login gives them), and it reads only.
    needs: "read",
    handler: async (c, { body }) => {
      // A key is never more than its maker: the same role, and a person's key stays theirs.
      const secret = body.format === "e2b" ? `e2b_${randomBytes(20).toString("hex")}` : undefined;
      const made = await createApiKeyRecord(c.var.deps.store, c.var.teamId, body.name, false, secret, {
        userId: c.var.userId,
        role: c.var.role,
      });
      return c.json(
        { id: made.id, key: made.secret, name: body.name, prefix: made.secret.slice(0, 8), role: c.var.role },
        201,
      );
    },
  }),
  route({
    method: "delete",
    path: "/v1/keys/{id}",
    name: "keys.revoke",
    summary: "Revoke an API key (`current`: the key of this request, as `denv logout` does)",
    response: z.object({ id: z.string(), revoked: z.boolean() }),
    auth: true,
    needs: "read",
    handler: async (c) => {
      const asked = c.req.param("id") ?? "";
      const id = asked === "current" ? c.var.keyId : asked;
      const key = await teamKey(c.var.deps.store, c.var.teamId, id);
      // Another person's key is as unknown as another team's, unless a team admin asks.
      const mine = key && (key.id === c.var.keyId || (key.user_id !== null && key.user_id === c.var.userId));
      if (!key || (!mine && c.var.role !== "admin")) throw new DenvError("not_found", `no API key ${asked}`);
      await deleteTeamKey(c.var.deps.store, c.var.teamId, key.id);
      return c.json({ id: key.id, revoked: true });
    },
  }),
  route({
    method: "get",
    path: "/v1/members",
    name: "members.list",
    summary: "The team's members and their roles",
    response: z.object({ members: z.array(memberSchema) }),
    auth: true,
    handler: async (c) => {
      const rows = await teamMembers(c.var.deps.store, c.var.teamId);
      return c.json({
        members: rows.map((m) => ({
          user_id: m.user_id,
          email: m.email,
          role: m.role as Role,
          since: m.created_at,
        })),
      });
    },
  }),
  route({
    method: "put",
    path: "/v1/members/{id}",
    name: "members.setRole",
    summary: "Change a member's role (team admins)",
    body: memberBody,
    response: memberSchema,
    auth: true,
    needs: "admin",
    handler: async (c, { body }) => {
      const userId = c.req.param("id") ?? "";
      const { store } = c.var.deps;
      const m = await teamMember(store, c.var.teamId, userId);
      if (!m) throw new DenvError("not_found", `no member ${userId}`);
      if (m.role === "admin" && body.role !== "admin") await keepOneAdmin(c);
      // The person's keys carry their role: a demotion reaches the keys they already hold.
      await setMemberRole(store, c.var.teamId, userId, body.role);
      return c.json({ user_id: m.user_id, email: m.email, role: body.role, since: m.created_at });
    },
  }),
  route({
    method: "delete",
    path: "/v1/members/{id}",
    name: "members.remove",
    summary: "Remove a member from the team (team admins); their keys and sessions for it end",
    response: z.object({ user_id: z.string(), removed: z.boolean() }),
    auth: true,
    needs: "admin",
    handler: async (c) => {
      const userId = c.req.param("id") ?? "";
      const { store } = c.var.deps;
      const m = await teamMember(store, c.var.teamId, userId);
      if (!m) throw new DenvError("not_found", `no member ${userId}`);
      if (m.role === "admin") await keepOneAdmin(c);
      await removeMember(store, c.var.teamId, userId);
      return c.json({ user_id: userId, removed: true });
    },
  }),
  route({
    method: "post",
    path: "/v1/invitations",
    name: "invitations.create",
    summary:
      "Invite someone by email with a role (team admins), or, with no email, make a one-time sign-in link to the team (anyone who opens it first, within a day); the link's token is shown once",
    body: invitationBody,
    response: invitationCreated,
    status: 201,
    auth: true,
    needs: "admin",
    handler: async (c, { body }) => {
      const { row, token, url } = await createInvitation(c.var.deps.store, {
        teamId: c.var.teamId,
        email: body.email ? normalizeEmail(body.email) : null,
        role: body.role,
        createdBy: c.var.userId ?? c.var.keyId,
        origin: new URL(c.req.url).origin,
      });
      return c.json(
        {
          id: row.id,
          email: row.email,
          role: body.role,
          created_at: row.created_at,
          expires_at: row.expires_at,
          accepted_at: null,
          token,
          url,
        },
        201,
      );
    },
  }),
  route({
    method: "get",
    path: "/v1/invitations",
    name: "invitations.list",
    summary: "The team's invitations",
    response: z.object({ invitations: z.array(invitationSchema) }),
    auth: true,
    handler: async (c) => {
      const rows = await teamInvitations(c.var.deps.store, c.var.teamId);
      return c.json({ invitations: rows.map((r) => ({ ...r, role: r.role as Role })) });
    },
  }),
  route({
    method: "post",
    path: "/v1/invitations/{token}/accept",
    name: "invitations.accept",
    summary:
      "A signed-in person accepts an invitation sent to their email (or a sign-in link): they join its team",
    response: sessionSchema,
    auth: true,
    needs: "read",
    handler: async (c) => {
      const inv = await openInvitation(c.var.deps.store, c.req.param("token") ?? "");
      const { userId, sessionId } = person(c);
      if (!mayTake(inv, (await userEmail(c.var.deps.store, userId)) ?? ""))
        throw new DenvError("forbidden", "that invitation was sent to another email address");
      await take(c, inv.id);
      await addMembership(c.var.deps.store, userId, inv.team_id, inv.role);
      const answer = await startSession(c, userId, inv.team_id);
      await endSession(c.var.deps.store, sessionId);
      return c.json(answer);
    },
  }),
];

/** A team keeps at least one admin: the last one cannot be demoted or removed. */
async function keepOneAdmin(c: ApiContext): Promise<void> {
  const admins = await teamAdmins(c.var.deps.store, c.var.teamId);
  if (admins.length <= 1)
    throw new DenvError("conflict", "a team keeps at least one admin: make another admin first");
}
