/** @module @denv/server — the control plane: /v1 API, store, auth, host hub, deployments. */
export { openApiDocument, ROUTES } from "./api-schemas.ts";
export { createApp } from "./app.ts";
export { DEPLOY_PHASES, Deployer } from "./deployer.ts";
export { DEFAULT_FETCH_ALLOW, FetchPolicy, parseFetchAllow } from "./fetch-policy.ts";
export { HostHub } from "./host-hub.ts";
export { joinLocalHost, type RunningServer, type ServerOptions, startServer } from "./server.ts";
export { openStore, type Store } from "./store/open-store.ts";
