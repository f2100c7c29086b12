/** @module @denv/server — the control plane: /v1 API, store, auth, the sidecars' hub, deployments. */
export { API_ROUTES as ROUTES, apiDocument as openApiDocument } from "./api/api-routes.ts";
export { type Datasheet, datasheetMarkdown } from "./api/datasheet.ts";
export { createApp } from "./app.ts";
export { DEPLOY_PHASES, Deployer } from "./deployments/deployer.ts";
export { DEFAULT_FETCH_ALLOW, FetchPolicy, parseFetchAllow } from "./fetch-policy.ts";
export { type AcmeDns, type AcmeOptions, dnsHook } from "./ingress/acme-certificates.ts";
export { IngressNames } from "./ingress/ingress-names.ts";
export { PortsOrigin } from "./ports-origin.ts";
export { ACCOUNT_RATE_LIMIT, clientBucketOf, type RateLimitOptions } from "./rate-limit.ts";
export { joinLocalHost, type RunningServer, type ServerOptions, startServer } from "./server.ts";
export { type BackupSummary, backupDataDir, restoreDataDir } from "./server-backup.ts";
export { recordDelivery } from "./store/github-store.ts";
export { openStore, type Store } from "./store/open-store.ts";
