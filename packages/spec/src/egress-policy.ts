/**
 * Egress policies: the destinations an environment may reach through its egress proxy, and the
 * decision for one connection. Written once here: the compose validator checks a policy's rules
 * with it, the control plane a change's, and denvd's proxy decides every connection with it.
 *
 * A rule (docs/egress.md):
 *   rule  := host [":" port ["-" port]]
 *   host  := name | "*." name | IPv4 address ["/" prefix length]
 * A rule without a port allows 80 and 443 (the web); a name is matched case-insensitively, with
 * one trailing dot ignored; "*.example.test" matches every name below example.test, never
 * example.test itself. Names are ASCII only: an internationalised name is written in its xn--
 * form, so a look-alike in other scripts can never match a rule written in Latin letters (the
 * proxy refuses a non-ASCII name outright). An address matches only address rules: a name rule
 * never lets a raw address through, whatever the name resolves to, and an address rule never
 * lets a name through (only a name a name rule allows is looked up). Deny rules win over allow
 * rules; what no allow rule matches is refused. Whatever a policy says, some addresses are never
 * reached (neverReached): this machine's own loopback and link-local ones (the cloud metadata
 * address among them), multicast and the unspecified ones.
 */

/** Most rules a policy may hold in each list. */
export const MAX_EGRESS_RULES = 256;
/** The ports a rule without one allows. */
export const WEB_PORTS = [80, 443] as const;

export interface EgressRule {
  /** As written, normalised (lower case, no trailing dot): what a decision names. */
  text: string;
  kind: "name" | "wildcard" | "cidr";
  /** name: the name; wildcard: the suffix below which names match (without "*."). */
  name?: string;
  /** cidr: the network as a 32-bit number and its prefix length. */
  base?: number;
  bits?: number;
  /** Inclusive port ranges; WEB_PORTS where the rule names none. */
  ports: [number, number][];
}

export interface EgressPolicy {
  allow: string[];
  deny: string[];
}

export interface ParsedEgressPolicy {
  allow: EgressRule[];
  deny: EgressRule[];
}

export interface EgressDestination {
  /** The name asked for (a URL's host, a CONNECT's, a TLS server name); absent: an address alone. */
  name?: string;
  /** The IPv4 address the connection would go to (the proxy's own resolution of the name). */
  address?: string;
  port: number;
}

export interface EgressDecision {
  allowed: boolean;
  /** The rule that decided (as normalised), or null where none did. */
  rule: string | null;
  /** Why, in words an agent's tool can show. */
  reason: string;
}

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;
const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** a.b.c.d → its 32-bit number; null for what is not one. */
export function ipv4Number(text: string): number | null {
  const m = IPV4.exec(text);
  if (!m) return null;
  const octets = m.slice(1, 5).map(Number);
  // A leading zero reads as octal to some resolvers (010.0.0.1 is 8.0.0.1 there): refused.
  const written = m.slice(1, 5) as string[];
  if (octets.some((o, i) => o > 255 || /^0\d/.test(written[i] as string))) return null;
  return octets.reduce((n, o) => n * 256 + o, 0);
}

function inNet(ip: number, base: number, bits: number): boolean {
  const size = 2 ** (32 - bits);
  return ip - (ip % size) === base;
}

/**
 * A host name as rules and decisions compare it: lower case, one trailing dot dropped; null for
 * what is not an ASCII DNS name (a non-ASCII look-alike, an empty label, a label over 63
 * characters, a name over 253, an underscore, an address).
 */
export function normalizeHostName(raw: string): string | null {
  let name = raw.toLowerCase();
  if (name.endsWith(".")) name = name.slice(0, -1);
  if (!name || name.length > 253 || ipv4Number(name) !== null) return null;
  const labels = name.split(".");
  if (!labels.every((l) => LABEL.test(l))) return null;
  // A name whose last label is all digits reads as an address to some resolvers (1.2.3.4.): refused.
  if (/^\d+$/.test(labels[labels.length - 1] as string)) return null;
  return name;
}

/** One rule, or why it is not one. */
export function parseEgressRule(raw: string): EgressRule | { error: string } {
  const text = raw.trim();
  if (!text) return { error: "a rule cannot be empty" };
  if (text.length > 300) return { error: "a rule is at most 300 characters" };
  if (!/^[\x21-\x7e]+$/.test(text))
    return {
      error: `"${text}" is not ASCII: write an internationalised name in its xn-- form (a look-alike in another script never matches)`,
    };
  if (text.includes("[") || (text.match(/:/g)?.length ?? 0) > 1)
    return { error: `"${text}": IPv6 destinations are not supported (environments reach IPv4 only)` };
  const colon = text.lastIndexOf(":");
  const host = colon >= 0 ? text.slice(0, colon) : text;
  let ports: [number, number][] = WEB_PORTS.map((p) => [p, p]);
  if (colon >= 0) {
    const m = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(text.slice(colon + 1));
    const lo = Number(m?.[1]);
    const hi = m?.[2] === undefined ? lo : Number(m[2]);
    if (!m || lo < 1 || hi > 65535 || hi < lo)
      return { error: `"${text}": a port is 1-65535, or a range low-high` };
    ports = [[lo, hi]];
  }
  const slash = host.indexOf("/");
  if (slash >= 0 || ipv4Number(host) !== null) {
    const addr = slash >= 0 ? host.slice(0, slash) : host;
    const bits = slash >= 0 ? Number(host.slice(slash + 1)) : 32;
    const ip = ipv4Number(addr);
    if (ip === null || !/^\d{1,2}$/.test(slash >= 0 ? host.slice(slash + 1) : "32") || bits > 32)
      return { error: `"${text}": an address rule is a.b.c.d or a.b.c.d/len (len 0-32)` };
    if (bits < 8)
      return { error: `"${text}": a network wider than /8 is the whole internet: use egress: allow` };
    if (ip % 2 ** (32 - bits) !== 0)
      return { error: `"${text}": ${addr} is not the start of a /${bits} network` };
    const written = `${addr}${slash >= 0 ? `/${bits}` : ""}${colon >= 0 ? text.slice(colon) : ""}`;
    return { text: written, kind: "cidr", base: ip, bits, ports };
  }
  const portText = colon >= 0 ? text.slice(colon) : "";
  if (host === "*") return { error: `"${text}": "*" alone is every name: use egress: allow` };
  if (host.startsWith("*.")) {
    const suffix = normalizeHostName(host.slice(2));
    if (!suffix || host.slice(2).includes("*"))
      return { error: `"${text}": a wildcard is "*." followed by a name` };
    if (!suffix.includes("."))
      return {
        error: `"${text}": a wildcard over a whole top-level domain is refused; name the domain under it`,
      };
    return { text: `*.${suffix}${portText}`, kind: "wildcard", name: suffix, ports };
  }
  if (host.includes("*"))
    return { error: `"${text}": "*" may only stand alone as the first label (*.example.test)` };
  const name = normalizeHostName(host);
  if (!name)
    return { error: `"${text}": not a host name (letters, digits, hyphens and dots; labels of 1-63)` };
  return { text: `${name}${portText}`, kind: "name", name, ports };
}

/** A policy's rules parsed, or the problems with them (each naming its list and index). */
export function parseEgressPolicy(policy: EgressPolicy): ParsedEgressPolicy | { errors: string[] } {
  const errors: string[] = [];
  const parsed: ParsedEgressPolicy = { allow: [], deny: [] };
  for (const list of ["allow", "deny"] as const) {
    const rules = policy[list] ?? [];
    if (rules.length > MAX_EGRESS_RULES) errors.push(`${list}: at most ${MAX_EGRESS_RULES} rules`);
    rules.slice(0, MAX_EGRESS_RULES).forEach((raw, i) => {
      const r = parseEgressRule(raw);
      if ("error" in r) errors.push(`${list}[${i}]: ${r.error}`);
      else parsed[list].push(r);
    });
  }
  return errors.length ? { errors } : parsed;
}

/** The policy as the resolved spec keeps it: each rule normalised, duplicates dropped, in order. */
export function normalizeEgressPolicy(p: ParsedEgressPolicy): EgressPolicy {
  const texts = (rules: EgressRule[]) => [...new Set(rules.map((r) => r.text))];
  return { allow: texts(p.allow), deny: texts(p.deny) };
}

/** Addresses no policy reaches, with why. */
const NEVER: [string, number, string][] = [
  ["0.0.0.0", 8, "an unspecified address"],
  ["127.0.0.0", 8, "this machine's loopback"],
  ["169.254.0.0", 16, "a link-local address (the cloud metadata address among them)"],
  ["224.0.0.0", 4, "a multicast address"],
  ["240.0.0.0", 4, "a reserved address"],
];

/** Why an address is never reached whatever the policy, or null. `extra`: more such networks (this host's own). */
export function neverReached(address: string, extra: readonly string[] = []): string | null {
  const ip = ipv4Number(address);
  if (ip === null) return "not an IPv4 address";
  for (const [base, bits, why] of NEVER) if (inNet(ip, ipv4Number(base) as number, bits)) return why;
  for (const net of extra) {
    const [b = "", len = "32"] = net.split("/");
    const base = ipv4Number(b);
    if (base !== null && inNet(ip, base - (base % 2 ** (32 - Number(len))), Number(len)))
      return "an address of the machine running the environment";
  }
  return null;
}

function portMatches(rule: EgressRule, port: number): boolean {
  return rule.ports.some(([lo, hi]) => port >= lo && port <= hi);
}

/** `byAddress`: whether an address rule may match (deny rules always; allow rules for a raw address only). */
function ruleMatches(
  rule: EgressRule,
  name: string | null,
  ip: number | null,
  port: number,
  byAddress = true,
): boolean {
  if (!portMatches(rule, port)) return false;
  if (rule.kind === "cidr")
    return byAddress && ip !== null && inNet(ip, rule.base as number, rule.bits as number);
  if (name === null) return false;
  if (rule.kind === "name") return name === rule.name;
  return name.endsWith(`.${rule.name}`);
}

/**
 * The decision for one connection. A name that is not an ASCII DNS name is refused before any
 * rule is read; an address the name resolved to is checked against the deny rules and the
 * addresses never reached as well, so a name that resolves somewhere it must not is refused.
 */
export function decideEgress(
  policy: ParsedEgressPolicy,
  dest: EgressDestination,
  neverExtra: readonly string[] = [],
): EgressDecision {
  const raw = dest.name;
  const literal = raw !== undefined && ipv4Number(raw.replace(/\.$/, "")) !== null;
  const name = raw === undefined || literal ? null : normalizeHostName(raw);
  if (raw !== undefined && !literal && name === null)
    return { allowed: false, rule: null, reason: `"${raw.slice(0, 100)}" is not an ASCII host name` };
  const addressText = literal ? (raw as string).replace(/\.$/, "") : dest.address;
  const ip = addressText === undefined ? null : ipv4Number(addressText);
  if (addressText !== undefined) {
    const never = neverReached(addressText, neverExtra);
    if (never) return { allowed: false, rule: null, reason: `${addressText} is ${never}: never reached` };
  }
  if (!Number.isInteger(dest.port) || dest.port < 1 || dest.port > 65535)
    return { allowed: false, rule: null, reason: `port ${dest.port} is not a port` };
  const what = `${name ?? addressText}:${dest.port}`;
  const denied = policy.deny.find((r) => ruleMatches(r, name, ip, dest.port));
  if (denied)
    return { allowed: false, rule: denied.text, reason: `${what} is denied by the rule ${denied.text}` };
  // A name is allowed by a name rule only: an address rule never makes a name reachable (the
  // proxy looks up only names a rule allows), nor a name rule an address.
  const allowed = policy.allow.find((r) => ruleMatches(r, name, ip, dest.port, name === null));
  if (allowed)
    return { allowed: true, rule: allowed.text, reason: `${what} is allowed by the rule ${allowed.text}` };
  return {
    allowed: false,
    rule: null,
    reason: literal
      ? `${what} is not in the environment's egress allow list (a raw address needs an address rule)`
      : `${what} is not in the environment's egress allow list`,
  };
}
