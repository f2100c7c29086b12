/**
 * Every connection the server opens on a team's behalf is held to the fetch policy, whatever opens
 * it: our own fetches, and the provider SDKs (E2B's, Daytona's, Modal's), AWS's SDK, GitHub's
 * client and the registry pinner, each of which follows redirects, takes URLs from its provider's
 * answers and resolves names on its own. Work done for a team runs inside `onTeamsBehalf`; every
 * TCP connection opened within it, at any depth and on every hop, is checked where all of them
 * pass: `net.Socket.prototype.connect` (what net.connect, tls.connect, http, https, http2 and
 * undici all end in). A refused connection fails before a byte is sent, so a redirect to a host
 * the administrator did not allow never receives the team's key, and nothing it would answer can
 * be reflected.
 *
 * Checked for each connection:
 * - the host (as named, with its port) is one the policy allows (an address given as a literal, with
 *   the TLS server name the connection asks for, counts by that name);
 * - a name resolves only to public addresses, unless the policy names the address itself: an
 *   allowed name that resolves to 127.0.0.1, 10.0.0.0/8, 169.254.169.254 and the like is refused at
 *   the resolution the connection uses (so a name that changes its answer between a check and the
 *   connect gains nothing);
 * - no Unix socket.
 *
 * Outside `onTeamsBehalf` nothing changes: the server's own connections (its store, its replicas,
 * its hosts) are not a team's requests.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { BlockList, isIP, Socket } from "node:net";
import { DenvError } from "@denv/protocol";
import type { FetchPolicy } from "./fetch-policy.ts";

/** Addresses no team's request may reach by a name: this machine, private networks, link-local. */
const NOT_PUBLIC = new BlockList();
for (const [net, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const)
  NOT_PUBLIC.addSubnet(net, prefix, "ipv4");
for (const [net, prefix] of [
  ["::", 128],
  ["::1", 128],
  ["64:ff9b::", 96],
  ["100::", 64],
  ["2001:db8::", 32],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
] as const)
  NOT_PUBLIC.addSubnet(net, prefix, "ipv6");

/** An IPv4 address carried in IPv6 (::ffff:a.b.c.d): judged as the IPv4 address it is. */
function unmapped(address: string): { address: string; family: "ipv4" | "ipv6" } {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (m) return { address: m[1] as string, family: "ipv4" };
  return { address, family: isIP(address) === 6 ? "ipv6" : "ipv4" };
}

/** Whether an address is on the public internet. */
export function isPublicAddress(address: string): boolean {
  const a = unmapped(address);
  return !NOT_PUBLIC.check(a.address, a.family);
}

/** How URL.host spells a host and port. */
const hostPort = (host: string, port: number) => `${isIP(host) === 6 ? `[${host}]` : host}:${port}`;

/** Whether the policy allows a host on a port (a bare entry means the scheme's port: 443 or 80). */
export function policyAllows(policy: FetchPolicy, host: string, port: number): boolean {
  const bare = isIP(host) === 6 ? `[${host}]` : host;
  return (
    policy.allowsHost(hostPort(host, port)) || ((port === 443 || port === 80) && policy.allowsHost(bare))
  );
}

/** Whether a resolved (or literal) address may be connected to: public, or named by the policy. */
export function addressAllowed(policy: FetchPolicy, address: string, port: number): boolean {
  if (policy.entries.includes("*") || isPublicAddress(address)) return true;
  return policyAllows(policy, unmapped(address).address, port) || policyAllows(policy, address, port);
}

/** A connection refused on a team's behalf: said in denv's words, naming the host, never what it holds. */
export class OutboundRefused extends DenvError {
  constructor(message: string) {
    super("forbidden", message);
    this.name = "OutboundRefused";
  }
}

interface Scope {
  policy: FetchPolicy;
  /** What the work is, for the refusal's words ("E2B target e2b"). */
  what: string;
}

const scope = new AsyncLocalStorage<Scope>();
let installed = false;
/** Sockets the server opens for itself (its database), whatever scope asks for them. */
const OWN = Symbol("denv.servers-own-socket");

/**
 * A socket of the server's own, never held to a team's policy: the database's connections, which a
 * query made while working for a team (a hosted target's records) may open from within its scope.
 */
export function serversOwnSocket(): Socket {
  const s = new Socket();
  (s as unknown as Record<symbol, boolean>)[OWN] = true;
  return s;
}

/**
 * Runs `fn` (and everything it starts) on a team's behalf: each connection it opens is held to the
 * policy. Nested calls keep the innermost scope.
 */
export function onTeamsBehalf<T>(policy: FetchPolicy, what: string, fn: () => T): T {
  install();
  return scope.run({ policy, what }, fn);
}

/**
 * An object whose every method runs on a team's behalf (`onTeamsBehalf`): a provider's target, a
 * cloud's driver, a GitHub App's client. Whatever its methods start (streams, timers, an SDK's
 * retries) runs in the same scope.
 */
export function heldToPolicy<T extends object>(obj: T, policy: FetchPolicy, what: string): T {
  return new Proxy(obj, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => onTeamsBehalf(policy, what, () => Reflect.apply(value, target, args));
    },
  });
}

/**
 * The refusal behind an error a library raised (fetch's "fetch failed", an SDK's own wrapper), if
 * a connection was refused: its words are denv's and name only the host, so they can be shown.
 */
export function refusalIn(err: unknown): OutboundRefused | null {
  const seen = new Set<unknown>();
  const queue: unknown[] = [err];
  while (queue.length > 0 && seen.size < 16) {
    const e = queue.shift();
    if (e === null || typeof e !== "object" || seen.has(e)) continue;
    seen.add(e);
    if (e instanceof OutboundRefused) return e;
    queue.push((e as { cause?: unknown }).cause);
    const errors = (e as { errors?: unknown }).errors;
    if (Array.isArray(errors)) queue.push(...errors);
  }
  return null;
}

/** The scope the current code runs in, if any (tests, and code that starts its own work). */
export function outboundScope(): { policy: FetchPolicy; what: string } | undefined {
  return scope.getStore();
}

/**
 * A host's addresses as the connection would resolve them, each checked; throws OutboundRefused.
 * For a child process that resolves for itself (git), which is then given these addresses alone.
 */
export async function resolveChecked(
  policy: FetchPolicy,
  host: string,
  port: number,
  what: string,
): Promise<string[]> {
  if (!policyAllows(policy, host, port))
    throw new OutboundRefused(
      `${what}: ${hostPort(host, port)} is not a host this server connects to for teams`,
    );
  const addresses = isIP(host)
    ? [host]
    : await new Promise<string[]>((resolve, reject) =>
        dnsLookup(host, { all: true }, (err, found) =>
          err
            ? reject(new DenvError("unavailable", `${what}: ${host} does not resolve (${err.code})`))
            : resolve(found.map((f) => f.address)),
        ),
      );
  const refused = addresses.find((a) => !addressAllowed(policy, a, port));
  if (refused !== undefined) throw refusedAddress(what, host, refused);
  return addresses;
}

function refusedAddress(what: string, host: string, address: string): OutboundRefused {
  return new OutboundRefused(
    `${what}: ${host} resolves to ${address}, an address of this machine or a private network, which this server does not connect to for teams (an administrator can allow the address itself: --allow-fetch ${address})`,
  );
}

type LookupFn = (
  hostname: string,
  options: { all?: boolean; family?: number | string },
  callback: (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
) => void;

/** A lookup for one connection that refuses any answer with an address the policy does not allow. */
function checkedLookup(s: Scope, port: number, inner: LookupFn): LookupFn {
  return (hostname, options, callback) =>
    inner(hostname, options, (err, address, family) => {
      if (err) return callback(err, address, family);
      const all = Array.isArray(address) ? address.map((a) => a.address) : [address];
      const refused = all.find((a) => !addressAllowed(s.policy, a, port));
      if (refused !== undefined)
        return callback(refusedAddress(s.what, hostname, refused) as never, address, family);
      callback(null, address, family);
    });
}

/**
 * The one place every TCP connection is opened from. Within a team's scope a connection is checked
 * as the header says; outside it, nothing is different.
 */
function install(): void {
  if (installed) return;
  installed = true;
  const original = Socket.prototype.connect as (...args: unknown[]) => Socket;
  Socket.prototype.connect = function connect(this: Socket, ...args: unknown[]): Socket {
    const s = scope.getStore();
    if (!s || (this as unknown as Record<symbol, boolean>)[OWN]) return original.apply(this, args);
    // net.connect hands over [options, callback] already normalized; a direct call gives them as is.
    const [first, second, third] = Array.isArray(args[0]) ? (args[0] as unknown[]) : args;
    let options: Record<string, unknown>;
    let callback: unknown;
    if (first !== null && typeof first === "object") {
      options = first as Record<string, unknown>;
      callback = second;
    } else if (typeof first === "string" && Number.isNaN(Number(first))) {
      options = { path: first };
      callback = second;
    } else {
      options = { port: first, ...(typeof second === "string" ? { host: second } : {}) };
      callback = typeof second === "function" ? second : third;
    }
    const refuse = (err: DenvError) => {
      process.nextTick(() => this.destroy(err));
      return this;
    };
    // (http's agent sets path to null so that net does not take the request's path for a socket's.)
    if (typeof options.path === "string" && options.path !== "")
      return refuse(
        new OutboundRefused(`${s.what}: a local socket is not a place this server connects to for teams`),
      );
    const host = String(options.host ?? "localhost");
    const port = Number(options.port);
    // An address given as a literal with the TLS name it is for (a client that resolved the name
    // itself, as gRPC does) is judged by that name, and its address by itself.
    const servername = typeof options.servername === "string" ? options.servername : null;
    const named = isIP(host) && servername ? servername : host;
    if (!policyAllows(s.policy, named, port))
      return refuse(
        new OutboundRefused(
          `${s.what}: ${hostPort(named, port)} is not a host this server connects to for teams (an administrator can allow it: denv server --allow-fetch ${hostPort(named, port)})`,
        ),
      );
    if (isIP(host)) {
      if (!addressAllowed(s.policy, host, port)) return refuse(refusedAddress(s.what, named, host));
      return original.call(this, options, callback);
    }
    const inner = (typeof options.lookup === "function" ? options.lookup : dnsLookup) as LookupFn;
    return original.call(this, { ...options, lookup: checkedLookup(s, port, inner) }, callback);
  } as typeof Socket.prototype.connect;
}
