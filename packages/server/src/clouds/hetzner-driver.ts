/**
 * The part of the Hetzner Cloud API (https://docs.hetzner.cloud/reference/cloud) denv uses to
 * create hosts: create a server from an image with cloud-init user data and labels, read it, delete
 * it, list by label. Errors keep Hetzner's own code and message (e.g. resource_limit_exceeded).
 */
import { DenvError } from "@denv/spec";

export const HETZNER_API = "https://api.hetzner.cloud/v1";

export interface CloudServer {
  id: number;
  name: string;
  status: string;
  labels: Record<string, string>;
}

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

export class HetznerDriver {
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
        headers: {
          authorization: `Bearer ${this.token}`,
          ...(body ? { "content-type": "application/json" } : {}),
        },
        body: body ? JSON.stringify(body) : undefined,
        signal: AbortSignal.timeout(60_000),
      });
    } catch (err) {
      throw new DenvError(
        "unavailable",
        `the Hetzner API at ${this.apiUrl} did not answer: ${(err as Error).message}`,
      );
    }
    const text = await res.text();
    const data = (text ? JSON.parse(text) : {}) as { error?: { code?: string; message?: string } };
    if (!res.ok) {
      const e = data.error ?? {};
      throw new HetznerError(
        res.status,
        String(e.code ?? `http_${res.status}`),
        `Hetzner refused ${method} ${path.split("?")[0]}: ${e.code ?? res.status}: ${e.message ?? text.slice(0, 200)}`,
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

  async getServer(id: number): Promise<CloudServer> {
    return (await this.call<{ server: CloudServer }>("GET", `/servers/${id}`)).server;
  }

  /** Idempotent: a server already gone is not an error. */
  async deleteServer(id: number): Promise<void> {
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
