import { DEFAULT_NETWORK, type ResolvedService } from "@denv/protocol";
import type { FieldPath } from "./issues.ts";
import type { IssueList } from "./load-compose.ts";
import { isRecord, type ServiceContext, scalarString } from "./service-fields.ts";

export function portsField(v: unknown, path: FieldPath, issues: IssueList): ResolvedService["ports"] {
  const out: ResolvedService["ports"] = [];
  if (v === undefined || v === null) return out;
  if (!Array.isArray(v)) {
    issues.error("invalid_value", path, "ports is a list");
    return out;
  }
  v.forEach((entry, i) => {
    const p = [...path, i];
    const before = out.length;
    if (typeof entry === "number") {
      if (!Number.isInteger(entry) || entry < 1 || entry > 65535)
        issues.error("invalid_value", p, `${entry} is not a port number (1-65535)`);
      else out.push({ target: entry, published: null, host_ip: null, protocol: "tcp" });
    } else if (typeof entry === "string") {
      const parsed = parsePortString(entry);
      if (!parsed)
        issues.error("invalid_value", p, `"${entry}" is not [HOST_IP:][PUBLISHED:]TARGET[/PROTOCOL]`);
      else out.push(...parsed);
    } else if (isRecord(entry)) {
      const target = Number(entry.target);
      if (!Number.isInteger(target) || target < 1 || target > 65535) {
        issues.error("invalid_value", [...p, "target"], "target must be a port number");
        return;
      }
      out.push({
        target,
        published: entry.published === undefined ? null : String(entry.published),
        host_ip: typeof entry.host_ip === "string" ? entry.host_ip : null,
        protocol: typeof entry.protocol === "string" ? entry.protocol : "tcp",
      });
    } else issues.error("invalid_value", p, "a port is a number, a string or a mapping");
    // Compose would open a port on the machine; denv opens none (the world never reaches a host):
    // said here, with how the port is reached instead.
    const published = out.slice(before).find((x) => x.published !== null || x.host_ip !== null);
    if (published)
      issues.warn(
        "port_not_published",
        p,
        `${published.host_ip ? `${published.host_ip}:` : ""}${published.published ?? ""}:${published.target}: denv opens no port on the host (${published.published ?? "the host port"} stays closed); port ${published.target} is reached by a port URL (denv port ENV ${published.target}) or its ingress name (denv env ingress ENV)`,
      );
  });
  return out;
}

export function parsePortString(s: string): ResolvedService["ports"] | undefined {
  const [spec = "", protocol = "tcp"] = s.split("/");
  if (!["tcp", "udp", "sctp"].includes(protocol)) return undefined;
  let hostIp: string | null = null;
  let rest = spec;
  const v6 = /^\[([^\]]+)\]:(.*)$/.exec(spec);
  if (v6) {
    hostIp = v6[1] ?? null;
    rest = v6[2] ?? "";
  }
  const parts = rest.split(":");
  if (!v6 && parts.length === 3) hostIp = parts.shift() ?? null;
  if (parts.length > 2 || parts.length === 0) return undefined;
  const targetSpec = parts.pop() as string;
  const published = parts.length ? (parts[0] as string) : null;
  const range = (r: string) => {
    const m = /^(\d+)(?:-(\d+))?$/.exec(r);
    if (!m) return undefined;
    const a = Number(m[1]);
    const b = m[2] ? Number(m[2]) : a;
    return a >= 1 && b <= 65535 && a <= b ? [a, b] : undefined;
  };
  const t = range(targetSpec) as [number, number] | undefined;
  if (!t) return undefined;
  const pub = (published === null || published === "" ? null : range(published)) as
    | [number, number]
    | null
    | undefined;
  if (published && !pub) return undefined;
  const count = t[1] - t[0] + 1;
  if (pub && pub[1] - pub[0] + 1 !== count && pub[0] !== pub[1]) return undefined;
  const out: ResolvedService["ports"] = [];
  for (let k = 0; k < count; k++) {
    out.push({
      target: t[0] + k,
      published: pub ? String(pub[0] === pub[1] && count > 1 ? `${pub[0]}` : pub[0] + k) : null,
      host_ip: hostIp,
      protocol,
    });
  }
  return out;
}

export function networksField(
  svc: Record<string, unknown>,
  at: (...p: (string | number)[]) => FieldPath,
  ctx: ServiceContext,
): { networks: ResolvedService["networks"]; network_mode: string | null } {
  const { issues } = ctx;
  if (svc.network_mode !== undefined) {
    const mode = scalarString(svc.network_mode) ?? "";
    if (svc.networks !== undefined)
      issues.error(
        "conflicting_values",
        at("network_mode"),
        "network_mode and networks cannot both be set; keep one",
      );
    if (mode === "host") {
      issues.error(
        "network_mode_host",
        at("network_mode"),
        "network_mode: host puts the service on the host's network; remove it",
      );
    } else if (mode === "none") {
      return { networks: {}, network_mode: "none" };
    } else if (mode.startsWith("service:")) {
      const target = mode.slice(8);
      if (!ctx.serviceNames.has(target))
        issues.error(
          "service_unknown",
          at("network_mode"),
          `network_mode names service ${target}, which is not in the file`,
        );
      return { networks: {}, network_mode: mode };
    } else {
      issues.error(
        "network_external",
        at("network_mode"),
        `network_mode: ${mode} leaves the stack's own networks; use networks: (or none, or service:NAME)`,
      );
    }
    return { networks: {}, network_mode: null };
  }
  const networks: ResolvedService["networks"] = {};
  const add = (name: string, cfg: unknown, p: FieldPath) => {
    if (name !== DEFAULT_NETWORK && !ctx.declaredNetworks.has(name)) {
      issues.error(
        "network_undeclared",
        p,
        `network ${name} is not declared; add it under the top-level networks:`,
      );
      return;
    }
    const aliases =
      isRecord(cfg) && Array.isArray(cfg.aliases) ? cfg.aliases.map((a) => scalarString(a) ?? "") : [];
    if (isRecord(cfg)) {
      for (const key of Object.keys(cfg)) {
        if (key !== "aliases")
          issues.warn(
            "ignored_field",
            [...p, key],
            `networks.${name}.${key} is accepted and ignored: the engine assigns addresses`,
          );
      }
    }
    networks[name] = { aliases };
  };
  if (svc.networks === undefined || svc.networks === null) networks[DEFAULT_NETWORK] = { aliases: [] };
  else if (Array.isArray(svc.networks))
    svc.networks.forEach((n, i) => {
      add(scalarString(n) ?? "", null, at("networks", i));
    });
  else if (isRecord(svc.networks))
    for (const [n, cfg] of Object.entries(svc.networks)) add(n, cfg, at("networks", n));
  else issues.error("invalid_value", at("networks"), "networks is a list or a mapping");
  return { networks, network_mode: null };
}

export function extraHostsField(v: unknown): string[] {
  if (Array.isArray(v)) return v.map((x) => scalarString(x) ?? "");
  if (isRecord(v)) return Object.entries(v).map(([host, ip]) => `${host}:${scalarString(ip) ?? ""}`);
  return [];
}

export function ulimitsField(v: unknown, path: FieldPath, issues: IssueList): ResolvedService["ulimits"] {
  const out: ResolvedService["ulimits"] = {};
  if (!isRecord(v)) return out;
  const whole = (n: unknown): n is number => Number.isSafeInteger(n);
  for (const [name, val] of Object.entries(v)) {
    if (whole(val)) out[name] = { soft: val, hard: val };
    else if (isRecord(val) && whole(val.soft) && whole(val.hard))
      out[name] = { soft: val.soft, hard: val.hard };
    else issues.error("invalid_value", [...path, name], "a ulimit is a whole number or {soft, hard}");
  }
  return out;
}
