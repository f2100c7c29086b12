/**
 * The ports listener: port URLs and ingress names, on a listener of their own so that a sandbox's
 * page never shares the console's origin. Bound before the deployments are built (the deploy's
 * ingress phase is given its names as a value), it serves E2B's envd calls on ingress names through
 * the app, handed to it once the app exists (`serveEnvdWith`): until then those calls answer 503.
 */
import { createServer as createHttpServer, type Server } from "node:http";
import { createServer as createHttpsServer, type Server as HttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { DenvError, isDenvError } from "@denv/protocol";
import { getRequestListener } from "@hono/node-server";
import { IngressNames } from "./ingress/ingress-names.ts";
import { type IngressDeps, probeThrough } from "./ingress/ingress-phase.ts";
import { type IngressProxyDeps, serveIngress, upgradeIngress } from "./ingress/ingress-proxy.ts";
import { proxyHttp, proxyUpgrade } from "./port-tunnels.ts";
import { PortsOrigin } from "./ports-origin.ts";
import { serverLog } from "./server-log.ts";
import type { Store } from "./store/open-store.ts";
import type { StackLifecycle } from "./targets/stack-lifecycle.ts";

export interface PortsListenerOptions {
  /** The address to bind, and the one URLs name when it is not 0.0.0.0 (else `apiHost`). */
  listenHost: string;
  apiHost: string;
  port?: number;
  tls: { cert: Buffer; key: Buffer } | null;
  /** Port URLs' origin template; default: this listener (defaultPortsOrigin). */
  portsOrigin?: string;
  publicUrl?: string;
  ingress?: { domain?: string | null; idleMs?: number; lifetimeMs?: number };
}

type Fetch = (req: Request) => Response | Promise<Response>;

export class PortsListener {
  readonly url: string;
  readonly origin: PortsOrigin;
  /** Names for published ports, or null when names are off. */
  readonly ingressNames: IngressNames | null;
  /** What the deploy's ingress phase uses (names and the probe through this listener), or null. */
  readonly ingressPhase: IngressDeps | null;
  private readonly server: Server | HttpsServer;
  /** The ingress proxy (names on this listener), when names are on. */
  private proxy: IngressProxyDeps | null = null;
  private envd: Fetch | null = null;

  private constructor(
    server: Server | HttpsServer,
    url: string,
    origin: PortsOrigin,
    names: IngressNames | null,
  ) {
    this.server = server;
    this.url = url;
    this.origin = origin;
    this.ingressNames = names;
    this.ingressPhase = names ? { names, probe: probeThrough(url, names) } : null;
  }

  static async open(
    deps: {
      store: Store;
      stacks: StackLifecycle;
      derive: (label: string) => string;
      /** x-denv.idle_pause_s: each request's activity, and the resume of one its timer paused. */
      wake?: (environmentId: string) => Promise<void>;
    },
    options: PortsListenerOptions,
  ): Promise<PortsListener> {
    if (options.portsOrigin) new PortsOrigin(options.portsOrigin); // a bad template fails before listening
    // A proxied connection (port URL or ingress name) sitting idle, or living, past these is closed.
    const limits = {
      idleMs: options.ingress?.idleMs ?? 3_600_000,
      lifetimeMs: options.ingress?.lifetimeMs ?? 86_400_000,
      ...(deps.wake ? { wake: deps.wake } : {}),
    };
    let self: PortsListener | null = null;
    const listener = getRequestListener(async (req) => {
      if (!self) return new Response(null, { status: 503 });
      const named = self.proxy ? await serveIngress(self.proxy, req) : null;
      if (named) return named;
      return servePortUrl(deps.store, deps.stacks, self.origin, req, limits);
    });
    const server: Server | HttpsServer = options.tls
      ? createHttpsServer(options.tls, listener)
      : createHttpServer(listener);
    server.keepAliveTimeout = 65_000;
    server.headersTimeout = 66_000;
    server.on("upgrade", (req, socket, head) => {
      if (!self) return void socket.destroy();
      if (self.proxy && upgradeIngress(self.proxy, req, socket, head)) return;
      void proxyUpgrade(deps.store, deps.stacks, self.origin, req, socket, head, limits).catch(() =>
        socket.destroy(),
      );
    });
    await listen(server, options.port ?? 0, options.listenHost);
    const port = (server.address() as AddressInfo).port;
    const scheme = options.tls ? "https" : "http";
    const host = options.listenHost !== "0.0.0.0" ? options.listenHost : options.apiHost;
    const url = `${scheme}://${host.includes(":") ? `[${host}]` : host}:${port}`;
    const origin = new PortsOrigin(
      options.portsOrigin ?? defaultPortsOrigin(scheme, host, port, options.publicUrl),
    );
    const domain =
      options.ingress?.domain === undefined
        ? ["127.0.0.1", "::1", "[::1]"].includes(host)
          ? `localhost:${port}`
          : null
        : options.ingress.domain;
    const names = domain
      ? new IngressNames(
          {
            domain,
            scheme,
            ...(options.tls ? { certificatePem: options.tls.cert } : {}),
            ...limits,
          },
          deps.derive,
        )
      : null;
    self = new PortsListener(server, url, origin, names);
    self.proxy = names
      ? {
          store: deps.store,
          stacks: deps.stacks,
          names,
          ...(deps.wake ? { wake: deps.wake } : {}),
          envd: (req, sandboxId, path) => (self as PortsListener).relayEnvd(req, sandboxId, path),
        }
      : null;
    return self;
  }

  /** E2B's host mode: envd's calls on `49983-{id}.{domain}` are answered by the app's gateway at /e2b. */
  serveEnvdWith(fetch: Fetch): void {
    this.envd = fetch;
  }

  private async relayEnvd(req: Request, sandboxId: string, path: string): Promise<Response> {
    if (!this.envd) return new Response(null, { status: 503 });
    const headers = new Headers(req.headers);
    headers.set("e2b-sandbox-id", sandboxId);
    headers.set("e2b-sandbox-port", "49983");
    return this.envd(
      new Request(new URL(`/e2b${path}`, "http://in-process"), {
        method: req.method,
        headers,
        body: req.body,
        ...(req.body ? { duplex: "half" } : {}),
      } as RequestInit),
    );
  }

  /** A renewed certificate, served from the next handshake on (ACME). */
  setCertificate(tls: { cert: Buffer; key: Buffer }): void {
    if ("setSecureContext" in this.server) this.server.setSecureContext(tls);
    this.ingressNames?.setCertificate(tls.cert);
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

/**
 * Port URLs' origin when none is given: the ports listener, named `localhost` when the server is on
 * loopback (another site than 127.0.0.1 to the browser), else by the public URL's host name. The
 * latter is the same site as the console (cookies do not care for ports): still another origin, and
 * no cookie is passed into a tunnel, but a host name of their own (--ports-origin) is better.
 */
function defaultPortsOrigin(
  scheme: string,
  host: string,
  port: number,
  publicUrl: string | undefined,
): string {
  if (publicUrl) {
    const u = new URL(publicUrl);
    if (!["127.0.0.1", "[::1]", "localhost"].includes(u.hostname)) {
      serverLog().warn(
        "port URLs are served on the console's host name, another port; set --ports-origin to give them a host name of their own",
      );
      return `${u.protocol}//${u.hostname}:${port}`;
    }
  }
  return `${scheme}://${["127.0.0.1", "::1", "[::1]"].includes(host) ? "localhost" : host}:${port}`;
}

export function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
}

/** A request on the ports listener: relayed to the port its URL names, or 404. */
async function servePortUrl(
  store: Store,
  stacks: Pick<StackLifecycle, "openTunnel">,
  origin: PortsOrigin,
  req: Request,
  limits: { idleMs: number; lifetimeMs: number },
): Promise<Response> {
  const u = new URL(req.url);
  const parts = origin.route(req.headers.get("host") ?? u.host, u.pathname + u.search);
  try {
    if (!parts) throw new DenvError("not_found", "no such port URL");
    return await proxyHttp(store, stacks, parts.token, parts.rest, req, limits);
  } catch (err) {
    const e = isDenvError(err) ? err : new DenvError("unavailable", "the port URL could not be reached");
    return Response.json(e.toJSON(), {
      status: e.httpStatus,
      headers: { "cross-origin-opener-policy": "same-origin" },
    });
  }
}
