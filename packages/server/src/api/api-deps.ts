/**
 * What every route may use, set on each request's context (`c.var.deps`), and who is asking
 * (`c.var.teamId`, role, key): the types of the API's context.
 */

import type { McpSessions } from "@denv/mcp";
import type { Context } from "hono";
import type { BuildContexts } from "../build-contexts.ts";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { Deployer } from "../deployments/deployer.ts";
import type { PoolKeeper } from "../environments/pool-keeper.ts";
import type { FetchPolicy } from "../fetch-policy.ts";
import type { ReplicaKeeper } from "../fleet/replica-keeper.ts";
import type { Replicator } from "../fleet/replication.ts";
import type { GitHubApps } from "../github/github-apps.ts";
import type { IngressNames } from "../ingress/ingress-names.ts";
import type { Admission } from "../placement/admission.ts";
import type { PortsOrigin } from "../ports-origin.ts";
import type { RateLimiter } from "../rate-limit.ts";
import type { Store } from "../store/open-store.ts";
import type { Role } from "../store/people-store.ts";
import type { DenvdStacks } from "../targets/denvd/denvd-stacks.ts";
import type { InFlightBytes } from "./in-flight-bytes.ts";

/** What routes use, set on every request's context (`c.var.deps`). */
export interface ApiDeps {
  store: Store;
  /** The team's sidecar hosts: the lifecycle port, and the denvd target made over it. */
  stacks: DenvdStacks;
  deployer: Deployer;
  /** Every create's turn on its host (admission.ts). */
  admission: Admission;
  /** Warm pools: creates of a pooled version take a ready member (pool-keeper.ts). */
  pools: PoolKeeper;
  /** Copies of versions on other hosts (replication.ts). */
  replicator: Replicator;
  /** x-denv.replicas kept, and hosts drained (replica-keeper.ts). */
  replicas: ReplicaKeeper;
  secrets: SecretBox;
  fetchPolicy: FetchPolicy;
  limiter: RateLimiter;
  /** Sign-ups, sign-ins and device codes, per client address (no key to count them against). */
  anonymousLimiter: RateLimiter;
  /** The same per account (an email, a person), across addresses. */
  accountLimiter: RateLimiter;
  joinTokenTtlMs: number;
  downloadsDir: string;
  /** Build contexts uploaded with local projects (build-contexts.ts). */
  buildContexts: BuildContexts;
  /** /v1/mcp's sessions (mcp-routes.ts). */
  mcp: Pick<McpSessions, "handle">;
  /** Where port URLs are served (never this origin). */
  portsOrigin: PortsOrigin;
  /** Ingress names for published ports (ingress/ingress-names.ts); null when the server has none. */
  ingress: IngressNames | null;
  /** How often a quiet command's stream carries a keep-alive (KEEPALIVE_INTERVAL_MS). */
  keepAliveMs: number;
  /** Teams' GitHub Apps (github/github-apps.ts). */
  github: GitHubApps;
  /** The console's origin as users reach it; null: the request's own. */
  serverUrl: (() => string) | null;
  /** Bytes of unauthenticated request bodies held at once (request-bodies.ts). */
  anonymousBodies: InFlightBytes;
  /**
   * Every JSON answer checked against its route's response schema before it goes (api-route.ts):
   * on in development and in the tests (DENV_CHECK_ANSWERS=1), where a mismatch is a fault.
   */
  checkAnswers: boolean;
}

export type ApiEnv = {
  Variables: {
    deps: ApiDeps;
    teamId: string;
    admin: boolean;
    /** The key's id, or the session's for a person signed in to the console. */
    keyId: string;
    /** What the caller may do in the team: read-only callers may only read (GET). */
    role: Role;
    /** The person behind the request (a session, or a key made for them), if any. */
    userId: string | null;
    /** Set when the request came with a console session rather than a key. */
    sessionId: string | null;
  };
};
export type ApiContext = Context<ApiEnv>;
