/**
 * The /v1 HTTP API (Hono): one sub-app per resource (api/api-routes.ts), and the console at `/`.
 * Every route but the OpenAPI document, host join, the installer, port URLs, sign-up, sign-in,
 * device codes and the operator's /healthz, /readyz and /metrics needs an API key (`Authorization: Bearer`) or a console session; every object
 * belongs to a team, and another team's object answers 404. Errors are
 * `{"error": {"code", "message"}}` with the status from the error table.
 */
import type { McpSessions } from "@denv/mcp";
import { DenvError, isDenvError, KEEPALIVE_INTERVAL_MS } from "@denv/protocol";
import { DenvClient } from "@denv/sdk";
import { Hono } from "hono";
import { matchedRoutes } from "hono/route";
import { IN_PROCESS_CALLER } from "./api/api-auth.ts";
import type { ApiDeps, ApiEnv } from "./api/api-deps.ts";
import { resourceApp } from "./api/api-route.ts";
import { RESOURCES } from "./api/api-routes.ts";
import { InFlightBytes } from "./api/in-flight-bytes.ts";
import type { SecretBox } from "./clouds/secret-box.ts";
import { mountConsole } from "./console-routes.ts";
import type { Deployer } from "./deployments/deployer.ts";
import { defaultDownloadsDir } from "./downloads.ts";
import { createE2bGateway } from "./e2b/e2b-gateway.ts";
import { PoolKeeper } from "./environments/pool-keeper.ts";
import type { FetchPolicy } from "./fetch-policy.ts";
import { ReplicaKeeper } from "./fleet/replica-keeper.ts";
import { Replicator } from "./fleet/replication.ts";
import { GitHubApps } from "./github/github-apps.ts";
import { newId } from "./ids.ts";
import type { IngressNames } from "./ingress/ingress-names.ts";
import { Admission } from "./placement/admission.ts";
import type { PortsOrigin } from "./ports-origin.ts";
import {
  ACCOUNT_RATE_LIMIT,
  ANONYMOUS_RATE_LIMIT,
  DEFAULT_RATE_LIMIT,
  RateLimiter,
  type RateLimitOptions,
} from "./rate-limit.ts";
import { requestIdOf, serverLog, withTrace } from "./server-log.ts";
import type { ServerMetrics } from "./server-metrics.ts";
import { pingStore, type Store } from "./store/open-store.ts";
import type { DenvdStacks } from "./targets/denvd/denvd-stacks.ts";

export interface AppOptions {
  store: Store;
  /** The team's sidecar hosts through the lifecycle port (targets/denvd/denvd-stacks.ts). */
  stacks: DenvdStacks;
  deployer: Deployer;
  /** Create turns per host (default: made here with the defaults). */
  admission?: Admission;
  replicator?: Replicator;
  replicas?: ReplicaKeeper;
  /** Warm pools (default: made here, refilled only when kicked; the server starts its own). */
  pools?: PoolKeeper;
  joinTokenTtlMs?: number;
  /** How often a quiet command's stream carries a keep-alive (default KEEPALIVE_INTERVAL_MS). */
  keepAliveMs?: number;
  /** Check every JSON answer against its route's schema (default: DENV_CHECK_ANSWERS=1). */
  checkAnswers?: boolean;
  /** Where the denvd executables are served from (GET /v1/downloads/{file}). */
  downloadsDir?: string;
  /** Encrypts cloud tokens, sources and resolved specs at rest. */
  secrets: SecretBox;
  /** Hosts the server fetches from for teams (git sources, cloud APIs). */
  fetchPolicy: FetchPolicy;
  /** Requests per key (default DEFAULT_RATE_LIMIT). */
  rateLimit?: RateLimitOptions;
  /** Sign-ups, sign-ins and device logins per client address (default ANONYMOUS_RATE_LIMIT). */
  anonymousRateLimit?: RateLimitOptions;
  /** Sign-ins and sign-ups per email, device lookups per person (default ACCOUNT_RATE_LIMIT). */
  accountRateLimit?: RateLimitOptions;
  /** Where port URLs are served: an origin of their own (ports-origin.ts). */
  portsOrigin: PortsOrigin;
  /** Ingress names for published ports; absent or null: none (the ingress phase is skipped). */
  ingress?: IngressNames | null;
  /** Where the server's own faults are logged (their words never go to clients). */
  log?: (message: string, context?: Record<string, unknown>) => void;
  /** Served at /metrics, and told of each request; none: /metrics answers 404. */
  metrics?: ServerMetrics;
  /** Whether the server has finished starting (recovery done, hosts accepted): /readyz. */
  isReady?: () => boolean;
  /** Given the E2B gateway's sweep (kills sandboxes past their timeout), for the server to run on a timer. */
  onE2bSweep?: (sweep: () => Promise<number>) => void;
  /** Teams' GitHub Apps (default: made here; the server shares its own with the deployer). */
  github?: GitHubApps;
  /** The console's origin as users reach it (links sent to GitHub); default: the request's. */
  serverUrl?: () => string;
  /** Bytes of unauthenticated request bodies held at once (default ANONYMOUS_BODY_BUDGET_BYTES). */
  anonymousBodyBudgetBytes?: number;
}

export function createApp(options: AppOptions): Hono<ApiEnv> {
  // /v1/mcp's tools call /v1 in process with the caller's key: the same routes, checks and scoping.
  // The MCP SDK and its schemas (≈ 20 MiB resident) load with the first /v1/mcp request.
  let sessions: Promise<McpSessions> | undefined;
  const loadSessions = () =>
    import("@denv/mcp").then(
      ({ McpSessions, createDenvMcpServer }) =>
        new McpSessions({
          makeServer: (apiKey, { readOnly }) =>
            createDenvMcpServer({
              readOnly,
              client: new DenvClient({
                baseUrl: "http://denv.internal",
                apiKey,
                fetch: async (input, init) => app.fetch(new Request(input, init)),
              }),
            }),
        }),
    );
  const mcp: ApiDeps["mcp"] = {
    handle: async (...args) => {
      sessions ??= loadSessions().catch((err: unknown) => {
        sessions = undefined;
        throw err;
      });
      return (await sessions).handle(...args);
    },
  };
  const admission = options.admission ?? new Admission({ store: options.store, secrets: options.secrets });
  const replicator =
    options.replicator ??
    new Replicator({ store: options.store, hosts: options.stacks, secrets: options.secrets });
  const deps: ApiDeps = {
    store: options.store,
    stacks: options.stacks,
    deployer: options.deployer,
    admission,
    replicator,
    replicas:
      options.replicas ??
      new ReplicaKeeper({ store: options.store, stacks: options.stacks, admission, replicator }),
    pools:
      options.pools ??
      new PoolKeeper({ store: options.store, deployer: options.deployer, stacks: options.stacks, admission }),
    secrets: options.secrets,
    fetchPolicy: options.fetchPolicy,
    limiter: new RateLimiter(options.rateLimit ?? DEFAULT_RATE_LIMIT),
    anonymousLimiter: new RateLimiter(options.anonymousRateLimit ?? ANONYMOUS_RATE_LIMIT),
    accountLimiter: new RateLimiter(options.accountRateLimit ?? ACCOUNT_RATE_LIMIT),
    joinTokenTtlMs: options.joinTokenTtlMs ?? 3600_000,
    keepAliveMs: options.keepAliveMs ?? KEEPALIVE_INTERVAL_MS,
    downloadsDir: options.downloadsDir ?? defaultDownloadsDir(),
    buildContexts: options.deployer.buildContexts,
    mcp,
    portsOrigin: options.portsOrigin,
    ingress: options.ingress ?? null,
    github:
      options.github ??
      new GitHubApps({ store: options.store, secrets: options.secrets, fetchPolicy: options.fetchPolicy }),
    serverUrl: options.serverUrl ?? null,
    anonymousBodies: new InFlightBytes(options.anonymousBodyBudgetBytes),
    checkAnswers: options.checkAnswers ?? process.env.DENV_CHECK_ANSWERS === "1",
  };
  const log = options.log ?? ((message, context) => serverLog().error(context ?? {}, message));
  const app = new Hono<ApiEnv>();
  app.onError((err, c) => {
    // The rest of a refused body is never read: the connection cannot be reused.
    if (isDenvError(err) && err.code === "payload_too_large") c.header("connection", "close");
    const retryMs = isDenvError(err) ? err.details?.retry_after_ms : undefined;
    if (typeof retryMs === "number") c.header("retry-after", String(Math.max(1, Math.ceil(retryMs / 1000))));
    if (isDenvError(err)) return c.json(err.toJSON(), err.httpStatus as 400);
    // A fault of the server's own: its words (SQL, paths, stacks) go to the log under a reference.
    const ref = newId("err");
    log("Request failed", { ref, method: c.req.method, path: c.req.path, error: err.stack ?? err.message });
    const e = new DenvError("internal", `the server failed (reference ${ref}); its log has the details`);
    return c.json(e.toJSON(), 500);
  });
  app.notFound((c) =>
    c.json(new DenvError("not_found", `no route ${c.req.method} ${c.req.path}`).toJSON(), 404),
  );
  const metrics = options.metrics;
  app.use("*", async (c, next) => {
    c.set("deps", deps);
    const begun = performance.now();
    // Every line logged and every host operation sent for this request carries its id.
    const requestId = requestIdOf(c.req.header("x-request-id"), () => newId("req"));
    c.header("x-request-id", requestId);
    await withTrace({ request_id: requestId }, () => next());
    // The route's template (never the path itself: ids would make a series each); none matched:
    // "unmatched", so a scan of random paths adds no series either.
    const route =
      matchedRoutes(c)
        .filter((r) => r.method !== "ALL")
        .at(-1)?.path ?? "unmatched";
    metrics?.request(c.req.method, route, c.res.status, (performance.now() - begun) / 1000);
  });
  // For an operator's probes and scraper: no key, and nothing of any team's in them.
  app.get("/healthz", (c) => c.json({ status: "ok" }));
  app.get("/readyz", async (c) => {
    const checks: Record<string, string> = {};
    try {
      await pingStore(options.store);
      checks.store = "ok";
    } catch (err) {
      checks.store = `failing: ${(err as Error).message.slice(0, 200)}`;
    }
    checks.server = (options.isReady?.() ?? true) ? "ok" : "starting (recovering deployments)";
    const ready = Object.values(checks).every((v) => v === "ok");
    return c.json({ status: ready ? "ready" : "not_ready", checks }, ready ? 200 : 503);
  });
  app.get("/metrics", async (c) => {
    if (!metrics) return c.json(new DenvError("not_found", "this server keeps no metrics").toJSON(), 404);
    const { body, contentType } = await metrics.scrape();
    return c.body(body, 200, { "content-type": contentType });
  });
  for (const routes of Object.values(RESOURCES)) app.route("/", resourceApp(routes));
  // E2B's API (e2b/e2b-gateway.ts): each action a /v1 call in process, as the caller's key.
  const e2b = createE2bGateway({
    store: options.store,
    secrets: options.secrets,
    limiter: deps.limiter,
    ingress: deps.ingress,
    v1: async (keyId, path, init) =>
      app.fetch(new Request(`http://denv.internal${path}`, init), { [IN_PROCESS_CALLER]: { keyId } }),
  });
  app.route("/e2b", e2b.app);
  options.onE2bSweep?.(e2b.sweep);
  mountConsole(app);
  return app;
}
