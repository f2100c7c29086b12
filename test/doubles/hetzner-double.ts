/**
 * A local server implementing the part of the Hetzner Cloud API denv uses (POST/GET/DELETE
 * /v1/servers, GET /v1/servers?label_selector=, bearer auth, Hetzner's error shape), which boots
 * each server it is asked to create as a fresh Debian host (fresh-host-helpers.ts) running the
 * cloud-init user data it was given. Tests can make the next create fail (an API error, a quota)
 * or make machines that boot but never join.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import { bootFreshHost, type FreshHost, type Lab } from "../harness/fresh-host.ts";

export interface FakeServer {
  id: number;
  name: string;
  status: string;
  server_type: string;
  location: string;
  image: string;
  labels: Record<string, string>;
  user_data: string;
  host?: FreshHost;
  booting?: Promise<void>;
}

export class HetznerDouble {
  readonly token: string;
  readonly servers = new Map<number, FakeServer>();
  readonly calls: { method: string; path: string; body?: any }[] = [];
  /** The next create answers this error instead. */
  failNextCreate: { status: number; code: string; message: string } | null = null;
  /** Machines boot, but their bootstrap fails before joining. */
  neverJoin = false;
  private nextId = 1000;
  private http: Server | null = null;
  url = "";
  private readonly lab: Lab;

  constructor(lab: Lab, token: string) {
    this.lab = lab;
    this.token = token;
  }

  async start(): Promise<void> {
    this.http = createServer((req, res) => {
      void this.handle(req).then(
        ({ status, body }) => {
          res.writeHead(status, { "content-type": "application/json" });
          res.end(JSON.stringify(body));
        },
        (err: Error) => {
          res.writeHead(500, { "content-type": "application/json" });
          res.end(JSON.stringify({ error: { code: "server_error", message: err.message } }));
        },
      );
    });
    await new Promise<void>((r) => this.http?.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.http.address() as { port: number }).port}/v1`;
  }

  private err(status: number, code: string, message: string) {
    return { status, body: { error: { code, message, details: {} } } };
  }

  private view(s: FakeServer) {
    return {
      id: s.id,
      name: s.name,
      status: s.status,
      server_type: { name: s.server_type },
      datacenter: { location: { name: s.location } },
      image: { name: s.image },
      labels: s.labels,
      public_net: { ipv4: { ip: "203.0.113.10" } },
    };
  }

  private async handle(req: IncomingMessage): Promise<{ status: number; body: unknown }> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks).toString();
    const body = raw ? JSON.parse(raw) : undefined;
    const url = new URL(req.url ?? "/", "http://x");
    this.calls.push({ method: req.method ?? "", path: url.pathname + url.search, body });
    if (req.headers.authorization !== `Bearer ${this.token}`)
      return this.err(401, "unauthorized", "unable to authenticate");
    const m = /^\/v1\/servers(?:\/(\d+))?$/.exec(url.pathname);
    if (!m) return this.err(404, "not_found", "not found");
    const id = m[1] ? Number(m[1]) : null;
    if (req.method === "GET" && id === null) {
      const sel = url.searchParams.get("label_selector");
      const servers = [...this.servers.values()].filter((s) => !sel || sel in s.labels);
      return { status: 200, body: { servers: servers.map((s) => this.view(s)), meta: { pagination: {} } } };
    }
    if (req.method === "POST" && id === null) {
      for (const f of ["name", "server_type", "image"])
        if (typeof body?.[f] !== "string")
          return this.err(422, "invalid_input", `invalid input in field '${f}'`);
      if (this.failNextCreate) {
        const e = this.failNextCreate;
        this.failNextCreate = null;
        return this.err(e.status, e.code, e.message);
      }
      const s: FakeServer = {
        id: this.nextId++,
        name: body.name,
        status: "initializing",
        server_type: body.server_type,
        location: body.location,
        image: body.image,
        labels: body.labels ?? {},
        user_data: body.user_data ?? "",
      };
      this.servers.set(s.id, s);
      // The machine boots in the background, as a real one does after the API answered.
      const userData = this.neverJoin ? "#!/bin/sh\necho 'bootstrap failed' >&2\nexit 1\n" : s.user_data;
      s.booting = bootFreshHost(this.lab, { name: `${this.lab.runId}-${s.name}`, userData }).then((h) => {
        s.host = h;
        if (this.servers.has(s.id)) s.status = "running";
        else void h.remove(); // deleted while it booted
      });
      s.booting.catch(() => {});
      return {
        status: 201,
        body: { server: this.view(s), action: { id: s.id, status: "running" }, root_password: null },
      };
    }
    const s = id !== null ? this.servers.get(id) : undefined;
    if (!s) return this.err(404, "not_found", `server with ID '${id}' not found`);
    if (req.method === "GET") return { status: 200, body: { server: this.view(s) } };
    if (req.method === "DELETE") {
      this.servers.delete(s.id);
      await s.booting?.catch(() => {});
      await s.host?.remove();
      return { status: 200, body: { action: { id: s.id, command: "delete_server", status: "running" } } };
    }
    return this.err(405, "method_not_allowed", "method not allowed");
  }

  async close(): Promise<void> {
    for (const s of this.servers.values()) {
      await s.booting?.catch(() => {});
      await s.host?.remove();
    }
    this.http?.close();
  }
}
