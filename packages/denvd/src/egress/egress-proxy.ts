/**
 * An environment's egress proxy: the only way out of a stack whose x-denv.egress is a policy. Its
 * network has no route out; the stack's egress gateway (denv-agent relay) hands every connection
 * a service makes to it here, on the host, where the policy (@denv/spec's egress-policy.ts)
 * decides each one:
 * - HTTP, as a forward proxy: the absolute URL names the destination; a Host header that names
 *   another host is refused (an allowed address must not serve a forbidden virtual host);
 * - HTTPS and any TCP by CONNECT host:port, passed through undecrypted: when the tunnel's first
 *   bytes are a TLS ClientHello, its server name must be the CONNECT's (else the tunnel closes).
 * A name is resolved here, once per connection, and the connection goes to the very address that
 * was checked: DNS that answers differently between the check and the connect (rebinding) cannot
 * move it. A refusal is immediate and readable: HTTP 403 with a body that says which rule or
 * why, and which destinations the policy allows. Every connection, allowed or refused, is one
 * record for the environment's egress log. A connection idle for idleTimeoutMs is closed, and
 * what a caller may send through one connection is bounded (maxUploadBytes).
 */
import { lookup } from "node:dns/promises";
import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from "node:http";
import { connect as netConnect, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { EgressRecord } from "@denv/protocol";
import {
  decideEgress,
  type EgressDecision,
  ipv4Number,
  normalizeHostName,
  type ParsedEgressPolicy,
} from "@denv/spec";
import { MAX_HELLO_BYTES, readClientHello } from "./tls-client-hello.ts";

export const DEFAULT_IDLE_TIMEOUT_MS = 120_000;
export const DEFAULT_MAX_UPLOAD_BYTES = 1024 ** 3;
const CONNECT_TIMEOUT_MS = 10_000;

/** One connection through the proxy, as the environment's egress log keeps it (the protocol's type). */
export type { EgressRecord };

export interface EgressProxyOptions {
  /** The policy now: read per connection, so a change applies to the next one. */
  policy: () => ParsedEgressPolicy;
  /** A name's IPv4 addresses (default: the host's resolver). */
  resolve?: (name: string) => Promise<string[]>;
  /** Opens the connection to a checked address (default: a TCP connect from the host). */
  connect?: (address: string, port: number) => Socket;
  /** This machine's own addresses and networks (CIDRs): never reached whatever the policy. */
  neverReach?: () => readonly string[];
  /** Which service a caller's address is. */
  serviceOf?: (address: string) => string | null;
  record: (r: EgressRecord) => void;
  idleTimeoutMs?: number;
  maxUploadBytes?: number;
}

interface Caller {
  address: string;
  port: number;
  service: string | null;
}

const defaultResolve = async (name: string) =>
  (await lookup(name, { all: true, family: 4 })).map((a) => a.address);

/** host:port of a CONNECT (IPv4 or a name; an IPv6 literal is refused). */
function splitTarget(target: string): { host: string; port: number } | null {
  const m = /^([^:[\]\s/]+):(\d{1,5})$/.exec(target);
  if (!m) return null;
  const port = Number(m[2]);
  return port >= 1 && port <= 65535 ? { host: m[1] as string, port } : null;
}

export class EgressProxy {
  private readonly server: Server;
  private readonly callers = new WeakMap<object, Caller>();
  private readonly opts: EgressProxyOptions;
  private readonly idleMs: number;
  private readonly maxUpload: number;
  /** Connections open now, with what they were allowed to: a policy change re-judges each. */
  private readonly open = new Set<{ host: string; port: number; address: string; close: () => void }>();

  constructor(opts: EgressProxyOptions) {
    this.opts = opts;
    this.idleMs = opts.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    this.maxUpload = opts.maxUploadBytes ?? DEFAULT_MAX_UPLOAD_BYTES;
    this.server = createServer({ requestTimeout: 0, headersTimeout: 30_000, keepAliveTimeout: 5_000 });
    this.server.on("request", (req, res) => {
      this.forward(req, res).catch((err: Error) => res.destroy(err));
    });
    this.server.on("connect", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      this.tunnel(req, socket as Socket, head).catch(() => socket.destroy());
    });
    this.server.on("clientError", (_err, socket) => {
      if (socket.writable) socket.end("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
      else socket.destroy();
    });
  }

  /** Serves one caller's connection, handed over by the gateway. */
  accept(socket: Socket, caller: { address: string; port: number }): void {
    const service = this.opts.serviceOf?.(caller.address) ?? null;
    this.callers.set(socket, { ...caller, service });
    socket.setTimeout(this.idleMs, () => socket.destroy());
    this.server.emit("connection", socket);
  }

  /**
   * Re-judges every open connection by the policy now (after a change): one the policy no longer
   * allows is closed at once, so a narrowed allow list takes hold of what is already open too.
   * The address each connected to is judged again, not looked up again. Returns how many closed.
   */
  recheck(): number {
    const policy = this.opts.policy();
    const never = this.opts.neverReach?.() ?? [];
    let closed = 0;
    for (const c of this.open) {
      const literal = ipv4Number(c.host.replace(/\.$/, "")) !== null;
      const d = decideEgress(
        policy,
        literal ? { name: c.host, port: c.port } : { name: c.host, address: c.address, port: c.port },
        never,
      );
      if (d.allowed) continue;
      this.open.delete(c);
      c.close();
      closed++;
    }
    return closed;
  }

  close(): void {
    this.server.close();
    this.server.closeAllConnections();
  }

  private caller(socket: object): Caller {
    return this.callers.get(socket) ?? { address: "unknown", port: 0, service: null };
  }

  /** The decision for host:port and the address to connect to when allowed. */
  private async decide(
    host: string,
    port: number,
  ): Promise<{ decision: EgressDecision; address: string | null }> {
    const policy = this.opts.policy();
    const never = this.opts.neverReach?.() ?? [];
    const literal = ipv4Number(host.replace(/\.$/, "")) !== null;
    // The name is judged before anything is resolved: only a name a rule allows is ever looked up
    // (a lookup of any name the caller makes up would carry what it encodes to outside resolvers).
    const first = decideEgress(policy, { name: host, port }, never);
    if (!first.allowed) return { decision: first, address: null };
    if (literal) return { decision: first, address: host.replace(/\.$/, "") };
    const name = normalizeHostName(host) as string;
    let addresses: string[];
    try {
      addresses = await (this.opts.resolve ?? defaultResolve)(name);
    } catch (err) {
      return {
        decision: {
          allowed: false,
          rule: null,
          reason: `${name} did not resolve (${(err as Error).message})`,
        },
        address: null,
      };
    }
    let refused: EgressDecision | null = null;
    for (const address of addresses) {
      const d = decideEgress(policy, { name, address, port }, never);
      if (d.allowed) return { decision: d, address };
      refused ??= d;
    }
    return {
      decision: refused ?? { allowed: false, rule: null, reason: `${name} has no IPv4 address` },
      address: null,
    };
  }

  private refusalBody(reason: string): string {
    const allow = this.opts.policy().allow.map((r) => r.text);
    const listed =
      allow.slice(0, 20).join(", ") + (allow.length > 20 ? `, and ${allow.length - 20} more` : "");
    return `denv egress: refused: ${reason}.\nThis environment's egress policy (x-denv.egress) allows: ${listed || "nothing"}.\n`;
  }

  private dial(address: string, port: number): Socket {
    const s = (this.opts.connect ?? ((a, p) => netConnect({ host: a, port: p })))(address, port);
    s.setTimeout(CONNECT_TIMEOUT_MS, () => s.destroy(new Error(`no answer from ${address}:${port}`)));
    s.once("connect", () => s.setTimeout(this.idleMs));
    return s;
  }

  private async forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const begun = performance.now();
    const caller = this.caller(req.socket);
    const base = {
      at: new Date().toISOString(),
      service: caller.service,
      client: `${caller.address}:${caller.port}`,
      kind: "http" as const,
    };
    const refuse = (
      status: number,
      destination: string,
      decision: EgressDecision,
      address: string | null,
    ) => {
      this.opts.record({
        ...base,
        destination,
        address,
        allowed: false,
        rule: decision.rule,
        reason: decision.reason,
        bytes_out: 0,
        bytes_in: 0,
        ms: Math.round(performance.now() - begun),
      });
      const body = this.refusalBody(decision.reason);
      res.writeHead(status, { "content-type": "text/plain; charset=utf-8", connection: "close" }).end(body);
    };
    const url = URL.canParse(req.url ?? "") ? new URL(req.url ?? "") : null;
    if (url?.protocol !== "http:" || !url.hostname) {
      const reason = `${JSON.stringify((req.url ?? "").slice(0, 200))} is not an absolute http:// URL (https goes by CONNECT)`;
      return refuse(400, (req.url ?? "").slice(0, 200), { allowed: false, rule: null, reason }, null);
    }
    const port = Number(url.port || 80);
    const destination = `${url.hostname}:${port}`;
    const hostHeader = req.headers.host;
    if (hostHeader !== undefined) {
      const m = /^([^:]+)(?::(\d+))?$/.exec(hostHeader);
      const sameHost =
        m && (m[1] as string).toLowerCase().replace(/\.$/, "") === url.hostname.replace(/\.$/, "");
      if (!sameHost || Number(m?.[2] ?? 80) !== port) {
        const reason = `the Host header (${hostHeader.slice(0, 100)}) names another host than the URL (${destination})`;
        return refuse(400, destination, { allowed: false, rule: null, reason }, null);
      }
    }
    const { decision, address } = await this.decide(url.hostname, port);
    if (!decision.allowed || !address) return refuse(403, destination, decision, address);
    let bytesOut = 0;
    let error: string | undefined;
    let upstreamSocket: Socket | null = null;
    const headers = { ...req.headers };
    for (const h of ["proxy-connection", "proxy-authorization", "connection", "keep-alive"])
      delete headers[h];
    const upstream = request({
      method: req.method,
      path: `${url.pathname}${url.search}`,
      headers: { ...headers, host: url.host },
      createConnection: () => {
        upstreamSocket = this.dial(address, port);
        return upstreamSocket;
      },
    });
    const done = new Promise<void>((resolve) => {
      res.once("close", resolve);
    });
    upstream.on("response", (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, answer.headers);
      answer.pipe(res);
    });
    upstream.on("error", (err) => {
      error ??= err.message;
      if (!res.headersSent)
        res
          .writeHead(502, { "content-type": "text/plain; charset=utf-8", connection: "close" })
          .end(
            `denv egress: ${destination} was allowed (${decision.rule}) but did not answer: ${err.message}\n`,
          );
      else res.destroy();
    });
    req.on("data", (chunk: Buffer) => {
      bytesOut += chunk.length;
      if (bytesOut > this.maxUpload) {
        error = `the request body passed the upload limit of ${this.maxUpload} bytes`;
        upstream.destroy(new Error(error));
        req.socket.destroy();
      }
    });
    req.pipe(upstream);
    const entry = {
      host: url.hostname,
      port,
      address,
      close: () => {
        error ??= "closed: the egress policy changed and no longer allows it";
        upstream.destroy();
        res.destroy();
      },
    };
    this.open.add(entry);
    await done;
    this.open.delete(entry);
    const s = upstreamSocket as Socket | null;
    this.opts.record({
      ...base,
      destination,
      address,
      allowed: true,
      rule: decision.rule,
      reason: decision.reason,
      ...(error ? { error } : {}),
      bytes_out: bytesOut,
      bytes_in: s?.bytesRead ?? 0,
      ms: Math.round(performance.now() - begun),
    });
  }

  private async tunnel(req: IncomingMessage, client: Socket, head: Buffer): Promise<void> {
    const begun = performance.now();
    const caller = this.caller(client);
    const target = splitTarget(req.url ?? "");
    const destination = (req.url ?? "").slice(0, 300);
    const record = (r: Omit<EgressRecord, "at" | "service" | "client" | "kind" | "destination" | "ms">) =>
      this.opts.record({
        at: new Date().toISOString(),
        service: caller.service,
        client: `${caller.address}:${caller.port}`,
        kind: "connect",
        destination,
        ...r,
        ms: Math.round(performance.now() - begun),
      });
    const refuse = (status: string, decision: EgressDecision, address: string | null) => {
      record({
        address,
        allowed: false,
        rule: decision.rule,
        reason: decision.reason,
        bytes_out: 0,
        bytes_in: 0,
      });
      const body = this.refusalBody(decision.reason);
      client.end(
        `HTTP/1.1 ${status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    };
    if (!target)
      return refuse(
        "400 Bad Request",
        {
          allowed: false,
          rule: null,
          reason: `${JSON.stringify(destination)} is not host:port (IPv4 or a name)`,
        },
        null,
      );
    const { decision, address } = await this.decide(target.host, target.port);
    if (!decision.allowed || !address) return refuse("403 Forbidden", decision, address);
    const upstream = this.dial(address, target.port);
    let failed: string | undefined;
    const opened = await new Promise<boolean>((resolve) => {
      upstream.once("connect", () => resolve(true));
      upstream.once("error", (err) => {
        failed = err.message;
        resolve(false);
      });
    });
    if (!opened) {
      record({
        address,
        allowed: true,
        rule: decision.rule,
        reason: decision.reason,
        error: failed,
        bytes_out: 0,
        bytes_in: 0,
      });
      const body = `denv egress: ${destination} was allowed (${decision.rule}) but did not answer: ${failed}\n`;
      client.end(
        `HTTP/1.1 502 Bad Gateway\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
      return;
    }
    client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
    // What the server says passes at once; the caller's first bytes are read before any of them
    // pass: a TLS hello must name the CONNECT's host.
    upstream.pipe(client);
    const first = await this.firstBytes(client, head);
    const hello = readClientHello(first);
    const name = normalizeHostName(target.host);
    let mismatch: string | null = null;
    if (hello.kind === "malformed") mismatch = `a TLS handshake that is not well-formed (${hello.why})`;
    else if (
      hello.kind === "hello" &&
      hello.serverName !== null &&
      name !== normalizeHostName(hello.serverName)
    )
      mismatch = `the TLS server name ${hello.serverName.slice(0, 100)} is not the CONNECT's host ${target.host}`;
    else if (hello.kind === "partial" && first.length > 0) mismatch = "a TLS hello cut short";
    if (mismatch) {
      upstream.destroy();
      client.destroy();
      record({ address, allowed: false, rule: null, reason: mismatch, bytes_out: 0, bytes_in: 0 });
      return;
    }
    if (!first.length) {
      // The caller left without a word: nothing to pass on.
      upstream.destroy();
      client.destroy();
      record({
        address,
        allowed: true,
        rule: decision.rule,
        reason: decision.reason,
        bytes_out: 0,
        bytes_in: 0,
      });
      return;
    }
    let bytesOut = first.length;
    let error = failed;
    upstream.write(first);
    client.on("data", (chunk: Buffer) => {
      bytesOut += chunk.length;
      if (bytesOut > this.maxUpload) {
        error = `the tunnel passed the upload limit of ${this.maxUpload} bytes`;
        client.destroy();
        upstream.destroy();
      }
    });
    client.pipe(upstream);
    const entry = {
      host: target.host,
      port: target.port,
      address,
      close: () => {
        error ??= "closed: the egress policy changed and no longer allows it";
        client.destroy();
        upstream.destroy();
      },
    };
    this.open.add(entry);
    const ended = (s: Socket) => new Promise<void>((r) => s.once("close", () => r()));
    upstream.on("error", (err) => {
      error ??= err.message;
      client.destroy();
    });
    client.on("error", () => upstream.destroy());
    // A side that has closed leaves the other's pipe paused on what it still sends (a TLS
    // close_notify, say): drained, its end is read and it closes too, instead of idling out.
    upstream.once("close", () => client.resume());
    client.once("close", () => upstream.destroy());
    await Promise.all([ended(client), ended(upstream)]);
    this.open.delete(entry);
    record({
      address,
      allowed: true,
      rule: decision.rule,
      reason: decision.reason,
      ...(error ? { error } : {}),
      bytes_out: bytesOut,
      bytes_in: upstream.bytesRead,
    });
  }

  /**
   * What the caller sends first through a tunnel: a whole ClientHello, or the first bytes of
   * something else. No timer: a caller that sends nothing is closed by the idle timeout, and the
   * server's own first words (a protocol whose server speaks first) already pass meanwhile.
   */
  private firstBytes(client: Socket, head: Buffer): Promise<Buffer> {
    let got = head;
    const enough = () => readClientHello(got).kind !== "partial" || got.length >= MAX_HELLO_BYTES;
    if (got.length && enough()) return Promise.resolve(got);
    return new Promise((resolve) => {
      const finish = () => {
        client.off("data", onData);
        client.off("end", finish);
        client.off("close", finish);
        client.pause();
        resolve(got);
      };
      const onData = (chunk: Buffer) => {
        got = Buffer.concat([got, chunk]);
        if (enough()) finish();
      };
      client.on("data", onData);
      client.once("end", finish);
      client.once("close", finish);
      client.resume();
    });
  }
}
