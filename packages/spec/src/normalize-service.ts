/**
 * One compose service → its resolved form, with every short and long syntax Compose accepts, and the
 * rules that keep the world from reaching the host. Every field is either handled, accepted with a
 * warning saying it is ignored (only where ignoring it cannot change what the environment does), or
 * refused with a reason: nothing is dropped silently.
 */

import { createHash } from "node:crypto";
import { posix } from "node:path";
import {
  DEFAULT_CAPS,
  DEFAULT_HEALTHCHECK,
  DEFAULT_NETWORK,
  DEFAULT_STOP_GRACE_PERIOD_MS,
  isValidName,
  NAME_MAX_LENGTH,
  type ResolvedService,
  type ResolvedSpec,
} from "@denv/protocol";
import { buildField, projectRelativePath } from "./build-field.ts";
import { gpuField } from "./gpu-request.ts";
import type { Env } from "./interpolate.ts";
import { parseDotenv } from "./interpolate.ts";
import type { FieldPath } from "./issues.ts";
import type { IssueList } from "./load-compose.ts";
import { RESTORABLE_CAPS } from "./restorable-caps.ts";
import { splitShellWords } from "./shell-words.ts";
import { sysctlProblem } from "./sysctls.ts";
import { parseBytes, parseCpus, parseDurationMs } from "./units.ts";
import { userProblem } from "./users.ts";

export interface ServiceContext {
  issues: IssueList;
  env: Env;
  noBuild: boolean;
  projectName: string | null;
  /** Names of every active service in the file. */
  serviceNames: ReadonlySet<string>;
  declaredVolumes: ReadonlySet<string>;
  declaredNetworks: ReadonlySet<string>;
  /** The file's top-level configs: name → the project file it reads. */
  configFiles?: ReadonlyMap<string, string>;
  /** The file's top-level secrets (a service may name only these). */
  declaredSecrets?: ReadonlySet<string>;
  /**
   * The file's datasets: an anonymous volume adds one of its own here (named from its service and
   * path), as the engine makes a fresh volume for it.
   */
  datasets?: ResolvedSpec["datasets"];
  /** Reads a file relative to the compose file's directory (env_file); undefined when absent. */
  readFile?: ((relativePath: string) => string | undefined) | undefined;
}

type Handler = "handled" | { ignore: string } | { refuse: string };

/** Every service field Compose defines, and what denv does with it. */
const SERVICE_FIELDS: Record<string, Handler> = {
  image: "handled",
  build: "handled",
  command: "handled",
  entrypoint: "handled",
  environment: "handled",
  env_file: "handled",
  user: "handled",
  working_dir: "handled",
  hostname: "handled",
  mem_limit: "handled",
  memswap_limit: { ignore: "denv gives services no swap beyond their memory cap" },
  mem_reservation: { ignore: "reservations do not limit a service; the cap is mem_limit" },
  cpus: "handled",
  pids_limit: "handled",
  deploy: "handled",
  healthcheck: "handled",
  depends_on: "handled",
  volumes: "handled",
  volumes_from: "handled",
  tmpfs: "handled",
  ports: "handled",
  expose: "handled",
  networks: "handled",
  network_mode: "handled",
  labels: "handled",
  restart: "handled",
  stop_grace_period: "handled",
  stop_signal: "handled",
  init: "handled",
  read_only: "handled",
  tty: "handled",
  stdin_open: "handled",
  cap_drop: "handled",
  cap_add: "handled",
  privileged: "handled",
  devices: "handled",
  security_opt: "handled",
  pid: "handled",
  ipc: "handled",
  uts: "handled",
  userns_mode: "handled",
  cgroup: "handled",
  extra_hosts: "handled",
  ulimits: "handled",
  shm_size: "handled",
  sysctls: "handled",
  profiles: "handled",
  links: "handled",
  container_name: {
    ignore: "denv names containers itself so that forks of one version can run side by side",
  },
  logging: { ignore: "denv keeps the engine's default logging" },
  pull_policy: { ignore: "denv pulls every image by its pinned digest" },
  platform: { ignore: "the host's platform is used" },
  dns: { ignore: "services resolve each other through the stack's network" },
  dns_search: { ignore: "services resolve each other through the stack's network" },
  dns_opt: { ignore: "services resolve each other through the stack's network" },
  domainname: { ignore: "not rendered" },
  mac_address: { ignore: "the engine assigns addresses" },
  annotations: { ignore: "annotations do not change how a service runs" },
  develop: { ignore: "compose watch is a development tool" },
  attach: { ignore: "denv keeps service output in its own logs" },
  oom_score_adj: { ignore: "the memory cap decides" },
  cpu_shares: { ignore: "the cpu cap is cpus" },
  cpu_quota: { ignore: "the cpu cap is cpus" },
  cpu_period: { ignore: "the cpu cap is cpus" },
  cpuset: { ignore: "the cpu cap is cpus" },
  cpu_count: { ignore: "the cpu cap is cpus" },
  cpu_percent: { ignore: "the cpu cap is cpus" },
  isolation: { ignore: "Linux hosts use the default isolation" },
  group_add: "handled",
  scale: "handled",
  external_links: {
    refuse: "external_links reach containers outside the stack; the environment is a world of its own",
  },
  secrets: "handled",
  configs: "handled",
  extends: { refuse: "extends reads other files; write the service out in full" },
  cgroup_parent: { refuse: "a service cannot choose its cgroup on the host" },
  device_cgroup_rules: { refuse: "services get no device access on the host" },
  runtime: { refuse: "services run on the engine's default runtime" },
  storage_opt: { refuse: "storage is managed by denv's storage driver" },
  oom_kill_disable: { refuse: "the memory cap must be able to stop a runaway service" },
  gpus: "handled",
  memswappiness: { ignore: "denv gives services no swap" },
  blkio_config: { ignore: "block I/O weights are not rendered" },
  credential_spec: { ignore: "Windows only" },
  use_api_socket: { refuse: "the Docker socket is the host; the world must not reach it" },
  models: { refuse: "model runners are not available" },
  provider: { refuse: "provider services are not available" },
  post_start: { refuse: "lifecycle hooks are not available; use x-denv.warm" },
  pre_stop: { refuse: "lifecycle hooks are not available" },
  label_file: { refuse: "label_file reads files on the host; write the labels out" },
};

const isRecord = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === "object" && !Array.isArray(v);

function scalarString(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  return undefined;
}

export function normalizeService(
  name: string,
  svc: Record<string, unknown>,
  ctx: ServiceContext,
): { service: ResolvedService; volumesFrom: string[] } | undefined {
  const base: FieldPath = ["services", name];
  const at = (...p: (string | number)[]): FieldPath => [...base, ...p];
  const { issues } = ctx;
  const errorsBefore = issues.errorCount;

  for (const key of Object.keys(svc)) {
    if (key.startsWith("x-")) continue;
    const handler = SERVICE_FIELDS[key];
    if (handler === undefined) {
      issues.error(
        "unsupported_field",
        at(key),
        `"${key}" is not a Compose service field; remove it or fix its name`,
      );
    } else if (handler !== "handled" && "ignore" in handler) {
      issues.warn("ignored_field", at(key), `${key} is accepted and ignored: ${handler.ignore}`);
    } else if (handler !== "handled") {
      issues.error("unsupported_field", at(key), `${key} is refused: ${handler.refuse}`);
    }
  }

  // image / build
  let image = scalarString(svc.image);
  let build: ResolvedService["build"] = null;
  if (svc.build !== undefined) {
    build = buildField(svc.build, at("build"), issues);
    if (!image) {
      if (ctx.noBuild) {
        issues.error(
          "build_without_image",
          at("build"),
          "this target cannot build images: push the image to a registry and name it in image:",
        );
      } else {
        image = `${ctx.projectName ?? "denv"}-${name}`;
      }
    }
  }
  if (!image) {
    if (svc.build === undefined)
      issues.error("invalid_value", at("image"), `service ${name} needs an image:`);
    image = "";
  }

  const entrypoint = commandField(svc.entrypoint, at("entrypoint"), issues);
  const command = commandField(svc.command, at("command"), issues);
  const environment = environmentField(svc, at, ctx);

  // user
  let user: string | null = null;
  if (svc.user !== undefined) {
    const u = scalarString(svc.user);
    const problem = u === undefined || u === "" ? "user must be a name or uid[:gid]" : userProblem(u);
    if (problem) issues.error("invalid_value", at("user"), problem);
    else user = u as string;
  }

  const caps = capsField(svc, at, issues);
  const gpus = gpuField(svc, at, issues);
  const { healthcheck, disabled } = healthcheckField(svc.healthcheck, at("healthcheck"), issues);
  const depends_on = dependsOnField(svc.depends_on, at("depends_on"), ctx);
  const { volumes, tmpfs } = volumesField(svc, at, name, ctx);
  const ports = portsField(svc.ports, at("ports"), issues);
  const { networks, network_mode } = networksField(svc, at, ctx);

  // security and host namespaces
  if (svc.privileged !== undefined && svc.privileged !== false) {
    issues.error(
      "privileged",
      at("privileged"),
      "privileged gives the service the host's devices; remove it",
    );
  }
  const capAdd: string[] = [];
  if (svc.cap_add !== undefined) {
    const list = Array.isArray(svc.cap_add) ? svc.cap_add : [svc.cap_add];
    list.forEach((c, i) => {
      const cap = (scalarString(c) ?? "").toUpperCase().replace(/^CAP_/, "");
      if (RESTORABLE_CAPS.includes(cap)) {
        if (!capAdd.includes(cap)) capAdd.push(cap);
      } else
        issues.error(
          "cap_add",
          at("cap_add", i),
          `cap_add ${scalarString(c) ?? JSON.stringify(c)} widens what the service may do to the host; only ${RESTORABLE_CAPS.join(", ")} (which denv drops by default) can be given back`,
        );
    });
  }
  if (Array.isArray(svc.devices) ? svc.devices.length > 0 : svc.devices !== undefined) {
    issues.error("devices", at("devices"), "devices expose the host's hardware to the service; remove them");
  }
  if (svc.security_opt !== undefined) {
    const opts = Array.isArray(svc.security_opt) ? svc.security_opt : [svc.security_opt];
    opts.forEach((o, i) => {
      const s = scalarString(o) ?? "";
      if (!/^no-new-privileges(?:[:=]true)?$/.test(s)) {
        issues.error(
          "security_opt_unconfined",
          at("security_opt", i),
          `security_opt "${s}" changes the service's confinement; denv runs services with the engine's default profile (only no-new-privileges is allowed)`,
        );
      }
    });
  }
  for (const ns of ["pid", "ipc", "uts", "userns_mode", "cgroup"] as const) {
    const v = svc[ns];
    if (v === undefined) continue;
    const s = scalarString(v) ?? "";
    if (s === "host") {
      issues.error(
        "namespace_host",
        at(ns),
        `${ns}: host shares the host's namespace with the service; remove it`,
      );
    } else if (s.startsWith("container:")) {
      issues.error(
        "namespace_host",
        at(ns),
        `${ns}: ${s} joins a container outside the stack; use service:NAME`,
      );
    } else if (s.startsWith("service:")) {
      if (!ctx.serviceNames.has(s.slice(8)))
        issues.error(
          "service_unknown",
          at(ns),
          `${ns} names service ${s.slice(8)}, which is not in the file`,
        );
    } else if (!["", "private", "shareable", "none"].includes(s)) {
      issues.error(
        "invalid_value",
        at(ns),
        `${ns}: "${s}" is not a value denv accepts (private, shareable, service:NAME)`,
      );
    }
  }
  if (svc.links !== undefined) {
    const links = Array.isArray(svc.links) ? svc.links : [];
    links.forEach((l, i) => {
      const target = (scalarString(l) ?? "").split(":")[0] ?? "";
      if (!ctx.serviceNames.has(target))
        issues.error(
          "service_unknown",
          at("links", i),
          `links names service ${target}, which is not in the file`,
        );
    });
  }

  // deploy.replicas / scale
  const replicas = isRecord(svc.deploy) ? svc.deploy.replicas : undefined;
  for (const [v, p] of [
    [svc.scale, at("scale")],
    [replicas, at("deploy", "replicas")],
  ] as const) {
    if (v !== undefined && v !== 1 && v !== "1") {
      issues.error(
        "unsupported_field",
        p,
        "a service runs once per environment; fork the environment for more copies",
      );
    }
  }

  const restart = scalarString(svc.restart) ?? "no";
  if (!/^(no|always|unless-stopped|on-failure(:\d+)?)$/.test(restart)) {
    issues.error(
      "invalid_value",
      at("restart"),
      `restart "${restart}" must be no, always, on-failure[:N] or unless-stopped`,
    );
  }
  let stop_grace_period_ms = DEFAULT_STOP_GRACE_PERIOD_MS;
  if (svc.stop_grace_period !== undefined) {
    const ms = duration(svc.stop_grace_period, at("stop_grace_period"), issues);
    if (ms !== undefined) stop_grace_period_ms = ms;
  }

  const labels = keyValueField(svc.labels, at("labels"), issues, "labels");
  const sysctls = keyValueField(svc.sysctls, at("sysctls"), issues, "sysctls");
  for (const key of Object.keys(sysctls)) {
    const problem = sysctlProblem(key);
    if (problem) issues.error("sysctl_refused", at("sysctls", key), problem);
  }

  const volumesFrom = volumesFromField(svc.volumes_from, at("volumes_from"), ctx);
  const errorsAfter = issues.errorCount;
  if (errorsAfter > errorsBefore) return undefined;

  const service: ResolvedService = {
    image,
    image_digest: null,
    image_pinned: null,
    build,
    entrypoint,
    command,
    environment,
    user,
    working_dir: scalarString(svc.working_dir) ?? null,
    hostname: scalarString(svc.hostname) ?? null,
    caps,
    ...(gpus ? { gpus } : {}),
    healthcheck,
    healthcheck_disabled: disabled,
    depends_on,
    volumes,
    tmpfs,
    ports,
    expose: (Array.isArray(svc.expose) ? svc.expose : []).map((e) => scalarString(e) ?? ""),
    networks,
    network_mode,
    pid_mode: scalarString(svc.pid) ?? null,
    ipc_mode: scalarString(svc.ipc) ?? null,
    labels,
    restart,
    stop_grace_period_ms,
    stop_signal: scalarString(svc.stop_signal) ?? null,
    init: svc.init === true,
    read_only: svc.read_only === true,
    tty: svc.tty === true,
    stdin_open: svc.stdin_open === true,
    cap_drop: (Array.isArray(svc.cap_drop) ? svc.cap_drop : []).map((c) => scalarString(c) ?? ""),
    ...(capAdd.length ? { cap_add: capAdd } : {}),
    extra_hosts: extraHostsField(svc.extra_hosts),
    ulimits: ulimitsField(svc.ulimits, at("ulimits"), issues),
    shm_size_bytes: svc.shm_size === undefined ? null : (bytes(svc.shm_size, at("shm_size"), issues) ?? null),
    sysctls,
  };
  const secrets = secretsField(svc.secrets, at, ctx);
  if (secrets.length) service.secrets = secrets;
  // volumes_from is applied by the caller, which sees every service's volumes.
  return { service, volumesFrom };
}

function duration(v: unknown, path: FieldPath, issues: IssueList): number | undefined {
  const ms = typeof v === "string" || typeof v === "number" ? parseDurationMs(v) : undefined;
  if (ms === undefined)
    issues.error("invalid_value", path, `"${String(v)}" is not a duration (e.g. 2s, 1m30s, 500ms)`);
  return ms;
}

function bytes(v: unknown, path: FieldPath, issues: IssueList): number | undefined {
  const n = typeof v === "string" || typeof v === "number" ? parseBytes(v) : undefined;
  if (n === undefined || n === 0) {
    issues.error("invalid_value", path, `"${String(v)}" is not a memory size (e.g. 2g, 512m, or bytes)`);
    return undefined;
  }
  return n;
}

function commandField(v: unknown, path: FieldPath, issues: IssueList): string[] | null {
  if (v === undefined || v === null) return null;
  if (typeof v === "string") {
    const words = splitShellWords(v);
    if (!words) {
      issues.error("invalid_value", path, "unterminated quote in the command; close it or use the list form");
      return null;
    }
    return words;
  }
  if (Array.isArray(v) && v.every((x) => scalarString(x) !== undefined))
    return v.map((x) => scalarString(x) as string);
  issues.error("invalid_value", path, "a command is a string or a list of strings");
  return null;
}

function keyValueField(v: unknown, path: FieldPath, issues: IssueList, what: string): Record<string, string> {
  const out: Record<string, string> = {};
  if (v === undefined || v === null) return out;
  if (Array.isArray(v)) {
    v.forEach((item, i) => {
      const s = scalarString(item);
      if (s === undefined) {
        issues.error("invalid_value", [...path, i], `${what} entries are "key=value" strings`);
        return;
      }
      const eq = s.indexOf("=");
      out[eq === -1 ? s : s.slice(0, eq)] = eq === -1 ? "" : s.slice(eq + 1);
    });
  } else if (isRecord(v)) {
    for (const [k, val] of Object.entries(v))
      out[k] = val === null ? "" : (scalarString(val) ?? JSON.stringify(val));
  } else {
    issues.error("invalid_value", path, `${what} is a list of "key=value" or a mapping`);
  }
  return out;
}

function environmentField(
  svc: Record<string, unknown>,
  at: (...p: (string | number)[]) => FieldPath,
  ctx: ServiceContext,
): Record<string, string> {
  const out: Record<string, string> = {};
  // env_file first: environment: overrides it, as in Compose.
  if (svc.env_file !== undefined) {
    const entries = Array.isArray(svc.env_file) ? svc.env_file : [svc.env_file];
    entries.forEach((entry, i) => {
      const path = typeof entry === "string" ? entry : isRecord(entry) ? entry.path : undefined;
      const required = isRecord(entry) ? entry.required !== false : true;
      if (typeof path !== "string") {
        ctx.issues.error("invalid_value", at("env_file", i), "env_file entries are paths");
        return;
      }
      if (path.startsWith("/") || path.split("/").includes("..")) {
        ctx.issues.error(
          "bind_mount",
          at("env_file", i),
          "env_file must be a path inside the project directory",
        );
        return;
      }
      const text = ctx.readFile?.(path);
      if (text === undefined) {
        if (required) ctx.issues.error("invalid_value", at("env_file", i), `env_file ${path} was not found`);
        return;
      }
      Object.assign(out, parseDotenv(text));
    });
  }
  const env = svc.environment;
  if (env === undefined || env === null) return out;
  const take = (key: string, value: unknown, path: FieldPath) => {
    if (value === null || value === undefined) {
      // A bare name takes its value from the environment denv runs in; unset means omitted.
      const fromEnv = ctx.env[key];
      if (fromEnv !== undefined) out[key] = fromEnv;
      return;
    }
    const s = scalarString(value);
    if (s === undefined)
      ctx.issues.error("invalid_value", path, `environment ${key} must be a string, number or boolean`);
    else out[key] = s;
  };
  if (Array.isArray(env)) {
    env.forEach((item, i) => {
      const s = scalarString(item);
      if (s === undefined) {
        ctx.issues.error("invalid_value", at("environment", i), `entries are "KEY=value"`);
        return;
      }
      const eq = s.indexOf("=");
      take(eq === -1 ? s : s.slice(0, eq), eq === -1 ? null : s.slice(eq + 1), at("environment", i));
    });
  } else if (isRecord(env)) {
    for (const [k, v] of Object.entries(env)) take(k, v, at("environment", k));
  } else {
    ctx.issues.error("invalid_value", at("environment"), 'environment is a list of "KEY=value" or a mapping');
  }
  return out;
}

function capsField(
  svc: Record<string, unknown>,
  at: (...p: (string | number)[]) => FieldPath,
  issues: IssueList,
): ResolvedService["caps"] {
  const limits =
    isRecord(svc.deploy) && isRecord(svc.deploy.resources) && isRecord(svc.deploy.resources.limits)
      ? svc.deploy.resources.limits
      : {};
  if (isRecord(svc.deploy)) {
    for (const key of Object.keys(svc.deploy)) {
      if (key === "resources" || key === "replicas") continue;
      issues.warn(
        "ignored_field",
        at("deploy", key),
        `deploy.${key} is accepted and ignored: it is for swarm orchestration`,
      );
    }
    if (isRecord(svc.deploy.resources)) {
      for (const key of Object.keys(svc.deploy.resources)) {
        if (key === "reservations" && isRecord(svc.deploy.resources.reservations)) {
          // Devices (GPUs) are reserved for real (gpu-request.ts); memory and CPU reservations are not.
          for (const r of Object.keys(svc.deploy.resources.reservations))
            if (r !== "devices")
              issues.warn(
                "ignored_field",
                at("deploy", "resources", "reservations", r),
                `deploy.resources.reservations.${r} is accepted and ignored: only limits cap a service`,
              );
        } else if (key !== "limits")
          issues.warn(
            "ignored_field",
            at("deploy", "resources", key),
            `deploy.resources.${key} is accepted and ignored: only limits cap a service`,
          );
      }
    }
    for (const key of Object.keys(limits)) {
      if (!["memory", "cpus", "pids"].includes(key))
        issues.error(
          "unsupported_field",
          at("deploy", "resources", "limits", key),
          `deploy.resources.limits.${key} is not a limit denv renders`,
        );
    }
  }
  const pick = <T>(
    field: string,
    limitField: string,
    parse: (v: unknown, p: FieldPath) => T | undefined,
    fallback: T,
  ): T => {
    const a = svc[field] === undefined ? undefined : parse(svc[field], at(field));
    const b =
      limits[limitField] === undefined
        ? undefined
        : parse(limits[limitField], at("deploy", "resources", "limits", limitField));
    if (a !== undefined && b !== undefined && a !== b) {
      issues.error(
        "conflicting_values",
        at(field),
        `${field} and deploy.resources.limits.${limitField} disagree (${String(a)} vs ${String(b)}); keep one`,
      );
    }
    return a ?? b ?? fallback;
  };
  return {
    memory_bytes: pick("mem_limit", "memory", (v, p) => bytes(v, p, issues), DEFAULT_CAPS.memory_bytes),
    pids: pick(
      "pids_limit",
      "pids",
      (v, p) => {
        const n = typeof v === "number" ? v : Number(scalarString(v));
        if (Number.isSafeInteger(n) && n > 0) return n;
        // -1 and 0 mean "unlimited" in Docker; an environment always gets a cap.
        issues.error(
          "invalid_value",
          p,
          `pids_limit "${String(v)}" must be a positive integer (every service is capped)`,
        );
        return undefined;
      },
      DEFAULT_CAPS.pids,
    ),
    cpus: pick(
      "cpus",
      "cpus",
      (v, p) => {
        const n = typeof v === "string" || typeof v === "number" ? parseCpus(v) : undefined;
        if (n === undefined)
          issues.error("invalid_value", p, `cpus "${String(v)}" must be a positive number`);
        return n;
      },
      DEFAULT_CAPS.cpus,
    ),
  };
}

function healthcheckField(
  v: unknown,
  path: FieldPath,
  issues: IssueList,
): { healthcheck: ResolvedService["healthcheck"]; disabled: boolean } {
  if (v === undefined || v === null) return { healthcheck: null, disabled: false };
  if (!isRecord(v)) {
    issues.error("invalid_value", path, "healthcheck is a mapping with test:, interval:, retries: ...");
    return { healthcheck: null, disabled: false };
  }
  if (v.disable === true) return { healthcheck: null, disabled: true };
  let test: string[] | undefined;
  if (typeof v.test === "string") test = ["CMD-SHELL", v.test];
  else if (Array.isArray(v.test) && v.test.every((x) => typeof x === "string")) {
    const [head, ...rest] = v.test as string[];
    if (head === "NONE") return { healthcheck: null, disabled: true };
    if (head === "CMD" && rest.length > 0) test = ["CMD", ...rest];
    else if (head === "CMD-SHELL" && rest.length === 1) test = ["CMD-SHELL", rest[0] as string];
  }
  if (!test) {
    issues.error(
      "invalid_value",
      [...path, "test"],
      'healthcheck.test is a string, ["CMD", argv...], ["CMD-SHELL", "script"] or ["NONE"]',
    );
    return { healthcheck: null, disabled: false };
  }
  const ms = (key: string, fallback: number) =>
    v[key] === undefined ? fallback : (duration(v[key], [...path, key], issues) ?? fallback);
  let retries = DEFAULT_HEALTHCHECK.retries;
  if (v.retries !== undefined) {
    if (typeof v.retries === "number" && Number.isInteger(v.retries) && v.retries >= 0) retries = v.retries;
    else issues.error("invalid_value", [...path, "retries"], "retries must be a whole number");
  }
  for (const key of Object.keys(v)) {
    if (
      !["test", "interval", "timeout", "start_period", "start_interval", "retries", "disable"].includes(key)
    )
      issues.error(
        "unsupported_field",
        [...path, key],
        `healthcheck.${key} is not a Compose healthcheck field`,
      );
  }
  return {
    healthcheck: {
      test,
      interval_ms: ms("interval", DEFAULT_HEALTHCHECK.interval_ms),
      timeout_ms: ms("timeout", DEFAULT_HEALTHCHECK.timeout_ms),
      start_period_ms: ms("start_period", DEFAULT_HEALTHCHECK.start_period_ms),
      start_interval_ms: v.start_interval === undefined ? null : ms("start_interval", 5000),
      retries,
    },
    disabled: false,
  };
}

function dependsOnField(v: unknown, path: FieldPath, ctx: ServiceContext): ResolvedService["depends_on"] {
  const out: ResolvedService["depends_on"] = {};
  if (v === undefined || v === null) return out;
  const add = (
    name: string,
    p: FieldPath,
    cond: unknown = "service_started",
    required = true,
    restart = false,
  ) => {
    if (!ctx.serviceNames.has(name)) {
      if (required)
        ctx.issues.error("service_unknown", p, `depends_on names service ${name}, which is not in the file`);
      return;
    }
    if (
      cond !== "service_started" &&
      cond !== "service_healthy" &&
      cond !== "service_completed_successfully"
    ) {
      ctx.issues.error(
        "invalid_value",
        p,
        "condition is service_started, service_healthy or service_completed_successfully",
      );
      return;
    }
    out[name] = { condition: cond, required, restart };
  };
  if (Array.isArray(v))
    v.forEach((n, i) => {
      add(scalarString(n) ?? "", [...path, i]);
    });
  else if (isRecord(v)) {
    for (const [name, spec] of Object.entries(v)) {
      const s = isRecord(spec) ? spec : {};
      add(name, [...path, name], s.condition ?? "service_started", s.required !== false, s.restart === true);
    }
  } else ctx.issues.error("invalid_value", path, "depends_on is a list of services or a mapping");
  return out;
}

/**
 * A service's secrets: NAME, or {source, target, uid, gid, mode}, naming a top-level secret. Each
 * is a read-only file at /run/secrets/NAME (a relative target is under /run/secrets), owned by
 * root and readable by all (0444) unless uid, gid and mode say otherwise, as Compose mounts one.
 */
function secretsField(
  raw: unknown,
  at: (...p: (string | number)[]) => FieldPath,
  ctx: ServiceContext,
): NonNullable<ResolvedService["secrets"]> {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) {
    ctx.issues.error("invalid_value", at("secrets"), "secrets is a list of secret names or mappings");
    return [];
  }
  const out: NonNullable<ResolvedService["secrets"]> = [];
  const id = (v: unknown, p: FieldPath, what: string): number | null => {
    if (v === undefined || v === null) return 0;
    const n = typeof v === "number" ? v : typeof v === "string" && /^\d+$/.test(v) ? Number(v) : Number.NaN;
    if (!Number.isInteger(n) || n < 0 || n > 0x7fffffff) {
      ctx.issues.error("invalid_value", p, `${what} must be a number (a uid or gid)`);
      return null;
    }
    return n;
  };
  raw.forEach((entry, i) => {
    const p = at("secrets", i);
    const e = typeof entry === "string" ? { source: entry } : isRecord(entry) ? entry : null;
    const source = e ? scalarString(e.source) : undefined;
    if (!e || !source) {
      ctx.issues.error("invalid_value", p, "a secret is a name or a mapping with source:");
      return;
    }
    if (!ctx.declaredSecrets?.has(source)) {
      ctx.issues.error(
        "secret_undeclared",
        p,
        `secret ${source} is not declared; add it under the top-level secrets: with file:`,
      );
      return;
    }
    const t = scalarString(e.target) ?? source;
    const target = t.startsWith("/") ? posix.normalize(t) : posix.join("/run/secrets", t);
    if (!target.startsWith("/") || target === "/" || /[\n\r\0]/.test(t) || t.split("/").includes("..")) {
      ctx.issues.error("invalid_value", [...p, "target"], `secret target ${t} must name a file`);
      return;
    }
    const uid = id(e.uid, [...p, "uid"], "uid");
    const gid = id(e.gid, [...p, "gid"], "gid");
    let mode = 0o444;
    if (e.mode !== undefined) {
      // Modes are written in octal (0440); YAML 1.2 reads 0440 as the decimal 440, so a number
      // whose digits are all octal ones is read as octal, as the file meant it.
      const m =
        typeof e.mode === "number"
          ? /^[0-7]{1,4}$/.test(String(e.mode))
            ? Number.parseInt(String(e.mode), 8)
            : e.mode
          : typeof e.mode === "string" && /^0?[0-7]{1,4}$/.test(e.mode)
            ? Number.parseInt(e.mode, 8)
            : Number.NaN;
      if (!Number.isInteger(m) || m < 0 || m > 0o777) {
        ctx.issues.error("invalid_value", [...p, "mode"], "mode is a file mode (0 to 0777)");
        return;
      }
      mode = m;
    }
    if (uid === null || gid === null) return;
    out.push({ name: source, target, uid, gid, mode });
  });
  return out;
}

const DOCKER_SOCKET = /(^|\/)docker\.sock$|^\/var\/run\/docker|^\/run\/docker/;

/**
 * A dataset name for an anonymous volume: `anon-SERVICE-PATH` in the name rule's characters, cut to
 * fit with a short hash of the path when cut or taken, so two paths never share one.
 */
export function anonymousDatasetName(
  service: string,
  target: string,
  taken: (name: string) => boolean,
): string {
  return datasetNameFrom(`anon-${service}`, target, `${service}\0${target}`, taken);
}

/** `PREFIX-PATH` in the name rule's characters, cut and hashed (from `key`) when too long or taken. */
function datasetNameFrom(
  prefix: string,
  path: string,
  key: string,
  taken: (name: string) => boolean,
): string {
  const slug = path
    .replace(/[^A-Za-z0-9_-]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .replace(/-{2,}/g, "-");
  const plain = `${prefix}-${slug || "root"}`.replace(/\.+/g, "-");
  if (plain.length <= NAME_MAX_LENGTH && isValidName(plain) && !taken(plain)) return plain;
  const hash = createHash("sha256").update(key).digest("hex").slice(0, 8);
  for (let i = 0; ; i++) {
    const suffix = `-${hash}${i ? `-${i}` : ""}`;
    const n = `${plain.slice(0, NAME_MAX_LENGTH - suffix.length).replace(/[-_]+$/, "")}${suffix}`;
    if (!taken(n)) return n;
  }
}

function volumesField(
  svc: Record<string, unknown>,
  at: (...p: (string | number)[]) => FieldPath,
  serviceName: string,
  ctx: ServiceContext,
): { volumes: ResolvedService["volumes"]; tmpfs: ResolvedService["tmpfs"] } {
  const volumes: ResolvedService["volumes"] = [];
  const tmpfs: ResolvedService["tmpfs"] = [];
  const { issues } = ctx;
  const refuseBind = (source: string, p: FieldPath) => {
    if (DOCKER_SOCKET.test(source))
      issues.error("docker_socket", p, "the Docker socket is the host itself; an environment never gets it");
    else
      issues.error(
        "bind_mount",
        p,
        `bind mount of ${source} refused: the world must not reach the host; declare a named volume under volumes: and use it instead`,
      );
  };
  const named = (
    source: string,
    target: string,
    readOnly: boolean,
    p: FieldPath,
    subpath: string | null,
    nocopy: boolean,
  ) => {
    if (!ctx.declaredVolumes.has(source)) {
      issues.error(
        "volume_undeclared",
        p,
        `volume ${source} is not declared; add it under the top-level volumes:`,
      );
      return;
    }
    if (!target.startsWith("/")) {
      issues.error("invalid_value", p, `volume target ${target} must be an absolute path in the container`);
      return;
    }
    volumes.push({ dataset: source, target, read_only: readOnly, subpath, nocopy });
  };
  // An anonymous volume (a path alone): a dataset of its own, named from the service and the path,
  // which the engine fills from the image's content there as it does any new volume; snapshotted
  // and forked like the rest. Where the file has no dataset map to add to, it stays refused.
  const anonymous = (target: string, readOnly: boolean, p: FieldPath) => {
    if (!target.startsWith("/")) {
      issues.error("invalid_value", p, `volume target ${target} must be an absolute path in the container`);
      return;
    }
    if (!ctx.datasets) {
      issues.error(
        "volume_anonymous",
        p,
        `anonymous volume ${target}: name it and declare it under volumes:`,
      );
      return;
    }
    const name = anonymousDatasetName(serviceName, target, (n) =>
      Boolean(ctx.datasets?.[n] || ctx.declaredVolumes.has(n)),
    );
    ctx.datasets[name] = { labels: { "dev.denv.anonymous": `${serviceName}:${target}` } };
    volumes.push({ dataset: name, target, read_only: readOnly, subpath: null, nocopy: false });
    issues.warn(
      "volume_anonymous",
      p,
      `anonymous volume ${target} became dataset ${name}: filled from the image's ${target}, snapshotted and forked like a named volume`,
    );
  };
  // A relative bind mount of the project's own files: nothing of the host is shared, since the
  // files travel with the project's source. They become a dataset of the version seeded with them
  // at prepare (one per source path, shared by every service that mounts it, as the host path
  // would be), snapshotted and forked like any volume. Outside the project it stays refused.
  const projectFiles = (source: string, target: string, readOnly: boolean, p: FieldPath) => {
    if (DOCKER_SOCKET.test(source)) return refuseBind(source, p);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: a path holding them is refused
    if (/[\x00-\x1f\x7f]/.test(source)) {
      issues.error("bind_mount", p, `bind mount source ${JSON.stringify(source)} holds a control character`);
      return;
    }
    const rel = projectRelativePath(source, "bind mount source");
    if (typeof rel !== "string") return refuseBind(source, p);
    if (!target.startsWith("/")) {
      issues.error("invalid_value", p, `volume target ${target} must be an absolute path in the container`);
      return;
    }
    if (!ctx.datasets) return refuseBind(source, p);
    let name = Object.entries(ctx.datasets).find(([, d]) => d.seed?.source === rel)?.[0];
    if (!name) {
      name = datasetNameFrom("project", rel, `project\0${rel}`, (n) =>
        Boolean(ctx.datasets?.[n] || ctx.declaredVolumes.has(n)),
      );
      ctx.datasets[name] = { labels: { "dev.denv.project-files": rel }, seed: { source: rel } };
    }
    volumes.push({ dataset: name, target, read_only: readOnly, subpath: null, nocopy: false });
    issues.warn(
      "bind_mount_project",
      p,
      `bind mount ${source} became dataset ${name}: the project's ${rel === "." ? "directory" : rel} travels with its source and is mounted ${readOnly ? "read-only" : "writable"} at ${target}, snapshotted and forked like a volume`,
    );
  };
  const list = svc.volumes === undefined ? [] : Array.isArray(svc.volumes) ? svc.volumes : undefined;
  if (!list) issues.error("invalid_value", at("volumes"), "volumes is a list");
  (list ?? []).forEach((entry, i) => {
    const p = at("volumes", i);
    if (typeof entry === "string") {
      const parts = entry.split(":");
      if (parts.length === 1) {
        anonymous(entry, false, p);
        return;
      }
      const [source = "", target = "", mode = ""] = parts;
      if (parts.length > 3) {
        issues.error("invalid_value", p, `"${entry}" is not SOURCE:TARGET[:MODE]`);
        return;
      }
      const modes = mode.split(",").filter(Boolean);
      if (source.startsWith(".")) {
        const bad = modes.filter((m) => !["ro", "rw", "z", "Z"].includes(m));
        if (bad.length) issues.error("invalid_value", p, `unknown bind mount mode ${bad.join(",")}`);
        else projectFiles(source, target, modes.includes("ro"), p);
        return;
      }
      if (/^[./~]/.test(source) || source.includes("/")) {
        refuseBind(source, p);
        return;
      }
      const bad = modes.filter((m) => !["ro", "rw", "z", "Z", "nocopy"].includes(m));
      if (bad.length) {
        issues.error("invalid_value", p, `unknown volume mode ${bad.join(",")}`);
        return;
      }
      named(source, target, modes.includes("ro"), p, null, modes.includes("nocopy"));
    } else if (isRecord(entry)) {
      const type = entry.type ?? "volume";
      const source = scalarString(entry.source) ?? "";
      const target = scalarString(entry.target) ?? "";
      if (type === "bind" && source && !/^[/~]/.test(source) && !/^[a-zA-Z]:[\\/]/.test(source)) {
        projectFiles(source, target, entry.read_only === true, p);
        return;
      }
      if (type === "bind" || type === "npipe") {
        refuseBind(source || target, p);
        return;
      }
      if (type === "tmpfs") {
        const t = isRecord(entry.tmpfs) ? entry.tmpfs : {};
        tmpfs.push({
          target,
          size_bytes: t.size === undefined ? null : (bytes(t.size, [...p, "tmpfs", "size"], issues) ?? null),
          mode:
            Number.isInteger(t.mode) && (t.mode as number) >= 0 && (t.mode as number) <= 0o7777
              ? (t.mode as number)
              : null,
        });
        return;
      }
      if (type === "image") {
        issues.error(
          "unsupported_field",
          [...p, "type"],
          "image volumes are not available; copy the files into the service's image",
        );
        return;
      }
      if (type !== "volume") {
        issues.error(
          "invalid_value",
          [...p, "type"],
          `volume type ${String(type)} must be volume, tmpfs or bind`,
        );
        return;
      }
      if (!source) {
        anonymous(target, entry.read_only === true, p);
        return;
      }
      const v = isRecord(entry.volume) ? entry.volume : {};
      named(
        source,
        target,
        entry.read_only === true,
        p,
        typeof v.subpath === "string" ? v.subpath : null,
        v.nocopy === true,
      );
    } else
      issues.error(
        "invalid_value",
        p,
        "a volume is SOURCE:TARGET[:MODE] or a mapping with type/source/target",
      );
  });
  // A config is its project file mounted read-only, at /NAME unless it says where (as Compose
  // mounts one without a swarm; like Compose then, uid, gid and mode are not applied).
  const configs = svc.configs === undefined ? [] : Array.isArray(svc.configs) ? svc.configs : undefined;
  if (!configs) issues.error("invalid_value", at("configs"), "configs is a list");
  (configs ?? []).forEach((entry, i) => {
    const p = at("configs", i);
    const name = isRecord(entry) ? scalarString(entry.source) : scalarString(entry);
    const file = name === undefined ? undefined : ctx.configFiles?.get(name);
    if (name === undefined || file === undefined) {
      issues.error(
        "secret_undeclared",
        p,
        `config ${name ?? JSON.stringify(entry)} is not declared under the top-level configs:`,
      );
      return;
    }
    const target = (isRecord(entry) ? scalarString(entry.target) : undefined) ?? `/${name}`;
    if (isRecord(entry) && ["uid", "gid", "mode"].some((k) => entry[k] !== undefined))
      issues.warn(
        "ignored_field",
        p,
        `config ${name}: uid, gid and mode are not applied to a config outside a swarm (Compose does not either)`,
      );
    projectFiles(
      file.startsWith(".") ? file : `./${file}`,
      target.startsWith("/") ? target : `/${target}`,
      true,
      p,
    );
  });
  if (svc.tmpfs !== undefined) {
    const entries = Array.isArray(svc.tmpfs) ? svc.tmpfs : [svc.tmpfs];
    entries.forEach((e, i) => {
      const s = scalarString(e) ?? "";
      const [target = "", opts = ""] = s.split(/:(.*)/);
      if (!target.startsWith("/")) {
        issues.error("invalid_value", at("tmpfs", i), "tmpfs entries are absolute paths");
        return;
      }
      let size: number | null = null;
      let mode: number | null = null;
      for (const o of opts.split(",").filter(Boolean)) {
        const [k, val = ""] = o.split("=");
        if (k === "size") size = parseBytes(val) ?? null;
        else if (k === "mode") mode = Number.parseInt(val, 8);
      }
      tmpfs.push({ target, size_bytes: size, mode: Number.isNaN(mode) ? null : mode });
    });
  }
  return { volumes, tmpfs };
}

function volumesFromField(v: unknown, path: FieldPath, ctx: ServiceContext): string[] {
  if (v === undefined || v === null) return [];
  const out: string[] = [];
  (Array.isArray(v) ? v : [v]).forEach((e, i) => {
    const s = scalarString(e) ?? "";
    if (s.startsWith("container:")) {
      ctx.issues.error(
        "volumes_from_outside",
        [...path, i],
        `volumes_from ${s} reaches a container outside the stack`,
      );
      return;
    }
    const name = s.split(":")[0] ?? "";
    if (!ctx.serviceNames.has(name)) {
      ctx.issues.error(
        "volumes_from_outside",
        [...path, i],
        `volumes_from names ${name}, which is not a service of this file`,
      );
      return;
    }
    out.push(s);
  });
  return out;
}

function portsField(v: unknown, path: FieldPath, issues: IssueList): ResolvedService["ports"] {
  const out: ResolvedService["ports"] = [];
  if (v === undefined || v === null) return out;
  if (!Array.isArray(v)) {
    issues.error("invalid_value", path, "ports is a list");
    return out;
  }
  v.forEach((entry, i) => {
    const p = [...path, i];
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
  });
  return out;
}

function parsePortString(s: string): ResolvedService["ports"] | undefined {
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

function networksField(
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

function extraHostsField(v: unknown): string[] {
  if (Array.isArray(v)) return v.map((x) => scalarString(x) ?? "");
  if (isRecord(v)) return Object.entries(v).map(([host, ip]) => `${host}:${scalarString(ip) ?? ""}`);
  return [];
}

function ulimitsField(v: unknown, path: FieldPath, issues: IssueList): ResolvedService["ulimits"] {
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
