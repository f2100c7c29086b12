/**
 * The deploy's ingress phase: the names the environment's published ports answer to (claimed in
 * ingress_names), the certificate the ports listener serves (its fingerprint and expiry, and
 * whether it covers each name), and a probe of each name from outside the stack: a request through
 * the ports listener, as a client would make it, with what it answered and how long it took.
 */
import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import type { TLSSocket } from "node:tls";
import type { ResolvedSpec } from "@denv/protocol";
import type { Store } from "../store/open-store.ts";
import type { IngressNames } from "./ingress-names.ts";
import { claimIngressNames } from "./ingress-routes.ts";

export interface IngressProbe {
  status?: number;
  ms: number;
  error?: string;
  /** Over TLS: the certificate the client was shown, and whether this machine's CAs trust it. */
  tls?: { fingerprint_sha256: string; authorized: boolean; authorization_error: string | null };
}

/** What the deploy needs of the server's ingress: its names and a way to probe one. */
export interface IngressDeps {
  names: IngressNames;
  probe: (host: string, token: string | null) => Promise<IngressProbe>;
}

const PROBE_TIMEOUT_MS = 10_000;

/** The ingress phase's evidence, once the environment serves from its new stack. */
export async function ingressEvidence(
  store: Store,
  ingress: IngressDeps,
  env: { id: string; team_id: string; name: string },
  projectName: string,
  spec: ResolvedSpec,
): Promise<Record<string, unknown>> {
  const { names, refused } = await claimIngressNames(store, ingress.names, env, projectName, spec);
  const token = ingress.names.tokenFor(env.id);
  const probed = await Promise.all(
    names.map(async (n) => ({
      ...n,
      covered_by_certificate: ingress.names.covers(n.host),
      probe: await ingress.probe(n.host, n.public ? null : token),
    })),
  );
  return {
    domain: ingress.names.domain,
    scheme: ingress.names.scheme,
    certificate: ingress.names.certificateInfo(),
    names: probed,
    refused,
  };
}

/**
 * A probe of a name through the ports listener at `listenerUrl` (its bound address): the Host
 * header and TLS server name are the name's, as a client that resolved it would send.
 */
export function probeThrough(listenerUrl: string, names: IngressNames) {
  const target = new URL(listenerUrl);
  return (host: string, token: string | null): Promise<IngressProbe> => {
    const started = performance.now();
    const ms = () => Math.round((performance.now() - started) * 10) / 10;
    const port = names.domain.includes(":") ? `:${names.domain.split(":")[1]}` : "";
    const options = {
      host: target.hostname.replace(/^\[|\]$/g, ""),
      port: Number(target.port),
      path: "/",
      method: "GET",
      headers: { host: `${host}${port}`, ...(token ? { "denv-ingress-token": token } : {}) },
      timeout: PROBE_TIMEOUT_MS,
    };
    return new Promise<IngressProbe>((resolve) => {
      const req =
        target.protocol === "https:"
          ? httpsRequest({ ...options, servername: host, rejectUnauthorized: false })
          : httpRequest(options);
      req.once("response", (res) => {
        const socket = res.socket as TLSSocket;
        const tls =
          target.protocol === "https:"
            ? {
                fingerprint_sha256: (socket.getPeerCertificate?.()?.fingerprint256 ?? "")
                  .replaceAll(":", "")
                  .toLowerCase(),
                authorized: socket.authorized === true,
                authorization_error: socket.authorizationError ? String(socket.authorizationError) : null,
              }
            : undefined;
        res.resume();
        res.once("end", () => resolve({ status: res.statusCode, ms: ms(), ...(tls ? { tls } : {}) }));
        res.once("error", (err) => resolve({ status: res.statusCode, ms: ms(), error: err.message }));
      });
      req.once("timeout", () => req.destroy(new Error(`no answer within ${PROBE_TIMEOUT_MS} ms`)));
      req.once("error", (err) => resolve({ ms: ms(), error: err.message }));
      req.end();
    });
  };
}
