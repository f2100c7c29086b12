/**
 * E2B's API on denv, at /e2b: the unmodified E2B SDK works against `denv server` with
 * E2B_API_URL=http(s)://SERVER/e2b, E2B_SANDBOX_URL=http(s)://SERVER/e2b and E2B_API_KEY set to a
 * team's denv key. The control plane (e2b-control-routes.ts) takes the key in X-API-Key; envd's
 * calls (envd-routes.ts, envd-files.ts) are routed by the E2b-Sandbox-Id header and take the
 * sandbox's access token in X-Access-Token.
 *
 * Every action is a /v1 call made in process as the key (for envd calls, the key that made the
 * sandbox, checked again on each call): the same scoping, rate limits and rules as /v1, and a
 * command is a denv exec. A sandbox id is the environment's id without its `env_` prefix (E2B
 * wants [a-z0-9]+, no hyphen); its access token is derived from the server's key, never stored.
 */
import { Hono } from "hono";
import { CONNECT_CODES } from "./connect-protocol.ts";
import { type E2bGatewayOptions, e2bContext } from "./e2b-context.ts";
import { E2bHttpError, e2bError, mountControlRoutes } from "./e2b-control-routes.ts";
import { mountEnvdFiles } from "./envd-files.ts";
import { asConnectError, mountEnvdRoutes } from "./envd-routes.ts";

export type { E2bGatewayOptions, V1Call } from "./e2b-context.ts";

export function createE2bGateway(options: E2bGatewayOptions): { app: Hono; sweep: () => Promise<number> } {
  const ctx = e2bContext(options);
  const app = new Hono();
  // The control plane's errors (envd's calls answer their own, in Connect's form).
  app.onError((err) => {
    if (err instanceof E2bHttpError) return e2bError(err.status, err.message);
    const e = asConnectError(err);
    return e2bError(CONNECT_CODES[e.code], e.message);
  });
  const { sweep } = mountControlRoutes(app, ctx);
  mountEnvdRoutes(app, ctx);
  mountEnvdFiles(app, ctx);
  return { app, sweep };
}
