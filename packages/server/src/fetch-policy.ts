/**
 * What the control plane may fetch: URLs a team chose (an image's registry, a git source, a cloud
 * API endpoint) are fetched only when an administrator allowed their host.
 *
 * Invariant (DESIGN, trust boundaries): the control plane never fetches a URL a team chose unless an
 * administrator allowed that host; it never follows redirects or auth realms off the host it was
 * asked about (an auth realm on another host must itself be allowed); it bounds every answer it
 * reads. Without this, a team reads the server's internal network through denv (SSRF): the answer
 * or the error comes back in an API response or a deployment's reason.
 *
 * Entries: `host` (default port), `host:port`, `*.domain` (any subdomain, default port), or `*`
 * (anything: for a server on a closed network only).
 */
import { DenvError } from "@denv/protocol";

/** Public registries, git hosts and cloud APIs a server fetches from unless configured otherwise. */
export const DEFAULT_FETCH_ALLOW: readonly string[] = [
  // container registries (and Docker Hub's token service)
  "docker.io",
  "registry-1.docker.io",
  "auth.docker.io",
  "ghcr.io",
  "quay.io",
  "gcr.io",
  "*.gcr.io",
  "*.pkg.dev",
  "public.ecr.aws",
  "registry.k8s.io",
  "mcr.microsoft.com",
  "registry.gitlab.com",
  "nvcr.io",
  // git hosts
  "github.com",
  "gitlab.com",
  "bitbucket.org",
  "codeberg.org",
  // cloud APIs, and GitHub's (a team's App: github/github-client.ts)
  "api.hetzner.cloud",
  "api.github.com",
];

/** Parses a comma- or space-separated list (DENV_FETCH_ALLOW, --allow-fetch). */
export function parseFetchAllow(text: string | undefined): string[] {
  return (text ?? "")
    .split(/[,\s]+/)
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);
}

export class FetchPolicy {
  readonly entries: readonly string[];

  constructor(entries: readonly string[]) {
    this.entries = entries.map((e) => e.toLowerCase());
  }

  /** The defaults plus DENV_FETCH_ALLOW plus what the server was started with. */
  static standard(extra: readonly string[] = [], env = process.env.DENV_FETCH_ALLOW): FetchPolicy {
    return new FetchPolicy([...DEFAULT_FETCH_ALLOW, ...parseFetchAllow(env), ...extra]);
  }

  /** Whether a host (`name`, `name:port`, `[v6]:port`, as URL.host spells it) may be fetched. */
  allowsHost(host: string): boolean {
    const h = host.toLowerCase();
    const hasPort = /:\d+$/.test(h) && !/^\[[^\]]*\]$/.test(h);
    const name = hasPort ? h.replace(/:\d+$/, "") : h;
    return this.entries.some((e) => {
      if (e === "*") return true;
      if (e.startsWith("*.")) return !hasPort && name.endsWith(e.slice(1)) && name.length > e.length - 1;
      return e === h;
    });
  }

  /** This policy and some more entries (a provider's own hosts, for its target alone). */
  with(extra: readonly string[]): FetchPolicy {
    return new FetchPolicy([...this.entries, ...extra]);
  }

  allows(url: URL): boolean {
    return this.allowsHost(url.host);
  }

  /** Throws a clear refusal when the URL's host is not allowed. */
  check(url: URL, what: string): void {
    if (this.allows(url)) return;
    throw new DenvError(
      "forbidden",
      `${what}: ${url.host} is not a host this server fetches from; an administrator can allow it (denv server --allow-fetch ${url.host}, or DENV_FETCH_ALLOW)`,
    );
  }
}
