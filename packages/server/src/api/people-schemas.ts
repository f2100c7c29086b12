/** The wire shapes of people, sessions, keys, invitations and device login (snake_case). */
import { z } from "zod";
import { PASSWORD_MAX_CHARS, PASSWORD_MIN_CHARS } from "../people/password-hash.ts";
import { ROLES } from "../store/people-store.ts";

const email = z
  .string()
  .trim()
  .max(254)
  .regex(/^[^\s@]+@[^\s@]+\.[^\s@]+$/, "not an email address");
const password = z
  .string()
  .min(PASSWORD_MIN_CHARS, `at least ${PASSWORD_MIN_CHARS} characters`)
  .max(PASSWORD_MAX_CHARS, `at most ${PASSWORD_MAX_CHARS} characters`);
export const role = z.enum(ROLES);

export const signUpBody = z.strictObject({
  email,
  password,
  /** The new team's name (default: the email's name part). */
  team_name: z.string().trim().min(1).max(100).optional(),
  /** An invitation's token: the account joins that team instead of making its own. */
  invitation: z.string().max(200).optional(),
});
export const signInBody = z.strictObject({ email, password: z.string().max(PASSWORD_MAX_CHARS) });

export const sessionSchema = z.object({
  user: z.object({ id: z.string(), email: z.string() }),
  team: z.object({ id: z.string(), name: z.string() }),
  role,
  teams: z.array(z.object({ id: z.string(), name: z.string(), role })),
  /** Send it back as X-CSRF-Token on every request that changes something. */
  csrf_token: z.string(),
  expires_at: z.string(),
});
export const switchTeamBody = z.strictObject({ team_id: z.string().max(100) });

export const apiKeySchema = z.object({
  id: z.string(),
  name: z.string(),
  prefix: z.string(),
  role,
  user_email: z.string().nullable(),
  created_at: z.string(),
  /** The key this request came with. */
  current: z.boolean(),
});

export const newKeyBody = z.strictObject({
  name: z.string().min(1).max(100).describe("What the key is for"),
  format: z
    .enum(["denv", "e2b"])
    .optional()
    .describe("denv (default: dk_…) or e2b (e2b_ and 40 hex digits, for E2B's SDKs pointed at denv)"),
});

export const newKeySchema = z.object({
  id: z.string(),
  /** The key itself: shown once, kept only as its hash. */
  key: z.string(),
  name: z.string(),
  prefix: z.string(),
  role,
});

export const memberSchema = z.object({ user_id: z.string(), email: z.string(), role, since: z.string() });
export const memberBody = z.strictObject({ role });

/** No email: a one-time sign-in link to the team (whoever opens it first, within a day). */
export const invitationBody = z.strictObject({ email: email.optional(), role: role.default("member") });
export const invitationSchema = z.object({
  id: z.string(),
  /** "" for a sign-in link, which anyone holding it may take. */
  email: z.string(),
  role,
  created_at: z.string(),
  expires_at: z.string(),
  accepted_at: z.string().nullable(),
});
export const invitationCreated = invitationSchema.extend({
  /** Shown once: the link's secret. */
  token: z.string(),
  url: z.string(),
});

export const deviceCodeBody = z.strictObject({
  /** Names the key the login makes (the machine's name). */
  client_name: z.string().trim().min(1).max(64).default("denv CLI"),
});
export const deviceCodeCreated = z.object({
  device_code: z.string(),
  user_code: z.string(),
  verification_uri: z.string(),
  verification_uri_complete: z.string(),
  expires_in: z.number(),
  interval: z.number(),
});
export const deviceTokenBody = z.strictObject({ device_code: z.string().max(200) });
/** A poll's answer: not an error while the person has not answered (the CLI polls on). */
export const deviceToken = z.discriminatedUnion("status", [
  z.object({ status: z.enum(["pending", "slow_down", "denied", "expired"]), interval: z.number() }),
  z.object({
    status: z.literal("approved"),
    api_key: z.string(),
    key_id: z.string(),
    team_id: z.string(),
    role,
  }),
]);
export const devicePending = z.object({
  user_code: z.string(),
  client_name: z.string(),
  created_at: z.string(),
  expires_at: z.string(),
});
export const deviceAnswerBody = z.strictObject({ approve: z.boolean() });
