/**
 * Invitations to a team: by email (only that address may take it, for seven days), or a one-time
 * sign-in link (no email: whoever opens it first, within a day, joins with its role) — what
 * `denv up` and `denv console` print so the person at the terminal reaches their team's console.
 * The token is shown once and stored hashed.
 */
import { DenvError } from "@denv/protocol";
import { hashSecret, newId, newSecret, now } from "../ids.ts";
import type { Store } from "../store/open-store.ts";
import { insertInvitation, invitationByTokenHash } from "../store/people-store.ts";
import type { InvitationsTable } from "../store/schema.ts";

/** Seven days to accept an invitation sent to an email address. */
export const INVITATION_TTL_MS = 7 * 24 * 3600_000;
/** A day to open a sign-in link: it is anyone's who holds it, so it lives shorter. */
export const SIGN_IN_LINK_TTL_MS = 24 * 3600_000;

/** An invitation made, with its token (shown once) and the console's page that takes it. */
export interface MadeInvitation {
  row: InvitationsTable;
  token: string;
  url: string;
}

/**
 * Invites to `teamId` with `role`: `email` (normalized) alone may take it, or, with email null, a
 * one-time link anyone holding it may. `origin` is the console's, for the link.
 */
export async function createInvitation(
  store: Store,
  invite: { teamId: string; email: string | null; role: string; createdBy: string; origin: string },
): Promise<MadeInvitation> {
  const token = newSecret("dinv");
  const row: InvitationsTable = {
    id: newId("inv"),
    team_id: invite.teamId,
    // "" marks a link: no address is needed to take it.
    email: invite.email ?? "",
    role: invite.role,
    token_hash: hashSecret(token),
    created_by: invite.createdBy,
    created_at: now(),
    expires_at: new Date(Date.now() + (invite.email ? INVITATION_TTL_MS : SIGN_IN_LINK_TTL_MS)).toISOString(),
    accepted_at: null,
  };
  await insertInvitation(store, row);
  return { row, token, url: `${invite.origin}/#/join?invitation=${encodeURIComponent(token)}` };
}

/** An invitation by its token, still open (not taken, not expired); not_found otherwise. */
export async function openInvitation(store: Store, token: string): Promise<InvitationsTable> {
  const inv = await invitationByTokenHash(store, hashSecret(token));
  if (!inv || inv.accepted_at || inv.expires_at <= now())
    throw new DenvError("not_found", "that invitation is not valid: it may have expired or been used");
  return inv;
}

/** Whether `email` (normalized) may take the invitation: its own address, or anyone's for a link. */
export function mayTake(inv: InvitationsTable, email: string): boolean {
  return inv.email === "" || inv.email === email;
}
