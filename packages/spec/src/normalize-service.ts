import { DEFAULT_STOP_GRACE_PERIOD_MS, type ResolvedService } from "@denv/protocol";
import { buildField } from "./build-field.ts";
import { gpuField } from "./gpu-request.ts";
import type { FieldPath } from "./issues.ts";
import { RESTORABLE_CAPS } from "./restorable-caps.ts";
import { bytes, duration, isRecord, type ServiceContext, scalarString } from "./service-fields.ts";
import { extraHostsField, networksField, portsField, ulimitsField } from "./service-network-fields.ts";
import {
  capsField,
  commandField,
  dependsOnField,
  environmentField,
  healthcheckField,
  keyValueField,
  secretsField,
} from "./service-process-fields.ts";
import { volumesField, volumesFromField } from "./service-volumes.ts";
import { sysctlProblem } from "./sysctls.ts";
import { userProblem } from "./users.ts";

export type { ServiceContext } from "./service-fields.ts";

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
