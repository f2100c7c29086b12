/**
 * A resolved service → the container the engine runs: a pure function of the stack, the service
 * and what its image says. Everything denv enforces on a container is decided here, in one place:
 * caps, hardening (no-new-privileges, dropped capabilities), IPv6 off on deny networks, labels,
 * volumes bound to datasets, and — with the agent — the agent as the entrypoint.
 */
import { DenvError, type ResolvedService } from "@denv/protocol";
import { clockMounts } from "../clock/clock-state.ts";
import { AGENT_RUN_DIR, AGENT_SOCKET_NAME } from "../exec/agent-channel.ts";
import type { StackRecord } from "../host/state-store.ts";
import type { ContainerSpec, DeviceRequest, ImageConfig, Labels } from "../runtime/container-runtime.ts";
import { DROPPED_CAPS, hardenedCapDrop } from "./caps-readback.ts";
import { LABEL } from "./labels.ts";

/** Where the agent's executable is inside every container (a read-only bind of the file). */
export const AGENT_BIN = "/.denv/bin/denv-agent";

/** A service as it runs under its agent: its user (null: root), its argv, whether HOME is set. */
export interface ServiceIdentity {
  user: string | null;
  argv: string[];
  homeSet: boolean;
}

/**
 * Who a service runs as and what it runs, as the engine would decide it: the service's `user:`,
 * else the image's USER; its entrypoint and command, else the image's (an entrypoint set in the
 * compose file drops the image's command, as in Docker).
 */
export function serviceIdentity(service: string, s: ResolvedService, image: ImageConfig): ServiceIdentity {
  const entrypoint = s.entrypoint ?? image.entrypoint ?? [];
  const argv = [...entrypoint, ...(s.command ?? (s.entrypoint !== null ? [] : (image.cmd ?? [])))];
  if (argv.length === 0)
    throw new DenvError(
      "invalid_argument",
      `service ${service} has no command: its image gives none; set command: in the compose file`,
    );
  return {
    user: s.user ?? image.user,
    argv,
    homeSet: Object.hasOwn(s.environment, "HOME") || image.envNames.includes("HOME"),
  };
}

/**
 * What a container denvd makes for itself (a verifier, a dataset's seeding) has beside its own
 * image, command and mounts: no healthcheck, console or restart, the hardened capability set and
 * no-new-privileges, nothing of a service's tuning.
 */
export const ONE_SHOT_CONTAINER = {
  healthcheck: null,
  readOnlyRootfs: false,
  tty: false,
  openStdin: false,
  capDrop: DROPPED_CAPS,
  noNewPrivileges: true,
  extraHosts: [],
  ulimits: {},
  shmSizeBytes: null,
  sysctls: {},
  stopSignal: null,
  stopTimeoutMs: 1000,
  restart: "no",
} satisfies Partial<ContainerSpec>;

export interface ContainerSpecInput {
  stack: Pick<StackRecord, "id" | "network" | "operationId" | "versionId"> & { egress: "deny" | "allow" };
  service: string;
  s: ResolvedService;
  /** The engine network for a compose network. */
  networkName: (composeNetwork: string) => string;
  /** Containers already created (for service:NAME namespaces). */
  containerIds: Record<string, string>;
  /** denvd's labels plus the ones given. */
  labels: (extra: Labels) => Labels;
  /** With the agent: its executable on the host, this container's run directory, the identity. */
  agent: { binary: string; runDir: string; identity: ServiceIdentity } | null;
  /** The stack's clock directory on the host when its clock is frozen (clock-state.ts); else null. */
  clockDir?: string | null;
  /** This service's file secrets: files denvd wrote on the host, bound read-only (stack-secrets.ts). */
  secrets?: { source: string; target: string }[];
  /** Datasets seeded with one project file: the file's host path, bound alone (stack-seeds.ts). */
  fileSeeds?: Record<string, string>;
  /** The GPUs placement gave this service (UUIDs, or null), and how this host passes them. */
  gpus?: { assigned: string[] | null; mode: "cdi" | "nvidia" | "none" };
  /** With an egress policy: the variables pointing HTTP clients at the stack's gateway. */
  proxyEnv?: Record<string, string> | null;
}

/**
 * A service's GPU request as the engine takes it. Given GPUs (UUIDs placement chose) are passed
 * by id and nothing else, so a fork never shares a sibling's; CDI names them `nvidia.com/gpu=ID`
 * (all: `=all`); otherwise the engine's nvidia driver with the request's count (all: -1) or ids
 * and its capabilities.
 */
export function deviceRequestsFor(
  r: ResolvedService["gpus"],
  gpus: ContainerSpecInput["gpus"],
): DeviceRequest[] {
  if (!r) return [];
  const assigned = gpus?.assigned ?? null;
  const ids = assigned ?? r.device_ids;
  if (gpus?.mode === "cdi") {
    const names =
      ids ?? (r.count === "all" || r.count === null ? ["all"] : [...Array(r.count).keys()].map(String));
    return [
      {
        driver: "cdi",
        count: 0,
        deviceIds: names.map((n) => `nvidia.com/gpu=${n}`),
        capabilities: [],
        options: {},
      },
    ];
  }
  return [
    {
      driver: r.driver,
      count: ids ? 0 : r.count === "all" || r.count === null ? -1 : r.count,
      deviceIds: ids ?? [],
      capabilities: [r.capabilities],
      options: r.options,
    },
  ];
}

export function containerSpecFor(i: ContainerSpecInput): ContainerSpec {
  const { stack, service: svc, s, containerIds, agent } = i;
  const network: ContainerSpec["network"] =
    s.network_mode === "none"
      ? { kind: "none" }
      : s.network_mode?.startsWith("service:")
        ? { kind: "container", containerId: containerIds[s.network_mode.slice(8)] as string }
        : {
            kind: "network",
            networks: Object.entries(s.networks).map(([n, cfg]) => ({
              name: i.networkName(n),
              aliases: [svc, ...cfg.aliases],
            })),
          };
  const nsMode = (v: string | null | undefined) =>
    v?.startsWith("service:") ? `container:${containerIds[v.slice(8)] ?? ""}` : (v ?? null);
  // With the agent, the container starts as root with the agent as its entrypoint; the agent forks
  // itself off and becomes the service's command as the service's user (agent/denv-agent.c, init).
  const command = agent
    ? {
        entrypoint: [
          AGENT_BIN,
          "init",
          `${AGENT_RUN_DIR}/${AGENT_SOCKET_NAME}`,
          agent.identity.user ?? "",
          agent.identity.homeSet ? "-" : "h",
          "--",
          ...agent.identity.argv,
        ],
        cmd: null,
        user: "0",
      }
    : { entrypoint: s.entrypoint, cmd: s.command, user: s.user };
  // The egress gateway's variables where the service sets none of its own.
  const environment = i.proxyEnv ? { ...i.proxyEnv, ...s.environment } : s.environment;
  const clock = i.clockDir ? clockMounts(i.clockDir, environment) : null;
  return {
    name: `${stack.network}-${svc}`,
    image: s.image_pinned ?? s.image,
    ...command,
    env: clock?.env ?? environment,
    workingDir: s.working_dir,
    hostname: s.hostname ?? svc,
    labels: i.labels({
      [LABEL.stack]: stack.id,
      [LABEL.service]: svc,
      [LABEL.operation]: stack.operationId,
      ...(stack.versionId ? { [LABEL.version]: stack.versionId } : {}),
    }),
    network,
    mounts: [
      ...s.volumes.map((v) => {
        const file = i.fileSeeds?.[v.dataset];
        return file
          ? { kind: "bind" as const, source: file, target: v.target, readOnly: v.read_only }
          : {
              kind: "volume" as const,
              volume: `${stack.network}-${v.dataset}`,
              target: v.target,
              readOnly: v.read_only,
              subpath: v.subpath,
              nocopy: v.nocopy,
            };
      }),
      ...s.tmpfs.map((t) => ({
        kind: "tmpfs" as const,
        target: t.target,
        sizeBytes: t.size_bytes,
        mode: t.mode,
      })),
      // The agent's executable and the directory of the socket it dials, both read-only: nothing
      // the container writes lands on the host, and it cannot redirect the channel.
      ...(agent
        ? [
            { kind: "bind" as const, source: agent.binary, target: AGENT_BIN, readOnly: true },
            { kind: "bind" as const, source: agent.runDir, target: AGENT_RUN_DIR, readOnly: true },
          ]
        : []),
      ...(clock?.mounts ?? []),
      ...(i.secrets ?? []).map((m) => ({
        kind: "bind" as const,
        source: m.source,
        target: m.target,
        readOnly: true,
      })),
    ],
    memoryBytes: s.caps.memory_bytes,
    pids: s.caps.pids,
    cpus: s.caps.cpus,
    // With the agent the container runs as root: the engine's (and the image's) healthcheck would
    // run as root too, so it is off; denvd runs the healthcheck itself, as the service's user.
    healthcheck: agent
      ? { test: ["NONE"], intervalMs: 0, timeoutMs: 0, startPeriodMs: 0, retries: 0 }
      : s.healthcheck
        ? {
            test: s.healthcheck.test,
            intervalMs: s.healthcheck.interval_ms,
            timeoutMs: s.healthcheck.timeout_ms,
            startPeriodMs: s.healthcheck.start_period_ms,
            retries: s.healthcheck.retries,
          }
        : null,
    init: s.init,
    readOnlyRootfs: s.read_only,
    tty: s.tty,
    openStdin: s.stdin_open,
    // Hardened whatever the image: no privilege gained through setuid binaries, and fewer
    // capabilities than the engine's default (a service may ask some of them back: cap_add).
    capDrop: hardenedCapDrop(s),
    noNewPrivileges: true,
    extraHosts: s.extra_hosts,
    ulimits: s.ulimits,
    shmSizeBytes: s.shm_size_bytes,
    ...(s.gpus ? { deviceRequests: deviceRequestsFor(s.gpus, i.gpus) } : {}),
    // On deny networks a container has no IPv6 at all: its interfaces would keep link-local
    // addresses that reach the host's on the bridge, which an internal network does not stop.
    sysctls:
      stack.egress === "deny" && network.kind === "network"
        ? { ...s.sysctls, "net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1" }
        : s.sysctls,
    stopSignal: s.stop_signal,
    stopTimeoutMs: s.stop_grace_period_ms,
    restart: s.restart,
    pidMode: nsMode(s.pid_mode),
    ipcMode: nsMode(s.ipc_mode),
  };
}
