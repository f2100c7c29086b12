/**
 * The part of the Hetzner Cloud API (https://docs.hetzner.cloud/reference/cloud) denv uses to
 * create hosts: create a server from an image with cloud-init user data and labels, read it, delete
 * it, list by label. Errors keep Hetzner's own code and message (e.g. resource_limit_exceeded).
 */

import { DenvError } from "@denv/protocol";
import { readBounded } from "@denv/spec";
import type { FetchPolicy } from "../fetch-policy.ts";
import { refusalIn } from "../outbound-guard.ts";
import type { CloudServer, MachineDriver } from "./machine-driver.ts";

export const HETZNER_API = "https://api.hetzner.cloud/v1";

export type { CloudServer };

export class HetznerError extends DenvError {
  readonly providerCode: string;
  constructor(status: number, providerCode: string, message: string) {
    super(
      status === 401 || status === 403 ? "forbidden" : status === 404 ? "not_found" : "unavailable",
      message,
      {
        details: { provider: "hetzner", provider_code: providerCode, status },
      },
    );
    this.providerCode = providerCode;
  }
}

/** Hetzner's answers are small JSON documents; anything larger is not read. */
const MAX_ANSWER_BYTES = 4 * 1024 * 1024;

/**
 * Checks an API endpoint a team gives for its cloud (default: Hetzner's own): https, or http to a
 * host the administrator allowed; no credentials, query or fragment (a `#` would cut the path the
 * driver appends off the request); on an allowed host. Returns it normalised, or null for the default.
 */
export function checkCloudApiUrl(apiUrl: string | null, policy: FetchPolicy): string | null {
  if (apiUrl === null) return null;
  let url: URL;
  try {
    url = new URL(apiUrl);
  } catch {
    throw new DenvError("invalid_argument", "api_url is not a URL");
  }
  if (url.protocol !== "https:" && url.protocol !== "http:")
    throw new DenvError("invalid_argument", "api_url must be an https:// URL");
  if (url.username || url.password || url.search || url.hash || apiUrl.includes("#") || apiUrl.includes("?"))
    throw new DenvError("invalid_argument", "api_url must have no credentials, query or fragment");
  policy.check(url, "api_url");
  return url.href.replace(/\/$/, "");
}

export class HetznerDriver implements MachineDriver {
  private readonly token: string;
  private readonly apiUrl: string;

  constructor(options: { token: string; apiUrl?: string | null }) {
    this.token = options.token;
    this.apiUrl = (options.apiUrl ?? HETZNER_API).replace(/\/$/, "");
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    let res: Response;
    try {
      res = await fetch(`${this.apiUrl}${path}`, {
        method,
        // A redirect would carry the token elsewhere: it is an error, not followed.
        redirect: "manual",
        headers: {
          authorization: `Bearer ${this.token}`,
          ...(body ? { "content-type": "application/json" } : {}),
        },
        body: body ? JSON.stringify(body) : undefined,
        signal: AbortSignal.timeout(60_000),
      });
    } catch (err) {
      // A connection the fetch policy refused says so; anything else is the API's silence.
      throw refusalIn(err) ?? new DenvError("unavailable", "the Hetzner API did not answer");
    }
    if (res.status >= 300 && res.status < 400) {
      await res.body?.cancel().catch(() => {});
      throw new HetznerError(res.status, `http_${res.status}`, "the Hetzner API answered with a redirect");
    }
    const text = (
      await readBounded(res, MAX_ANSWER_BYTES, "the Hetzner API's answer", "unavailable")
    ).toString("utf8");
    let data: { error?: { code?: unknown; message?: unknown } };
    try {
      data = (text ? JSON.parse(text) : {}) as typeof data;
    } catch {
      // What the endpoint said is not repeated: it is not Hetzner's JSON.
      throw new HetznerError(
        res.status,
        `http_${res.status}`,
        `the Hetzner API answered HTTP ${res.status} with no JSON`,
      );
    }
    if (!res.ok) {
      const e = typeof data.error === "object" && data.error ? data.error : {};
      const code = typeof e.code === "string" ? e.code.slice(0, 64) : `http_${res.status}`;
      const message = typeof e.message === "string" ? `: ${e.message.slice(0, 300)}` : "";
      throw new HetznerError(
        res.status,
        code,
        `Hetzner refused ${method} ${path.split("?")[0]}: ${code}${message}`,
      );
    }
    return data as T;
  }

  async createServer(o: {
    name: string;
    serverType: string;
    location: string;
    image: string;
    userData: string;
    labels: Record<string, string>;
  }): Promise<CloudServer> {
    const r = await this.call<{ server: CloudServer }>("POST", "/servers", {
      name: o.name,
      server_type: o.serverType,
      location: o.location,
      image: o.image,
      user_data: o.userData,
      labels: o.labels,
      start_after_create: true,
    });
    return r.server;
  }

  async getServer(id: number | string): Promise<CloudServer> {
    return (await this.call<{ server: CloudServer }>("GET", `/servers/${id}`)).server;
  }

  /** Idempotent: a server already gone is not an error. */
  async deleteServer(id: number | string): Promise<void> {
    try {
      await this.call("DELETE", `/servers/${id}`);
    } catch (err) {
      if (!(err instanceof HetznerError && err.code === "not_found")) throw err;
    }
  }

  async listServers(labelSelector: string): Promise<CloudServer[]> {
    return (
      await this.call<{ servers: CloudServer[] }>(
        "GET",
        `/servers?label_selector=${encodeURIComponent(labelSelector)}`,
      )
    ).servers;
  }
}
