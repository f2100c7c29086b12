/**
 * The resolve phase's core: compose text (+ environment) → the resolved form, or every refusal with
 * its code, field path and line:column. Pure: no network, no engine. Pinning images to digests is a
 * separate step (pin-images.ts), which `validate` does not run.
 */
import { createHash } from "node:crypto";
import { posix } from "node:path";
import {
  DEFAULT_VERIFIER_TIMEOUT_MS,
  type Kind,
  nameProblem,
  type ResolvedService,
  type ResolvedSpec,
} from "@denv/protocol";
import { topLevelConfigs, topLevelSecrets } from "./compose-secrets.ts";
import { type EgressPolicy, normalizeEgressPolicy, parseEgressPolicy } from "./egress-policy.ts";
import { type Env, parseDotenv } from "./interpolate.ts";
import type { FieldPath, SpecIssue } from "./issues.ts";
import { IssueList, loadCompose } from "./load-compose.ts";
import { normalizeService } from "./normalize-service.ts";
import { parseDurationMs } from "./units.ts";
import { isRootUser } from "./users.ts";
import { describeXDenvIssues, xDenvSchema } from "./x-denv-schema.ts";

export interface ValidateOptions {
  /** Variables for interpolation; the process environment in the CLI. They win over `.env`. */
  env?: Env;
  /** The text of the project's `.env` file, when it has one. */
  dotenv?: string;
  /** The target cannot build images: `build:` without `image:` is refused. */
  noBuild?: boolean;
  /** Project name when the file has no top-level `name:`. */
  projectName?: string;
  /** Reads a file relative to the compose file (for env_file and secrets' file:). */
  readFile?: (relativePath: string) => string | undefined;
  /**
   * The project's files by their path relative to the compose file (what the CLI uploads with it),
   * read when there is no readFile: the form that crosses to a validation worker.
   */
  files?: Record<string, string>;
}

export type ValidateResult = (
  | { ok: true; spec: ResolvedSpec; warnings: SpecIssue[] }
  | { ok: false; errors: SpecIssue[]; warnings: SpecIssue[] }
) & {
  /** The project files the file reads (env_file, secrets' file:) that were not given, normalised. */
  missing_files?: string[];
};

const TOP_LEVEL = new Set([
  "version",
  "name",
  "services",
  "volumes",
  "networks",
  "secrets",
  "configs",
  "x-denv",
]);

const isRecord = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === "object" && !Array.isArray(v);

export function validateCompose(text: string, options: ValidateOptions = {}): ValidateResult {
  const files = options.files;
  const given =
    options.readFile ??
    (files
      ? (rel: string) => {
          const key = posix.normalize(rel);
          return Object.hasOwn(files, key) ? files[key] : undefined;
        }
      : undefined);
  // Which files were asked for and not there: a git source's are then read from its commit.
  const missing = new Set<string>();
  const readFile =
    given &&
    ((rel: string) => {
      const text = given(rel);
      if (text === undefined) missing.add(posix.normalize(rel));
      return text;
    });
  const result = validateWith(text, options, readFile);
  return missing.size ? { ...result, missing_files: [...missing] } : result;
}

function validateWith(
  text: string,
  options: ValidateOptions,
  readFile: ((rel: string) => string | undefined) | undefined,
): ValidateResult {
  const env: Env = { ...(options.dotenv ? parseDotenv(options.dotenv) : {}), ...(options.env ?? {}) };
  const loaded = loadCompose(text, env);
  const issues = new IssueList(loaded.positionOf);
  issues.take(loaded.issues);
  const data = loaded.data;
  if (!data || issues.hasErrors) return finish(issues, undefined);

  for (const key of Object.keys(data)) {
    if (TOP_LEVEL.has(key) || key.startsWith("x-")) continue;
    const why: Record<string, string> = {
      include: "include reads other compose files; merge them into one file",
      models: "model runners are not available",
    };
    issues.error(
      "unsupported_field",
      [key],
      why[key] ?? `"${key}" is not a Compose top-level field; remove it`,
    );
  }
  if (data.version !== undefined) {
    issues.warn("obsolete_version", ["version"], "the top-level version is obsolete and ignored; remove it");
  }
  const name = data.name === undefined ? (options.projectName ?? null) : String(data.name);

  // x-denv
  const rawX = data["x-denv"] ?? {};
  const parsedX = xDenvSchema.safeParse(rawX);
  if (!parsedX.success) {
    for (const { path, message } of describeXDenvIssues(parsedX.error.issues))
      issues.error("x_denv_invalid", ["x-denv", ...path], message);
  }
  const x = parsedX.success ? parsedX.data : {};
  const kind: Kind = x.kind ?? (data["x-denv"] === undefined ? "service" : "rl-environment");
  if (data["x-denv"] !== undefined && x.kind === undefined && parsedX.success) {
    issues.warn("x_denv_invalid", ["x-denv"], "x-denv.kind is not set; rl-environment is assumed");
  }

  // top-level volumes and networks
  const declaredVolumes = new Set<string>();
  const datasets: ResolvedSpec["datasets"] = {};
  if (data.volumes !== undefined && data.volumes !== null && !isRecord(data.volumes)) {
    issues.error("invalid_value", ["volumes"], "volumes is a mapping of volume names");
  }
  for (const [vname, vcfg] of Object.entries(isRecord(data.volumes) ? data.volumes : {})) {
    // Declared even when refused below, so that the services using it get no second error.
    declaredVolumes.add(vname);
    const badName = nameProblem(vname);
    if (badName) {
      issues.error("name_invalid", ["volumes", vname], `volume name "${vname}" ${badName}`);
      continue;
    }
    const cfg = isRecord(vcfg) ? vcfg : {};
    if (vcfg !== null && vcfg !== undefined && !isRecord(vcfg)) {
      issues.error("invalid_value", ["volumes", vname], "a volume's settings are a mapping (or empty)");
      continue;
    }
    if (cfg.external !== undefined && cfg.external !== false) {
      issues.error(
        "volume_external",
        ["volumes", vname, "external"],
        `volume ${vname} is external: it lives outside the environment and cannot be snapshotted; remove external:`,
      );
      continue;
    }
    const opts = isRecord(cfg.driver_opts) ? cfg.driver_opts : {};
    const o = String(opts.o ?? "");
    if (String(opts.type ?? "") === "none" || /\bbind\b/.test(o) || opts.device !== undefined) {
      issues.error(
        "bind_mount",
        ["volumes", vname, "driver_opts"],
        `volume ${vname}'s driver_opts bind a host path; remove driver_opts`,
      );
      continue;
    }
    if (cfg.driver !== undefined && cfg.driver !== "local") {
      issues.error(
        "volume_driver",
        ["volumes", vname, "driver"],
        `volume driver ${String(cfg.driver)} refused: denv stores every volume on its own storage driver; remove driver:`,
      );
      continue;
    }
    if (Object.keys(opts).length) {
      issues.warn(
        "ignored_field",
        ["volumes", vname, "driver_opts"],
        "driver_opts are accepted and ignored: denv's storage driver holds the volume",
      );
    }
    for (const key of Object.keys(cfg)) {
      if (!["driver", "driver_opts", "external", "labels", "name"].includes(key))
        issues.error("unsupported_field", ["volumes", vname, key], `"${key}" is not a Compose volume field`);
    }
    const labels: Record<string, string> = {};
    if (isRecord(cfg.labels)) for (const [k, v] of Object.entries(cfg.labels)) labels[k] = String(v ?? "");
    else if (Array.isArray(cfg.labels))
      for (const l of cfg.labels) {
        const [k = "", ...rest] = String(l).split("=");
        labels[k] = rest.join("=");
      }
    datasets[vname] = { labels };
  }
  const { declaredSecrets, secretFiles } = topLevelSecrets(data.secrets, issues, readFile);
  const configFiles = topLevelConfigs(data.configs, issues);

  const declaredNetworks = new Set<string>();
  const declaredInternal = new Map<string, boolean>();
  if (data.networks !== undefined && data.networks !== null && !isRecord(data.networks)) {
    issues.error("invalid_value", ["networks"], "networks is a mapping of network names");
  }
  for (const [nname, ncfg] of Object.entries(isRecord(data.networks) ? data.networks : {})) {
    declaredNetworks.add(nname);
    const badName = nameProblem(nname);
    if (badName) {
      issues.error("name_invalid", ["networks", nname], `network name "${nname}" ${badName}`);
      continue;
    }
    const cfg = isRecord(ncfg) ? ncfg : {};
    if (cfg.external !== undefined && cfg.external !== false) {
      issues.error(
        "network_external",
        ["networks", nname, "external"],
        `network ${nname} is external: it leaves the stack's own networks; remove external:`,
      );
      continue;
    }
    const driver = cfg.driver === undefined ? "bridge" : String(cfg.driver);
    if (driver !== "bridge") {
      const code = driver === "host" ? "network_mode_host" : "network_driver";
      issues.error(
        code,
        ["networks", nname, "driver"],
        `network driver ${driver} refused: stack networks are bridges denv creates`,
      );
      continue;
    }
    for (const key of Object.keys(cfg)) {
      if (["driver", "external", "internal", "labels", "name", "attachable"].includes(key)) continue;
      if (["ipam", "driver_opts", "enable_ipv6", "enable_ipv4"].includes(key))
        issues.warn(
          "ignored_field",
          ["networks", nname, key],
          `networks.${nname}.${key} is accepted and ignored: denv creates the network`,
        );
      else
        issues.error(
          "unsupported_field",
          ["networks", nname, key],
          `"${key}" is not a Compose network field`,
        );
    }
    declaredInternal.set(nname, cfg.internal === true);
  }

  // services
  if (!isRecord(data.services) || Object.keys(data.services).length === 0) {
    issues.error("no_services", ["services"], "a compose file needs at least one service under services:");
    return finish(issues, undefined);
  }
  const active = new Map<string, Record<string, unknown>>();
  for (const [sname, svc] of Object.entries(data.services)) {
    if (!isRecord(svc)) {
      issues.error("invalid_value", ["services", sname], `service ${sname} must be a mapping`);
      continue;
    }
    const badName = nameProblem(sname);
    if (badName) {
      issues.error("name_invalid", ["services", sname], `service name "${sname}" ${badName}`);
      continue;
    }
    if (Array.isArray(svc.profiles) && svc.profiles.length > 0) {
      issues.warn(
        "profile_inactive",
        ["services", sname, "profiles"],
        `service ${sname} has profiles and is not started, as docker compose up without --profile does`,
      );
      continue;
    }
    active.set(sname, svc);
  }
  const serviceNames = new Set(active.keys());
  const services: Record<string, ResolvedService> = {};
  const volumesFrom = new Map<string, string[]>();
  for (const [sname, svc] of active) {
    const r = normalizeService(sname, svc, {
      issues,
      env,
      noBuild: options.noBuild ?? false,
      projectName: name,
      serviceNames,
      declaredVolumes,
      declaredNetworks,
      declaredSecrets,
      configFiles,
      datasets,
      readFile,
    });
    if (r) {
      services[sname] = r.service;
      if (r.volumesFrom.length) volumesFrom.set(sname, r.volumesFrom);
    }
  }
  for (const [sname, froms] of volumesFrom) {
    const target = services[sname];
    if (!target) continue;
    for (const from of froms) {
      const [src = "", mode] = from.split(":");
      for (const v of services[src]?.volumes ?? []) {
        if (!target.volumes.some((t) => t.target === v.target))
          target.volumes.push({ ...v, read_only: v.read_only || mode === "ro" });
      }
    }
  }

  const startOrder = topoOrder(active, services, issues);
  checkXDenv(x, kind, active, serviceNames, issues);
  if (issues.hasErrors) return finish(issues, undefined);

  const egress = typeof x.egress === "object" ? "deny" : (x.egress ?? "deny");
  const egressPolicy = typeof x.egress === "object" ? egressPolicyOf(x.egress, issues) : undefined;
  if (issues.hasErrors) return finish(issues, undefined);
  const networks: ResolvedSpec["networks"] = {};
  for (const svc of Object.values(services)) {
    for (const n of Object.keys(svc.networks)) {
      networks[n] = { internal: egress === "deny" || (declaredInternal.get(n) ?? false) };
    }
  }
  for (const n of declaredNetworks) {
    networks[n] ??= { internal: egress === "deny" || (declaredInternal.get(n) ?? false) };
  }

  const toArgv = (c: string | string[]): string[] => (typeof c === "string" ? ["sh", "-c", c] : c);
  const warmItems = x.warm === undefined ? [] : Array.isArray(x.warm) ? x.warm : [x.warm];
  const agentService = x.agent?.service ?? null;
  const verifier = x.verifier
    ? {
        image: x.verifier.image ?? null,
        image_digest: null,
        image_pinned: null,
        service: x.verifier.service ?? null,
        command: x.verifier.command === undefined ? null : toArgv(x.verifier.command),
        collect: (x.verifier.collect ?? []).map((p) => posix.normalize(p)),
        timeout_ms:
          x.verifier.timeout === undefined
            ? DEFAULT_VERIFIER_TIMEOUT_MS
            : (parseDurationMs(x.verifier.timeout) ?? DEFAULT_VERIFIER_TIMEOUT_MS),
      }
    : null;
  const checkpoint: Record<string, string[][]> = {};
  for (const [svc, cmds] of Object.entries(x.checkpoint ?? {})) {
    // A string is one shell command; a list of strings is a list of shell commands; a list may also hold argv lists.
    const list = typeof cmds === "string" ? [cmds] : (cmds as (string | string[])[]);
    checkpoint[svc] = list.map(toArgv);
  }
  const body: Omit<ResolvedSpec, "hash"> = {
    schema_version: 1,
    name,
    kind,
    egress,
    ...(egressPolicy ? { egress_policy: egressPolicy } : {}),
    clock: x.clock ?? (kind === "rl-environment" ? "frozen" : "real"),
    ...(x.pool === undefined ? {} : { pool: typeof x.pool === "object" ? x.pool.size : x.pool }),
    ...(typeof x.pool === "object" && x.pool.environment ? { pool_environment: x.pool.environment } : {}),
    ...(x.replicas === undefined ? {} : { replicas: x.replicas }),
    ...(x.live ? { live: x.live === true ? ("on" as const) : ("best-effort" as const) } : {}),
    ...(x.idle_pause_s === undefined ? {} : { idle_pause_s: x.idle_pause_s }),
    ...(x.branches?.length ? { branches: [...new Set(x.branches)] } : {}),
    ...(x.target === undefined ? {} : { target: x.target }),
    ...(x.ingress?.public?.length ? { ingress: { public: [...new Set(x.ingress.public)].sort() } } : {}),
    agent: agentService ? { service: agentService } : null,
    warm: warmItems.map((w) =>
      typeof w === "string"
        ? { service: agentService as string, command: toArgv(w) }
        : { service: w.service, command: toArgv(w.command) },
    ),
    verifier,
    checkpoint,
    services,
    datasets,
    networks,
    start_order: startOrder,
    ...(Object.keys(secretFiles).length ? { secret_files: secretFiles } : {}),
  };
  return finish(issues, withHash(body));
}

/** Adds the content hash: sha256 over the canonical JSON of the spec without its hash. */
export function withHash(body: Omit<ResolvedSpec, "hash">): ResolvedSpec {
  const hash = `sha256:${createHash("sha256").update(canonicalJson(body)).digest("hex")}`;
  return { ...body, hash };
}

/** JSON with object keys sorted at every level, so equal specs serialise to equal bytes. */
export function canonicalJson(value: unknown, indent?: number): string {
  return JSON.stringify(sortKeys(value), null, indent);
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (isRecord(value)) {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(value).sort()) out[k] = sortKeys(value[k]);
    return out;
  }
  return value;
}

function finish(issues: IssueList, spec: ResolvedSpec | undefined): ValidateResult {
  // In file order, as a user reads them (the sort is stable for issues at one position); the count
  // of issues left out stays last.
  const [kept, more] = [issues.issues, issues.all().slice(issues.issues.length)];
  const sorted = [...[...kept].sort((a, b) => a.line - b.line || a.column - b.column), ...more];
  const errors = sorted.filter((i) => i.severity === "error");
  const warnings = sorted.filter((i) => i.severity === "warning");
  if (spec && errors.length === 0) return { ok: true, spec, warnings };
  return { ok: false, errors, warnings };
}

function topoOrder(
  active: Map<string, Record<string, unknown>>,
  services: Record<string, ResolvedService>,
  issues: IssueList,
): string[] {
  const order: string[] = [];
  const state = new Map<string, "visiting" | "done">();
  let cycleReported = false;
  const visit = (name: string, chain: string[]) => {
    const s = state.get(name);
    if (s === "done") return;
    if (s === "visiting") {
      if (!cycleReported) {
        cycleReported = true;
        const cycle = [...chain.slice(chain.indexOf(name)), name].join(" → ");
        issues.error(
          "depends_on_cycle",
          ["services", name, "depends_on"],
          `depends_on forms a cycle: ${cycle}; break it`,
        );
      }
      return;
    }
    state.set(name, "visiting");
    for (const dep of Object.keys(services[name]?.depends_on ?? {}).sort()) visit(dep, [...chain, name]);
    state.set(name, "done");
    order.push(name);
  };
  for (const name of [...active.keys()].sort()) visit(name, []);
  return order.filter((n) => services[n] !== undefined);
}

function checkXDenv(
  x: ReturnType<typeof xDenvSchema.parse>,
  kind: Kind,
  // The raw services: the agent's user is checked even when its service has other refusals.
  rawServices: Map<string, Record<string, unknown>>,
  serviceNames: ReadonlySet<string>,
  issues: IssueList,
): void {
  const agent = x.agent?.service;
  if (agent !== undefined) {
    if (!serviceNames.has(agent)) {
      issues.error(
        "agent_missing",
        ["x-denv", "agent", "service"],
        `agent.service names ${agent}, which is not a service of this file`,
      );
    } else {
      const raw = rawServices.get(agent)?.user;
      const user = typeof raw === "string" || typeof raw === "number" ? String(raw) : null;
      if (user === null) {
        issues.error(
          "agent_user_unset",
          ["services", agent],
          `the agent service ${agent} does not set user:, so it would run as the image's user, possibly root; set user: to a non-root uid (e.g. "1000:1000")`,
        );
      } else if (isRootUser(user)) {
        issues.error(
          "agent_root",
          ["services", agent, "user"],
          `the agent service ${agent} runs as root (user: ${user}); the agent must never be root: set user: to a non-root uid (e.g. "1000:1000")`,
        );
      }
    }
  } else if (kind === "rl-environment" || kind === "agent") {
    if (x.verifier?.collect?.length) {
      issues.error(
        "agent_missing",
        ["x-denv", "agent"],
        "verifier.collect reads from the agent's service: set agent.service",
      );
    }
  }
  const warm = x.warm === undefined ? [] : Array.isArray(x.warm) ? x.warm : [x.warm];
  warm.forEach((w, i) => {
    const path: FieldPath = ["x-denv", "warm", ...(Array.isArray(x.warm) ? [i] : [])];
    if (typeof w === "string") {
      if (agent === undefined)
        issues.error(
          "x_denv_invalid",
          path,
          "a warm command given as a string runs in agent.service: set agent.service, or write {service, command}",
        );
    } else if (!serviceNames.has(w.service)) {
      issues.error(
        "service_unknown",
        [...path, "service"],
        `warm names service ${w.service}, which is not in the file`,
      );
    }
  });
  for (const svc of Object.keys(x.checkpoint ?? {})) {
    if (!serviceNames.has(svc))
      issues.error(
        "service_unknown",
        ["x-denv", "checkpoint", svc],
        `checkpoint names service ${svc}, which is not in the file`,
      );
  }
  (x.ingress?.public ?? []).forEach((svc, i) => {
    const ports = rawServices.get(svc)?.ports;
    if (!serviceNames.has(svc))
      issues.error(
        "service_unknown",
        ["x-denv", "ingress", "public", i],
        `ingress.public names service ${svc}, which is not in the file`,
      );
    else if (!Array.isArray(ports) || ports.length === 0)
      issues.error(
        "x_denv_invalid",
        ["x-denv", "ingress", "public", i],
        `ingress.public names service ${svc}, which publishes no port (add ports: to it)`,
      );
  });
  const v = x.verifier;
  if (v) {
    if ((v.image === undefined) === (v.service === undefined)) {
      issues.error(
        "verifier_invalid",
        ["x-denv", "verifier"],
        "the verifier needs exactly one of image: (its own container) or service: (a service of the fork)",
      );
    }
    if (v.service !== undefined && !serviceNames.has(v.service)) {
      issues.error(
        "service_unknown",
        ["x-denv", "verifier", "service"],
        `verifier.service names ${v.service}, which is not in the file`,
      );
    }
    if (v.service !== undefined && v.command === undefined) {
      issues.error(
        "verifier_invalid",
        ["x-denv", "verifier", "command"],
        "a verifier that runs inside a service needs command:",
      );
    }
    (v.collect ?? []).forEach((p, i) => {
      const path: FieldPath = ["x-denv", "verifier", "collect", i];
      if (!p.startsWith("/"))
        issues.error("collect_path_invalid", path, `collect path ${p} must be absolute`);
      else if (p.split("/").includes(".."))
        issues.error("collect_path_invalid", path, `collect path ${p} must not contain ".."`);
      else if (posix.normalize(p) === "/")
        issues.error("collect_path_invalid", path, "collect cannot be the whole filesystem (/)");
      else if (p.includes("\0"))
        issues.error("collect_path_invalid", path, "collect paths cannot hold NUL bytes");
    });
    if (v.timeout !== undefined) {
      const ms = parseDurationMs(v.timeout);
      if (ms === undefined || ms <= 0)
        issues.error(
          "verifier_invalid",
          ["x-denv", "verifier", "timeout"],
          `verifier.timeout "${String(v.timeout)}" must be a positive duration (e.g. 10m)`,
        );
    }
  }
}

/** x-denv.egress as a policy, its rules normalised; each bad rule an issue at its own place. */
function egressPolicyOf(
  raw: { allow: string[]; deny?: string[] },
  issues: IssueList,
): EgressPolicy | undefined {
  const parsed = parseEgressPolicy({ allow: raw.allow, deny: raw.deny ?? [] });
  if ("errors" in parsed) {
    for (const e of parsed.errors) {
      const m = /^(allow|deny)\[(\d+)\]: (.*)$/.exec(e);
      issues.error(
        "x_denv_invalid",
        ["x-denv", "egress", ...(m ? [m[1] as string, Number(m[2])] : [])],
        m?.[3] ?? e,
      );
    }
    return undefined;
  }
  return normalizeEgressPolicy(parsed);
}
