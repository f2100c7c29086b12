/**
 * Who may do what, for every surface a request can enter by: /v1 (keys and console sessions),
 * E2B's control plane and envd at /e2b, MCP (a client of /v1 in process) and ingress names. Each
 * operation says what it needs — to read, to change, or to administer the team — in the table of
 * its surface (/v1's route objects, e2b-routes.ts), and is checked here, where the request enters,
 * against the caller's role.
 *
 * A token handed out (an envd access token, a signed URL made from it, an ingress token) carries no
 * more than the role of the key that asked for it: an envd call acts as that key, checked again on
 * every call, and a read-only caller's ingress token reads (GET, HEAD, OPTIONS; no upgrade).
 */
import { DenvError } from "@denv/protocol";
import type { Role } from "../store/people-store.ts";

/** What an operation needs of its caller. */
export type Need = "read" | "change" | "admin";

const ROLE_RANK: Record<Role, number> = { "read-only": 0, member: 1, admin: 2 };
const NEED_RANK: Record<Need, number> = { read: 0, change: 1, admin: 2 };

/** Methods that change nothing (HTTP's safe methods). */
export const SAFE_METHODS: ReadonlySet<string> = new Set(["GET", "HEAD", "OPTIONS"]);

/** What an HTTP method needs when its operation says nothing else: a safe one reads, the rest change. */
export function needOfMethod(method: string): Need {
  return SAFE_METHODS.has(method.toUpperCase()) ? "read" : "change";
}

/** Whether a role may do what an operation needs. */
export function allows(role: Role, need: Need): boolean {
  return ROLE_RANK[role] >= NEED_RANK[need];
}

/** The refusal's words for a role short of a need. */
export function refusal(role: Role, need: Need): string {
  if (need === "admin") return "only a team admin can do this";
  return role === "read-only"
    ? "this key or member is read-only: it may look, not change anything"
    : `the ${role} role may not do this`;
}

/** Throws `forbidden` when the role may not do what the operation needs. */
export function assertAllowed(role: Role, need: Need): void {
  if (!allows(role, need)) throw new DenvError("forbidden", refusal(role, need));
}

/** What a token made for a role may be used for: the same as the role, never more. */
export type TokenAccess = "read" | "full";

export function tokenAccessOf(role: Role): TokenAccess {
  return allows(role, "change") ? "full" : "read";
}
