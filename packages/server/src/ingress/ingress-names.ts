/**
 * Ingress names: a published port reached by name on the ports listener (never the console's or
 * the API's origin), in two forms under the server's ingress domain:
 *
 * - `{port}-{id}.{domain}`: E2B's form (`sandbox.getHost(port)` builds it), where `id` is the
 *   environment's id without its `env_` prefix; it answers for any port of a running environment;
 * - `{service}.{env}.{project}.{domain}`: a readable name for a service's first published port,
 *   claimed by the first environment to deploy it (ingress-routes.ts).
 *
 * A name is private unless the compose file lists its service in `x-denv.ingress.public`: a request
 * then carries the environment's ingress token, derived from the server's key (never stored).
 */
import { timingSafeEqual, X509Certificate } from "node:crypto";
import type { TokenAccess } from "../people/access-rules.ts";

/** E2B's envd port: a name on it reaches the E2B gateway (envd's API), not a container's port. */
export const ENVD_PORT = 49983;

/** Where a request's token may be: our header, E2B's, or a query parameter (for a browser). */
export const TOKEN_HEADERS = ["denv-ingress-token", "e2b-traffic-access-token"] as const;
export const TOKEN_QUERY = "_denv_token";

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const PORT_LABEL = /^([1-9][0-9]{0,4})-([a-z0-9]{1,64})$/;

export interface IngressCertificate {
  fingerprint_sha256: string;
  not_after: string;
  subject_alt_names: string[];
}

export type ParsedIngressHost =
  | { form: "port"; host: string; port: number; environmentId: string }
  | { form: "name"; host: string };

export interface IngressSettings {
  /** The domain names live under, lowercase, with the port clients use when it is not the scheme's. */
  domain: string;
  scheme: "http" | "https";
  /** The certificate the ports listener serves (PEM), when it serves TLS. */
  certificatePem?: string | Buffer;
  /** How long a proxied connection may sit without a byte either way (default 1 hour). */
  idleMs?: number;
  /** How long a proxied connection may last at all (default 24 hours). */
  lifetimeMs?: number;
}

export class IngressNames {
  readonly domain: string;
  readonly scheme: "http" | "https";
  readonly idleMs: number;
  readonly lifetimeMs: number;
  /** The domain without a port: what host names end with. */
  private readonly bareDomain: string;
  private certificate: X509Certificate | null;

  private readonly derive: (label: string) => string;

  constructor(settings: IngressSettings, derive: (label: string) => string) {
    this.derive = derive;
    const domain = settings.domain.toLowerCase().replace(/\.$/, "");
    const [bare = "", port] = domain.split(":");
    if (
      !bare.split(".").every((l) => LABEL.test(l)) ||
      (port !== undefined && !/^[1-9][0-9]{0,4}$/.test(port))
    )
      throw new Error(`ingress domain ${settings.domain} is not a DNS name (with an optional :port)`);
    this.domain = domain;
    this.bareDomain = bare;
    this.scheme = settings.scheme;
    this.idleMs = settings.idleMs ?? 3_600_000;
    this.lifetimeMs = settings.lifetimeMs ?? 86_400_000;
    this.certificate = settings.certificatePem ? new X509Certificate(settings.certificatePem) : null;
  }

  /**
   * The environment's ingress token: what a private name asks of every request. A token made for
   * a caller who may only read (`read`) carries only that: requests that change nothing (GET, HEAD,
   * OPTIONS) and no upgrade (access-rules.ts).
   */
  tokenFor(environmentId: string, access: TokenAccess = "full"): string {
    return access === "full"
      ? `dit_${this.derive(`ingress:${environmentId}`)}`
      : `dir_${this.derive(`ingress-read:${environmentId}`)}`;
  }

  /** What a request's token gives on the environment (compared in constant time), or null. */
  tokenAccess(environmentId: string, given: string | null | undefined): TokenAccess | null {
    if (!given) return null;
    for (const access of ["full", "read"] as const) {
      const want = Buffer.from(this.tokenFor(environmentId, access));
      const got = Buffer.from(given);
      if (got.length === want.length && timingSafeEqual(got, want)) return access;
    }
    return null;
  }

  /** `{port}-{id}.{domain}` without the port clients add. */
  portHost(port: number, environmentId: string): string {
    return `${port}-${environmentId.replace(/^env_/, "")}.${this.bareDomain}`;
  }

  /** `{service}.{env}.{project}.{domain}`, or why there is none (a name that is no DNS label). */
  readableHost(service: string, env: string, project: string): { host: string } | { reason: string } {
    for (const [what, name] of [
      ["service", service],
      ["environment", env],
      ["project", project],
    ] as const) {
      if (!LABEL.test(name))
        return {
          reason: `the ${what} name ${name} is not a DNS label (lowercase letters, digits and '-', at most 63)`,
        };
    }
    return { host: `${service}.${env}.${project}.${this.bareDomain}` };
  }

  /** The URL a name is reached at. */
  urlFor(host: string): string {
    const port = this.domain.includes(":") ? `:${this.domain.split(":")[1]}` : "";
    return `${this.scheme}://${host}${port}`;
  }

  /** What a Host header names under the domain, or null when it is not an ingress name. */
  parse(hostHeader: string | undefined | null): ParsedIngressHost | null {
    const host = (hostHeader ?? "").toLowerCase().replace(/:\d+$/, "").replace(/\.$/, "");
    const suffix = `.${this.bareDomain}`;
    if (!host.endsWith(suffix)) return null;
    const labels = host.slice(0, -suffix.length).split(".");
    if (!labels.every((l) => LABEL.test(l))) return null;
    if (labels.length === 1) {
      const m = PORT_LABEL.exec(labels[0] as string);
      if (!m) return null;
      const port = Number(m[1]);
      if (port > 65535) return null;
      return { form: "port", host, port, environmentId: `env_${m[2]}` };
    }
    return labels.length === 3 ? { form: "name", host } : null;
  }

  /** The listener serves a new certificate (a renewal). */
  setCertificate(pem: string | Buffer): void {
    this.certificate = new X509Certificate(pem);
  }

  /** The certificate the listener serves: its fingerprint, expiry and names. */
  certificateInfo(): IngressCertificate | null {
    const c = this.certificate;
    if (!c) return null;
    return {
      fingerprint_sha256: c.fingerprint256.replaceAll(":", "").toLowerCase(),
      not_after: new Date(c.validTo).toISOString(),
      subject_alt_names: (c.subjectAltName ?? "")
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s.startsWith("DNS:"))
        .map((s) => s.slice(4)),
    };
  }

  /** Whether the certificate covers a name (a wildcard covers one label only, as TLS clients check). */
  covers(host: string): boolean | null {
    if (!this.certificate) return null;
    return this.certificate.checkHost(host, { wildcards: true, partialWildcards: false }) !== undefined;
  }
}
