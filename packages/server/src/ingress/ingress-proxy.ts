/**
 * Requests on the ports listener whose Host is an ingress name (ingress-names.ts): relayed to the
 * port the name reaches over the host's tunnel, as port URLs are (port-tunnels.ts), once the
 * environment's ingress token is shown for a private name. `{49983}-{id}` is envd's port in E2B's
 * host mode: it reaches the E2B gateway, which checks the sandbox's own access token.
 *
 * The token is taken from the denv-ingress-token or e2b-traffic-access-token header, or the
 * _denv_token query parameter, and never passed on to the service.
 */
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { DenvError, isDenvError } from "@denv/protocol";
import { SAFE_METHODS } from "../people/access-rules.ts";
import { refuseUpgrade, relayHttp, relayUpgrade } from "../port-tunnels.ts";
import type { Store } from "../store/open-store.ts";
import type { StackLifecycle } from "../targets/stack-lifecycle.ts";
import { ENVD_PORT, type IngressNames, TOKEN_HEADERS, TOKEN_QUERY } from "./ingress-names.ts";
import { type IngressTarget, resolveIngressHost } from "./ingress-routes.ts";

export interface IngressProxyDeps {
  store: Store;
  stacks: Pick<StackLifecycle, "openTunnel">;
  names: IngressNames;
  /** Told of each request to an environment with an idle timer; resumes one it paused (port-tunnels.ts). */
  wake?: (environmentId: string) => Promise<void>;
  /** envd's API for a sandbox (the E2B gateway), given the sandbox id. */
  envd?: (req: Request, sandboxId: string, path: string) => Promise<Response>;
}

const WITHHOLD = new Set<string>(TOKEN_HEADERS);
const ENVD_PATHS = /^\/(?:process\.Process\/[A-Za-z]+|filesystem\.Filesystem\/[A-Za-z]+|files|health)$/;

/** The request's path without the token parameter, and the token it carried (if any). */
function splitToken(pathAndQuery: string, header: (name: string) => string | null | undefined) {
  const u = new URL(pathAndQuery, "http://x");
  const fromQuery = u.searchParams.get(TOKEN_QUERY);
  u.searchParams.delete(TOKEN_QUERY);
  const token = TOKEN_HEADERS.map(header).find((v) => v) ?? fromQuery;
  return { rest: `${u.pathname}${u.search}`, token: token ?? null };
}

/**
 * What a name reaches once its token (if private) is checked; a DenvError says why not. A token
 * made for a caller who may only read admits requests that change nothing, and no upgrade (a
 * WebSocket carries whatever either side sends).
 */
async function admit(
  deps: IngressProxyDeps,
  host: string | undefined | null,
  token: string | null,
  request: { method: string; upgrade: boolean },
): Promise<IngressTarget> {
  const target = await resolveIngressHost(deps.store, deps.names, host);
  if (!target) throw new DenvError("not_found", `no running environment answers to ${host}`);
  // Only a request let in wakes it (a private name's token checked first).
  const woken = async (t: IngressTarget) => {
    if (t.idle) await deps.wake?.(t.environmentId);
    return t;
  };
  if (target.public) return woken(target);
  const access = deps.names.tokenAccess(target.environmentId, token);
  if (!access)
    throw new DenvError(
      "unauthenticated",
      `${host} is private: send the environment's ingress token in the denv-ingress-token header (GET /v1/envs/{id}/ingress shows it)`,
    );
  if (access === "read" && (request.upgrade || !SAFE_METHODS.has(request.method.toUpperCase())))
    throw new DenvError(
      "forbidden",
      `this ingress token was made for a read-only caller: it may send GET, HEAD and OPTIONS, not ${request.upgrade ? "an upgrade" : request.method}`,
    );
  return woken(target);
}

// An HTTP request goes on the stream as soon as the open is sent (early): a port that cannot be
// reached fails the relay with the host's reason. An upgrade waits for the open, so that a port
// nobody listens on is answered 503 rather than a dropped connection.
function openTo(deps: IngressProxyDeps, t: IngressTarget, early: boolean) {
  return deps.stacks
    .openTunnel(
      { hostId: t.hostId, stackId: t.stackId },
      { service: t.service ?? undefined, port: t.port },
      { early },
    )
    .then((stream) => ({ stream, port: t.port }));
}

/** An HTTP request on an ingress name, or null when the Host is not one (a port URL, perhaps). */
export async function serveIngress(deps: IngressProxyDeps, req: Request): Promise<Response | null> {
  const url = new URL(req.url);
  const host = req.headers.get("host") ?? url.host;
  const parsed = deps.names.parse(host);
  if (!parsed) return null;
  const secure = { "cross-origin-opener-policy": "same-origin" };
  try {
    if (parsed.form === "port" && parsed.port === ENVD_PORT && deps.envd) {
      // envd's own routes only: the E2B control plane is not served on a sandbox's name.
      if (!ENVD_PATHS.test(url.pathname)) throw new DenvError("not_found", `envd serves no ${url.pathname}`);
      return await deps.envd(req, parsed.environmentId.replace(/^env_/, ""), url.pathname + url.search);
    }
    const { rest, token } = splitToken(url.pathname + url.search, (n) => req.headers.get(n));
    const target = await admit(deps, host, token, { method: req.method, upgrade: false });
    return await relayHttp(await openTo(deps, target, true), rest, req, {
      withhold: WITHHOLD,
      forwarded: { host, proto: deps.names.scheme },
      idleMs: deps.names.idleMs,
      lifetimeMs: deps.names.lifetimeMs,
    });
  } catch (err) {
    const e = isDenvError(err) ? err : new DenvError("unavailable", `${host} could not be reached`);
    return Response.json(e.toJSON(), { status: e.httpStatus, headers: secure });
  }
}

/** A WebSocket (or other) upgrade on an ingress name; false when the Host is not one. */
export function upgradeIngress(
  deps: IngressProxyDeps,
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
): boolean {
  const host = req.headers.host;
  if (!deps.names.parse(host)) return false;
  const { rest, token } = splitToken(req.url ?? "/", (n) => {
    const v = req.headers[n];
    return Array.isArray(v) ? v[0] : v;
  });
  void admit(deps, host, token, { method: req.method ?? "GET", upgrade: true })
    .then((target) => openTo(deps, target, false))
    .then(
      (tunnel) =>
        relayUpgrade(tunnel, rest, req, socket, head, {
          withhold: WITHHOLD,
          forwarded: { host: host ?? "", proto: deps.names.scheme },
          idleMs: deps.names.idleMs,
          lifetimeMs: deps.names.lifetimeMs,
        }),
      (err) => refuseUpgrade(socket, isDenvError(err) ? err.httpStatus : 502),
    );
  return true;
}
