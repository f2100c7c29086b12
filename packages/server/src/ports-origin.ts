/**
 * Where port URLs are served: an origin of their own, never the console's or the API's. A page a
 * sandbox serves runs with that origin's rights in the browser; on the console's origin it could
 * read the console's session and act as whoever opened it. Two forms:
 *
 * - a template with `{token}` in the host name (`https://{token}.ports.example.com`): each port URL
 *   is an origin of its own, so one sandbox's page cannot even read another's (needs a wildcard
 *   DNS name and certificate);
 * - a plain origin (`http://localhost:7071`, a second port): every port URL lives under
 *   `/v1/tunnels/{token}/` there, apart from the console but beside each other.
 */
import { randomBytes } from "node:crypto";

/** The path port URLs live under on a plain (not per-token) ports origin. */
export const TUNNEL_PREFIX = "/v1/tunnels/";

// Lowercase base32: a port URL's token must also be a DNS label (case-insensitive, no "_").
const TOKEN_RE = /^dpu[a-z2-7]{32}$/;
const BASE32 = "abcdefghijklmnopqrstuvwxyz234567";

/** A port URL's token: "dpu" and 160 random bits in lowercase base32. */
export function newPortToken(): string {
  const bytes = randomBytes(20);
  let bits = 0;
  let value = 0;
  let out = "dpu";
  for (const b of bytes) {
    value = (value << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  return out;
}

export class PortsOrigin {
  readonly template: string;
  /** Whether the token is in the host name (one origin per port URL). */
  readonly perToken: boolean;
  private readonly hostSuffix: string;

  constructor(template: string) {
    const perToken = template.includes("{token}");
    let parsed: URL;
    try {
      parsed = new URL(template.replace("{token}", "token"));
    } catch {
      throw new Error(`ports origin ${template} is not a URL (http(s)://host[:port])`);
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
      throw new Error(`ports origin ${template} is not http(s)`);
    if (parsed.pathname !== "/" || parsed.search || parsed.hash || parsed.username)
      throw new Error(`ports origin ${template} has more than a scheme, host and port`);
    if (perToken && !/^https?:\/\/\{token\}\./.test(template))
      throw new Error(`ports origin ${template}: {token} must be the first label of the host name`);
    this.template = template.replace(/\/$/, "");
    this.perToken = perToken;
    // What follows the token in a Host header: ".ports.example.com:8443" (port only when written).
    this.hostSuffix = perToken ? parsed.host.slice("token".length) : "";
  }

  /** The URL a new port URL's token is reached at. */
  urlFor(token: string): string {
    return this.perToken
      ? this.template.replace("{token}", token)
      : `${this.template}${TUNNEL_PREFIX}${token}`;
  }

  /**
   * The token and the service's path for a request on the ports listener, or null when the request
   * names no port URL. The token is matched to its shape before it is looked up.
   */
  route(hostHeader: string | undefined, url: string): { token: string; rest: string } | null {
    if (this.perToken) {
      const host = (hostHeader ?? "").toLowerCase();
      const bare = host.replace(/:\d+$/, "");
      const suffix = this.hostSuffix.replace(/:\d+$/, "");
      if (!bare.endsWith(suffix)) return null;
      const token = bare.slice(0, bare.length - suffix.length);
      if (!TOKEN_RE.test(token)) return null;
      return { token, rest: url.startsWith("/") ? url : `/${url}` };
    }
    if (!url.startsWith(TUNNEL_PREFIX)) return null;
    const tail = url.slice(TUNNEL_PREFIX.length);
    const cut = tail.search(/[/?]/);
    const token = cut < 0 ? tail : tail.slice(0, cut);
    let rest = cut < 0 ? "/" : tail.slice(cut);
    if (rest.startsWith("?")) rest = `/${rest}`;
    return TOKEN_RE.test(token) ? { token, rest } : null;
  }
}
