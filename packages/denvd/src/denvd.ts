/**
 * denvd's runtime as a library: environments (whole stacks) on one host, built from a resolved
 * spec, snapshotted consistently into versions, forked, rolled back, destroyed, and reached through
 * exec and files. Every step returns evidence a lab can audit. The sidecar process serves this
 * over its WebSocket; tests drive it directly against the real engine and storage.
 *
 * Processes restart on fork and rollback: what a version keeps is every volume's state, not memory.
 */
import { randomBytes } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { readFile, rm } from "node:fs/promises";
import type { Socket } from "node:net";
import { join, posix } from "node:path";
import type { Readable } from "node:stream";
import {
  DenvError,
  type ForkEvidence,
  type HealthEvidence,
  type ResolvedService,
  type ResolvedSpec,
  resolvedSpecSchema,
  type ServiceStartEvidence,
  type SnapshotEvidence,
  type WarmEvidence,
} from "@denv/protocol";
import { nameProblem } from "@denv/spec";
import { hardenedCapDrop, readBackCaps } from "./caps-readback.ts";
import { bridgeLinkLocal, type EgressEvidence, type EgressTarget, probeEgress } from "./egress-probe.ts";
import { AGENT_RUN_DIR, AGENT_SOCKET_NAME, AgentChannel } from "./exec/agent-channel.ts";
import { AgentExecutor, type AgentTarget } from "./exec/agent-executor.ts";
import { EngineExecutor } from "./exec/engine-executor.ts";
import type { ExecOptions, ExecResult, Executor } from "./exec/executor.ts";
import { hostRoutes } from "./host-routes.ts";
import { LABEL } from "./labels.ts";
import type { ContainerRuntime, ContainerSpec, Labels, ObjectSummary } from "./runtime/container-runtime.ts";
import { type EnvironmentRecord, StateStore, type VersionRecord } from "./state-store.ts";
import { isSafeId, type QuotaEvidence, type StorageDriver } from "./storage/storage-driver.ts";
import { pickSubnet } from "./subnet-allocator.ts";
import { sanitizeTar } from "./tar-sanitizer.ts";

export interface DenvdOptions {
  stateDir: string;
  storage: StorageDriver;
  runtime: ContainerRuntime;
  executor?: Executor;
  /** Added to every object (tests mark what they create). */
  extraLabels?: Labels;
  /** Where the egress probe connects; null: only the route table is checked. */
  egressProbeTarget?: EgressTarget | null;
  /** How often denvd runs a service's healthcheck itself while it starts. */
  healthPollMs?: number;
  /**
   * Host path of the static denv-agent. When set, it is mounted read-only into every container and
   * started there, and exec goes through it instead of the engine's exec; when absent, the engine.
   */
  agentBinary?: string | null;
  /** Where environment networks get their /24 subnets (default 172.16.0.0/12). */
  subnetPool?: string;
  /** Refuse a fork or snapshot when the pool has less free space than this. */
  minFreeBytes?: number;
  /**
   * How much each dataset of an environment may grow beyond what it held when it was made (empty,
   * or the snapshot it was cloned from): no environment fills the pool. Default 10 GiB.
   */
  datasetGrowthBytes?: number;
  log?: (message: string, context?: Record<string, unknown>) => void;
}

const HEALTH_DEADLINE_FLOOR_MS = 60_000;

/** A service as it runs under its agent: its user (null: root), its argv, whether HOME is set. */
interface ServiceIdentity {
  user: string | null;
  argv: string[];
  homeSet: boolean;
}
/** Where the agent's executable is inside every container (a read-only bind of the file). */
const AGENT_BIN = "/.denv/bin/denv-agent";
/** Files read from a container travel in one message to the server: a bound on the tar. */
export const MAX_FILES_BYTES = 64 * 1024 * 1024;
/** How long a files read waits for the agent of a container that just started. */
const AGENT_WAIT_MS = 3000;
const TAIL_BYTES = 2048;

const newId = (prefix: string) => `${prefix}_${randomBytes(6).toString("hex")}`;
const tail = (b: Buffer) => b.subarray(Math.max(0, b.length - TAIL_BYTES)).toString("utf8");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class Denvd {
  readonly storage: StorageDriver;
  readonly runtime: ContainerRuntime;
  readonly executor: Executor;
  private readonly store: StateStore;
  private readonly options: DenvdOptions;
  private readonly log: NonNullable<DenvdOptions["log"]>;
  /** Containers with a denv-agent: how to reach it, and the user commands run as by default. */
  private readonly agentTargets = new Map<string, AgentTarget>();
  /** The sockets denvd listens on for the agents (they dial in; see agent-channel.ts). */
  private readonly agents: AgentChannel;
  /** Containers started by their agent: the user commands run as when none is asked for. */
  private readonly defaultUsers = new Map<string, string | null>();
  /** What the reconcile at open found and settled (and what it could not). */
  lastReconcile: { removed: string[]; lost: string[]; failed: string[] } = {
    removed: [],
    lost: [],
    failed: [],
  };

  private constructor(options: DenvdOptions, store: StateStore) {
    this.options = options;
    this.storage = options.storage;
    this.runtime = options.runtime;
    const engine = new EngineExecutor(options.runtime);
    this.executor =
      options.executor ??
      (options.agentBinary ? new AgentExecutor(engine, (id) => this.agentTargets.get(id) ?? null) : engine);
    this.store = store;
    this.agents = new AgentChannel(options.stateDir);
    this.log = options.log ?? (() => {});
    const t = options.egressProbeTarget;
    if (t && (!/^[0-9.]+$|^[0-9a-f:]+$/i.test(t.host) || !Number.isInteger(t.port))) {
      throw new DenvError("invalid_argument", "the egress probe target must be an IP address and a port");
    }
  }

  /** Opens the state directory, prepares storage, and reconciles: no orphan survives a restart. */
  static async open(options: DenvdOptions): Promise<Denvd> {
    await options.runtime.ping();
    await options.storage.init();
    const d = new Denvd(options, await StateStore.open(options.stateDir));
    d.lastReconcile = await d.reconcile();
    return d;
  }

  get ownerId(): string {
    return this.store.ownerId;
  }

  get stateDir(): string {
    return this.options.stateDir;
  }

  private labels(extra: Labels): Labels {
    return { ...this.options.extraLabels, [LABEL.owner]: this.store.ownerId, ...extra };
  }

  /** The labels every object of this denvd carries (for containers made outside a stack, e.g. the grader). */
  objectLabels(): Labels {
    return this.labels({});
  }

  environments(): EnvironmentRecord[] {
    return this.store.environments();
  }

  versions(): VersionRecord[] {
    return this.store.versions();
  }

  environment(id: string): EnvironmentRecord {
    const env = this.store.environment(id);
    if (!env) throw new DenvError("not_found", `no environment ${id} on this host`);
    return env;
  }

  version(id: string): VersionRecord {
    const v = this.store.version(id);
    if (!v) throw new DenvError("not_found", `no version ${id} on this host`);
    return v;
  }

  // ---------------------------------------------------------------------------------------------
  // Deploy, phase by phase. The control plane records each phase's evidence as it happens.

  /** prepare: images present (pulled by digest when missing) and fresh, empty datasets. */
  async prepare(
    spec: ResolvedSpec,
    options: { name: string; operationId?: string },
  ): Promise<{
    environment: EnvironmentRecord;
    evidence: {
      images: Record<string, { reference: string; pulled: boolean }>;
      datasets: Record<string, string>;
      quota: Record<string, QuotaEvidence>;
    };
  }> {
    checkSpec(spec);
    const images: Record<string, { reference: string; pulled: boolean }> = {};
    for (const [name, svc] of Object.entries(spec.services)) {
      const ref = svc.image_pinned ?? svc.image;
      let pulled = false;
      if (!(await this.runtime.hasImage(ref))) {
        if (!svc.image_pinned || svc.image_pinned.startsWith("sha256:")) {
          throw new DenvError(
            "image_not_found",
            `the engine has no image ${ref} for service ${name}, and it cannot be pulled`,
          );
        }
        await this.runtime.pullImage(ref);
        pulled = true;
      }
      images[name] = { reference: ref, pulled };
    }
    const env = await this.newEnvironmentRecord(spec, options.name, null, options.operationId);
    let quota: Record<string, QuotaEvidence>;
    try {
      for (const [vol, ds] of Object.entries(env.datasets)) {
        await this.storage.createDataset(ds);
        this.log("Created dataset", { environment: env.id, volume: vol, dataset: ds });
      }
      quota = await this.limitDatasets(env);
    } catch (err) {
      await this.teardown(env).catch(() => {});
      throw err;
    }
    return { environment: env, evidence: { images, datasets: { ...env.datasets }, quota } };
  }

  /** Caps every dataset's growth (the storage driver's quota), before any container can write. */
  private async limitDatasets(env: EnvironmentRecord): Promise<Record<string, QuotaEvidence>> {
    const growth = this.options.datasetGrowthBytes ?? 10 * 1024 ** 3;
    const entries = await Promise.all(
      Object.entries(env.datasets).map(
        async ([vol, ds]) => [vol, await this.storage.limitGrowth(ds, growth)] as const,
      ),
    );
    return Object.fromEntries(entries);
  }

  private async newEnvironmentRecord(
    spec: ResolvedSpec,
    name: string,
    parentVersionId: string | null,
    operationId: string | undefined,
  ): Promise<EnvironmentRecord> {
    const id = newId("stk");
    const env: EnvironmentRecord = {
      id,
      name,
      status: "creating",
      spec,
      versionId: parentVersionId,
      parentVersionId,
      network: `denv-${id}`,
      datasets: Object.fromEntries(Object.keys(spec.datasets).map((v) => [v, `${id}-${v}`])),
      containers: {},
      operationId: operationId ?? newId("op"),
      createdAt: new Date().toISOString(),
    };
    // Recorded before anything exists, so a crash at any later point is found and cleaned up.
    await this.store.putEnvironment(env);
    return env;
  }

  /** start: the stack's network, volumes and containers, started in depends_on order. */
  async start(
    environmentId: string,
    hooks: { onStarted?: (service: string) => void } = {},
  ): Promise<{ evidence: Record<string, ServiceStartEvidence>; ms: number; health: HealthEvidence }> {
    const env = this.environment(environmentId);
    const started = performance.now();
    const envLabels = this.labels({ [LABEL.environment]: env.id, [LABEL.operation]: env.operationId });
    const spec = env.spec;
    const networkNames = Object.keys(spec.networks);
    // One engine network per compose network; the first keeps the environment's own name.
    const netName = (n: string) => (n === networkNames[0] ? env.network : `${env.network}-${n}`);
    const volumes = Promise.all([
      ...Object.entries(env.datasets).map(([vol, ds]) =>
        this.runtime.createVolume({
          name: `${env.network}-${vol}`,
          hostPath: this.storage.datasetPath(ds),
          labels: envLabels,
        }),
      ),
    ]);
    volumes.catch(() => {}); // awaited below, after the networks
    for (const n of networkNames) {
      await this.createNetwork({
        name: netName(n),
        internal: spec.networks[n]?.internal ?? true,
        labels: envLabels,
      });
    }
    await volumes;
    const order = spec.start_order;
    // Each agent's socket exists before its container does (the container mounts its directory),
    // and each service's user and command are known: the agent starts the command as that user.
    const identities = new Map<string, ServiceIdentity>();
    if (this.options.agentBinary) {
      await Promise.all(
        order.map(async (svc) => {
          await this.agents.listen(AgentChannel.keyOf(env.id, svc));
          identities.set(svc, await this.identityOf(svc, spec.services[svc] as ResolvedService));
        }),
      );
    }
    // Create every container up front (creation needs no ordering), then start by depends_on.
    const containerIds: Record<string, string> = {};
    const joinsAnother = (s: ResolvedService) =>
      [s.network_mode, s.pid_mode, s.ipc_mode].some((m) => m?.startsWith("service:"));
    // In parallel; services that join another service's namespaces follow, once it exists.
    await Promise.all(
      order.map(async (svc) => {
        const s = spec.services[svc] as ResolvedService;
        if (joinsAnother(s)) return;
        containerIds[svc] = await this.runtime.createContainer(
          this.containerSpec(env, svc, s, netName, containerIds, identities.get(svc)),
        );
      }),
    );
    for (const svc of order) {
      const s = spec.services[svc] as ResolvedService;
      if (!containerIds[svc])
        containerIds[svc] = await this.runtime.createContainer(
          this.containerSpec(env, svc, s, netName, containerIds, identities.get(svc)),
        );
    }
    env.containers = containerIds;
    await this.store.putEnvironment(env);
    for (const [svc, identity] of identities)
      this.registerAgent(env, svc, containerIds[svc] as string, identity);

    const health = await this.startInOrder(env, hooks.onStarted);
    await this.assertAgentNotRoot(env);
    const evidence: Record<string, ServiceStartEvidence> = {};
    await Promise.all(
      order.map(async (svc) => {
        const state = await this.runtime.inspectContainer(containerIds[svc] as string);
        evidence[svc] = {
          container_id: state.id,
          image: spec.services[svc]?.image_pinned ?? spec.services[svc]?.image ?? "",
          caps: await readBackCaps(state),
        };
      }),
    );
    env.status = "running";
    await this.store.putEnvironment(env);
    return { evidence, ms: Math.round(performance.now() - started), health };
  }

  private containerSpec(
    env: EnvironmentRecord,
    svc: string,
    s: ResolvedService,
    netName: (n: string) => string,
    containerIds: Record<string, string>,
    identity?: ServiceIdentity,
  ): ContainerSpec {
    const network: ContainerSpec["network"] =
      s.network_mode === "none"
        ? { kind: "none" }
        : s.network_mode?.startsWith("service:")
          ? { kind: "container", containerId: containerIds[s.network_mode.slice(8)] as string }
          : {
              kind: "network",
              networks: Object.entries(s.networks).map(([n, cfg]) => ({
                name: netName(n),
                aliases: [svc, ...cfg.aliases],
              })),
            };
    const nsMode = (v: string | null | undefined) =>
      v?.startsWith("service:") ? `container:${containerIds[v.slice(8)] ?? ""}` : (v ?? null);
    // With the agent, the container starts as root with the agent as its entrypoint; the agent forks
    // itself off and becomes the service's command as the service's user (agent/denv-agent.c, init).
    const viaAgent = identity
      ? {
          entrypoint: [
            AGENT_BIN,
            "init",
            `${AGENT_RUN_DIR}/${AGENT_SOCKET_NAME}`,
            identity.user ?? "",
            identity.homeSet ? "-" : "h",
            "--",
            ...identity.argv,
          ],
          cmd: null,
          user: "0",
        }
      : { entrypoint: s.entrypoint, cmd: s.command, user: s.user };
    return {
      name: `${env.network}-${svc}`,
      image: s.image_pinned ?? s.image,
      ...viaAgent,
      env: s.environment,
      workingDir: s.working_dir,
      hostname: s.hostname ?? svc,
      labels: this.labels({
        [LABEL.environment]: env.id,
        [LABEL.service]: svc,
        [LABEL.operation]: env.operationId,
        ...(env.versionId ? { [LABEL.version]: env.versionId } : {}),
      }),
      network,
      mounts: [
        ...s.volumes.map((v) => ({
          kind: "volume" as const,
          volume: `${env.network}-${v.dataset}`,
          target: v.target,
          readOnly: v.read_only,
          subpath: v.subpath,
          nocopy: v.nocopy,
        })),
        ...s.tmpfs.map((t) => ({
          kind: "tmpfs" as const,
          target: t.target,
          sizeBytes: t.size_bytes,
          mode: t.mode,
        })),
        // The agent's executable and the directory of the socket it dials, both read-only: nothing
        // the container writes lands on the host, and it cannot redirect the channel.
        ...(this.options.agentBinary
          ? [
              { kind: "bind" as const, source: this.options.agentBinary, target: AGENT_BIN, readOnly: true },
              {
                kind: "bind" as const,
                source: this.agents.dirOf(AgentChannel.keyOf(env.id, svc)),
                target: AGENT_RUN_DIR,
                readOnly: true,
              },
            ]
          : []),
      ],
      memoryBytes: s.caps.memory_bytes,
      pids: s.caps.pids,
      cpus: s.caps.cpus,
      // With the agent the container runs as root: the engine's (and the image's) healthcheck would
      // run as root too, so it is off; denvd runs the healthcheck itself, as the service's user.
      healthcheck: identity
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
      // On deny networks a container has no IPv6 at all: its interfaces would keep link-local
      // addresses that reach the host's on the bridge, which an internal network does not stop.
      sysctls:
        env.spec.egress === "deny" && network.kind === "network"
          ? { ...s.sysctls, "net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1" }
          : s.sysctls,
      stopSignal: s.stop_signal,
      stopTimeoutMs: s.stop_grace_period_ms,
      restart: s.restart,
      pidMode: nsMode(s.pid_mode),
      ipcMode: nsMode(s.ipc_mode),
    };
  }

  /**
   * The agent is never root: resolve refuses every spelling of uid 0, and here the real uids of the
   * agent service's process are read back from the kernel (/proc on the host, not the container's
   * files), because a user name can map to uid 0 in the image's own passwd.
   */
  private async assertAgentNotRoot(env: EnvironmentRecord): Promise<void> {
    const svc = env.spec.agent?.service;
    const id = svc ? env.containers[svc] : undefined;
    if (!svc || !id || env.spec.kind !== "rl-environment") return;
    const st = await this.runtime.inspectContainer(id);
    if (!st.running || st.pid <= 0) return;
    // The service's process: the container's first (or, under docker's init, the init's child),
    // once the agent that started it has become the service's command.
    // The agent takes a moment to become the command (longer on a loaded machine): until then the
    // process is still the agent, as root. A process that cannot be read is looked up again.
    const deadline = performance.now() + 30_000;
    let uids: number[] | null = null;
    while (uids === null) {
      if (performance.now() > deadline)
        throw new DenvError("timeout", `the agent service ${svc} did not start its command within 30 s`);
      let pid = st.pid;
      if (env.spec.services[svc]?.init) {
        const kids = await readFile(`/proc/${pid}/task/${pid}/children`, "utf8").catch(() => "");
        pid = Number(kids.trim().split(/\s+/)[0]) || pid;
      }
      const argv0 = (await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "")).split("\0")[0];
      const status = await readFile(`/proc/${pid}/status`, "utf8").catch(() => "");
      const m = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(status);
      if (m && argv0 && argv0 !== AGENT_BIN) uids = m.slice(1).map(Number);
      else {
        const again = await this.runtime.inspectContainer(id);
        if (!again.running) return; // it exited: start or health says so
        await sleep(50);
      }
    }
    if (uids.includes(0)) {
      throw new DenvError(
        "forbidden",
        `the agent service ${svc} runs as uid 0 (user: ${env.spec.services[svc]?.user ?? "the image's"}); the agent must never be root: set user: to a non-root uid (e.g. "1000:1000")`,
      );
    }
  }

  private networkLock: Promise<unknown> = Promise.resolve();

  /**
   * Who a service runs as and what it runs, as the engine would decide it: the service's `user:`,
   * else the image's USER; its entrypoint and command, else the image's (an entrypoint set in the
   * compose file drops the image's command, as in Docker).
   */
  private async identityOf(svc: string, s: ResolvedService): Promise<ServiceIdentity> {
    const image = await this.runtime.imageConfig(s.image_pinned ?? s.image);
    const entrypoint = s.entrypoint ?? image.entrypoint ?? [];
    const argv = [...entrypoint, ...(s.command ?? (s.entrypoint !== null ? [] : (image.cmd ?? [])))];
    if (argv.length === 0)
      throw new DenvError(
        "invalid_argument",
        `service ${svc} has no command: its image gives none; set command: in the compose file`,
      );
    return {
      user: s.user ?? image.user,
      argv,
      homeSet: Object.hasOwn(s.environment, "HOME") || image.envNames.includes("HOME"),
    };
  }

  /** How exec reaches a container's agent, and the user its commands run as by default. */
  private registerAgent(
    env: EnvironmentRecord,
    svc: string,
    containerId: string,
    identity: ServiceIdentity,
  ): void {
    const key = AgentChannel.keyOf(env.id, svc);
    // Commands run as the container's own user, as `docker exec` does: the service's `user:`, else
    // the image's USER (an image that says USER 1000 never gets root by default).
    this.defaultUsers.set(containerId, identity.user ?? null);
    this.agentTargets.set(containerId, {
      dial: () => this.agents.dial(key),
      defaultUser: identity.user ?? null,
      homeSet: identity.homeSet,
    });
  }

  /** A command in a container, as the given user or else the container's own. */
  private runIn(containerId: string, options: ExecOptions): Promise<ExecResult> {
    const user = options.user ?? this.defaultUsers.get(containerId) ?? null;
    return this.executor.exec(containerId, { ...options, user });
  }

  /**
   * Creates a network on a /24 of denvd's own pool: the engine's default pools run out after about
   * 31 networks. One at a time, so two forks never pick the same subnet; a subnet taken meanwhile
   * by someone else is skipped on the next try.
   */
  private createNetwork(spec: { name: string; internal: boolean; labels: Labels }): Promise<string> {
    const run = this.networkLock.then(async () => {
      const used = [...(await this.runtime.networkSubnets()), ...(await hostRoutes())];
      for (let attempt = 0; attempt < 5; attempt++) {
        const pick = pickSubnet(this.options.subnetPool ?? "172.16.0.0/12", used);
        if (!pick)
          throw new DenvError(
            "unavailable",
            "no free subnet left for another environment network on this host",
          );
        try {
          return await this.runtime.createNetwork({ ...spec, subnet: pick.subnet });
        } catch (err) {
          if (!(err instanceof DenvError && err.details?.subnet_overlap)) throw err;
          used.push(pick.subnet);
        }
      }
      throw new DenvError("unavailable", `could not find a free subnet for network ${spec.name}`);
    });
    this.networkLock = run.catch(() => {});
    return run;
  }

  /**
   * Starts every service as soon as its depends_on conditions hold, and judges health by running
   * each healthcheck's test ourselves every healthPollMs: the engine's own first check comes only
   * after `interval`, which would put seconds into every fork.
   */
  private async startInOrder(
    env: EnvironmentRecord,
    onStarted?: (service: string) => void,
  ): Promise<HealthEvidence> {
    const spec = env.spec;
    const begun = performance.now();
    const startedP = new Map<string, Promise<number>>();
    const healthyP = new Map<string, Promise<HealthEvidence["services"][string]>>();
    const exitedP = new Map<string, Promise<void>>();
    const getStarted = (svc: string): Promise<number> => {
      let p = startedP.get(svc);
      if (!p) {
        p = (async () => {
          const s = spec.services[svc] as ResolvedService;
          await Promise.all(
            Object.entries(s.depends_on).map(([dep, cond]) =>
              cond.condition === "service_healthy"
                ? getHealthy(dep)
                : cond.condition === "service_completed_successfully"
                  ? getExited(dep)
                  : getStarted(dep),
            ),
          );
          const t = performance.now();
          await this.runtime.startContainer(env.containers[svc] as string).catch((err: unknown) => {
            if (!(err instanceof DenvError)) throw err;
            throw new DenvError(err.code, `service ${svc} did not start: ${err.message}`, { cause: err });
          });
          this.log("Started container", { environment: env.id, service: svc });
          onStarted?.(svc);
          return t;
        })();
        startedP.set(svc, p);
      }
      return p;
    };
    const getHealthy = (svc: string) => {
      let p = healthyP.get(svc);
      if (!p) {
        p = getStarted(svc).then((t) => this.waitServiceHealthy(env, svc, t));
        healthyP.set(svc, p);
      }
      return p;
    };
    const getExited = (svc: string) => {
      let p = exitedP.get(svc);
      if (!p) {
        p = getStarted(svc).then(async () => {
          for (;;) {
            const st = await this.runtime.inspectContainer(env.containers[svc] as string);
            if (!st.running) {
              if (st.exitCode !== 0)
                throw new DenvError("unavailable", `service ${svc} exited with ${st.exitCode}`);
              return;
            }
            await sleep(this.options.healthPollMs ?? 100);
          }
        });
        exitedP.set(svc, p);
      }
      return p;
    };
    const results = await Promise.all(
      spec.start_order.map(async (svc) => {
        // A one-shot service that others wait on to complete is not expected to stay up.
        const oneShot = Object.values(spec.services).some(
          (o) => o.depends_on[svc]?.condition === "service_completed_successfully",
        );
        if (oneShot) {
          const t = await getStarted(svc);
          await getExited(svc);
          return [
            svc,
            { healthy_ms: Math.round(performance.now() - t), method: "running" as const, checks: 0 },
          ] as const;
        }
        return [svc, await getHealthy(svc)] as const;
      }),
    );
    const health = { services: Object.fromEntries(results), ms: Math.round(performance.now() - begun) };
    return health;
  }

  private async waitServiceHealthy(
    env: EnvironmentRecord,
    svc: string,
    startedAt: number,
  ): Promise<HealthEvidence["services"][string]> {
    const s = env.spec.services[svc] as ResolvedService;
    const id = env.containers[svc] as string;
    const hc = s.healthcheck;
    const pollMs = this.options.healthPollMs ?? 100;
    if (!hc || s.healthcheck_disabled) {
      const st = await this.runtime.inspectContainer(id);
      if (!st.running) {
        throw new DenvError(
          "unavailable",
          `service ${svc} exited with code ${st.exitCode} right after it started`,
        );
      }
      return { healthy_ms: Math.round(performance.now() - startedAt), method: "running", checks: 0 };
    }
    const deadlineMs = Math.max(
      HEALTH_DEADLINE_FLOOR_MS,
      hc.start_period_ms + hc.interval_ms * (hc.retries + 1),
    );
    const [kind, ...rest] = hc.test;
    const cmd = kind === "CMD-SHELL" ? ["sh", "-c", rest[0] ?? "true"] : rest;
    let checks = 0;
    let last = "";
    while (performance.now() - startedAt < deadlineMs) {
      checks++;
      const r = await this.runIn(id, {
        command: cmd,
        timeoutMs: Math.min(hc.timeout_ms, 10_000),
        maxOutputBytes: 4096,
      }).catch((e: unknown) => ({ exitCode: -1, stdout: Buffer.alloc(0), stderr: Buffer.from(String(e)) }));
      if (r.exitCode === 0) {
        return { healthy_ms: Math.round(performance.now() - startedAt), method: "healthcheck", checks };
      }
      last = `${r.stdout.toString()}${r.stderr.toString()}`.trim().slice(-300);
      const st = await this.runtime.inspectContainer(id);
      if (!st.running) {
        throw new DenvError(
          "unavailable",
          `service ${svc} exited with code ${st.exitCode} before it was healthy`,
        );
      }
      await sleep(pollMs);
    }
    throw new DenvError(
      "timeout",
      `service ${svc} was not healthy within ${deadlineMs} ms (last check: ${last || "no output"})`,
    );
  }

  /** warm: x-denv.warm commands, in order, each in its service; a failure stops the deploy. */
  async warm(environmentId: string): Promise<WarmEvidence> {
    const env = this.environment(environmentId);
    const commands: WarmEvidence["commands"] = [];
    for (const w of env.spec.warm) {
      const r = await this.runIn(env.containers[w.service] as string, {
        command: w.command,
        timeoutMs: 600_000,
      });
      commands.push({
        service: w.service,
        command: w.command,
        exit_code: r.exitCode,
        ms: r.durationMs,
        stdout_tail: tail(r.stdout),
        stderr_tail: tail(r.stderr),
      });
      if (r.exitCode !== 0) {
        throw new DenvError(
          "unavailable",
          `warm command in ${w.service} exited with ${r.exitCode}: ${tail(r.stderr).slice(-300)}`,
          {
            details: { commands },
          },
        );
      }
    }
    return { commands };
  }

  /**
   * The whole deploy on this host: prepare, start, health, warm, snapshot, egress probe. A failure
   * removes everything the deploy created. The control plane runs the same phases one by one.
   */
  async deploy(
    spec: ResolvedSpec,
    options: { name: string; operationId?: string },
  ): Promise<{
    environment: EnvironmentRecord;
    version: VersionRecord;
    evidence: {
      prepare: Awaited<ReturnType<Denvd["prepare"]>>["evidence"];
      start: Record<string, ServiceStartEvidence>;
      health: HealthEvidence;
      warm: WarmEvidence;
      snapshot: SnapshotEvidence;
      egress: EgressEvidence;
    };
  }> {
    const { environment, evidence: prepare } = await this.prepare(spec, options);
    try {
      const { evidence: start, health } = await this.start(environment.id);
      const warm = await this.warm(environment.id);
      const { version, evidence: snapshot } = await this.snapshot(environment.id);
      const egress = await this.probeEgress(environment.id);
      return {
        environment: this.environment(environment.id),
        version,
        evidence: { prepare, start, health, warm, snapshot, egress },
      };
    } catch (err) {
      await this.teardown(this.store.environment(environment.id) ?? environment).catch(() => {});
      throw err;
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Snapshot, fork, rollback, destroy.

  private async assertSpace(what: string): Promise<void> {
    const min = this.options.minFreeBytes ?? 1024 ** 3;
    const free = await this.storage.freeBytes();
    if (free < min) {
      throw new DenvError(
        "insufficient_storage",
        `the ${this.storage.kind} pool has ${Math.round(free / 1024 ** 2)} MiB free, below the ${Math.round(min / 1024 ** 2)} MiB a ${what} needs; destroy old environments or grow the pool`,
      );
    }
  }

  /**
   * A consistent snapshot of a running environment: checkpoint databases, pause every service,
   * capture every dataset in the same frozen window, thaw, re-check health. The result is a version.
   */
  async snapshot(environmentId: string): Promise<{ version: VersionRecord; evidence: SnapshotEvidence }> {
    const env = this.environment(environmentId);
    if (env.status !== "running")
      throw new DenvError("conflict", `environment ${env.name} is ${env.status}, not running`);
    await this.assertSpace("snapshot");
    const checkpoint = await this.checkpoint(env);
    const versionId = newId("ver");
    // A container already paused (an agent frozen by verify) stays paused, and is not thawed here.
    const states = await Promise.all(
      Object.values(env.containers).map((id) => this.runtime.inspectContainer(id)),
    );
    const ids = states.filter((st) => !st.paused).map((st) => st.id);
    const snapshots: Record<string, string> = {};
    // Most of what the snapshot would flush goes out now, while the stack still runs.
    await this.storage.flush?.().catch(() => {});
    const frozenStart = performance.now();
    try {
      await Promise.all(ids.map((id) => this.runtime.pauseContainer(id)));
      await Promise.all(
        Object.entries(env.datasets).map(async ([vol, ds]) => {
          const snapId = `${versionId}-${vol}`;
          await this.storage.snapshot(ds, snapId);
          snapshots[vol] = snapId;
        }),
      );
    } finally {
      await Promise.all(ids.map((id) => this.runtime.unpauseContainer(id).catch(() => {})));
    }
    const frozenMs = Math.round(performance.now() - frozenStart);
    const healthStart = performance.now();
    await Promise.all(
      Object.entries(env.containers)
        .filter(([, id]) => ids.includes(id))
        .map(([svc]) => this.waitServiceHealthy(env, svc, performance.now())),
    );
    const healthAfterMs = Math.round(performance.now() - healthStart);
    const version: VersionRecord = {
      id: versionId,
      environmentId: env.id,
      specHash: env.spec.hash,
      spec: env.spec,
      images: Object.fromEntries(
        Object.entries(env.spec.services).map(([n, s]) => [n, s.image_digest ?? s.image_pinned ?? s.image]),
      ),
      snapshots,
      frozenMs,
      createdAt: new Date().toISOString(),
    };
    await this.store.putVersion(version);
    env.versionId = versionId;
    await this.store.putEnvironment(env);
    const datasets: SnapshotEvidence["datasets"] = {};
    for (const [vol, snapId] of Object.entries(snapshots)) {
      datasets[vol] = {
        dataset_id: env.datasets[vol] as string,
        snapshot_id: snapId,
        bytes: await this.storage.snapshotBytes(snapId),
      };
    }
    this.log("Snapshot taken", { environment: env.id, version: versionId, frozenMs });
    return {
      version,
      evidence: {
        version_id: versionId,
        frozen_ms: frozenMs,
        checkpoint,
        datasets,
        health_after_ms: healthAfterMs,
      },
    };
  }

  /** Databases flush to disk before the freeze, so forks start without a long recovery. */
  private async checkpoint(env: EnvironmentRecord): Promise<SnapshotEvidence["checkpoint"]> {
    const out: SnapshotEvidence["checkpoint"] = [];
    await Promise.all(
      Object.entries(env.spec.services).map(async ([svc, s]) => {
        const cmds: { command: string[]; user?: string }[] = (env.spec.checkpoint[svc] ?? []).map(
          (command) => ({ command }),
        );
        if (/(^|\/)postgres[^/]*(:|@|$)/.test(s.image)) {
          cmds.unshift({
            command: ["sh", "-c", 'psql -U "${POSTGRES_USER:-postgres}" -d postgres -qc CHECKPOINT'],
            user: "postgres",
          });
        } else if (/(^|\/)redis[^/]*(:|@|$)/.test(s.image)) {
          cmds.unshift({ command: ["redis-cli", "SAVE"] });
        }
        for (const c of cmds) {
          const r = await this.runIn(env.containers[svc] as string, {
            command: c.command,
            user: c.user ?? null,
            timeoutMs: 120_000,
          });
          out.push({ service: svc, command: c.command, exit_code: r.exitCode, ms: r.durationMs });
        }
      }),
    );
    return out;
  }

  /** A new environment from a version: datasets cloned, a new network, the pinned images, healthy. */
  async fork(
    versionId: string,
    options: { name: string; operationId?: string },
  ): Promise<{ environment: EnvironmentRecord; evidence: ForkEvidence }> {
    const version = this.version(versionId);
    await this.assertSpace("fork");
    const total = performance.now();
    const env = await this.newEnvironmentRecord(version.spec, options.name, version.id, options.operationId);
    try {
      const cloneStart = performance.now();
      await Promise.all(
        Object.entries(env.datasets).map(([vol, ds]) =>
          this.storage.clone(version.snapshots[vol] as string, ds),
        ),
      );
      const quota = await this.limitDatasets(env);
      const cloneMs = Math.round(performance.now() - cloneStart);
      // The probe runs as soon as the service it probes from is up, alongside the health checks.
      const probeFrom = this.probeService(version.spec);
      let probe: Promise<EgressEvidence> | undefined;
      const {
        evidence: start,
        ms: startMs,
        health,
      } = await this.start(env.id, {
        onStarted: (svc) => {
          if (svc !== probeFrom) return;
          probe = this.probeEgress(env.id);
          probe.catch(() => {}); // awaited below; this only keeps an early failure from going unhandled
        },
      });
      const egress = await (probe ?? this.probeEgress(env.id));
      return {
        environment: this.environment(env.id),
        evidence: {
          stack_id: env.id,
          from_version: version.id,
          clone_ms: cloneMs,
          quota,
          start,
          start_ms: startMs,
          health,
          egress,
          total_ms: Math.round(performance.now() - total),
        },
      };
    } catch (err) {
      await this.teardown(this.store.environment(env.id) ?? env).catch(() => {});
      throw err;
    }
  }

  /**
   * The service to probe from: the first to start among those on the agent's network (any
   * container on that network sees what the agent sees), so the probe runs early in a fork.
   */
  private probeService(spec: ResolvedSpec): string | undefined {
    const agent = spec.agent?.service ?? spec.start_order[spec.start_order.length - 1];
    const agentNet = agent ? Object.keys(spec.services[agent]?.networks ?? {})[0] : undefined;
    return (
      spec.start_order.find((s) => agentNet !== undefined && spec.services[s]?.networks[agentNet]) ?? agent
    );
  }

  /** The egress probe, from inside the environment's network. Deny must prove blocked. */
  async probeEgress(environmentId: string): Promise<EgressEvidence> {
    const env = this.environment(environmentId);
    const svc = this.probeService(env.spec);
    const id = svc ? env.containers[svc] : undefined;
    if (!id) throw new DenvError("conflict", `environment ${env.name} has no container to probe from`);
    const st = await this.runtime.inspectContainer(id);
    const first = Object.values(st.addresses)[0];
    const gateway = first?.gateway;
    const target = this.options.egressProbeTarget ?? (gateway ? { host: gateway, port: 9 } : null);
    if (!target) {
      // network_mode none: no interface but loopback, so nothing can leave.
      return { result: "blocked", target: "none", outcome: "unreachable", ms: 0 };
    }
    const linkLocal = first?.networkId ? await bridgeLinkLocal(first.networkId) : null;
    const evidence = {
      ...(await probeEgress(st.pid, target, first?.ip || undefined, linkLocal)),
      from: svc as string,
    };
    if (env.spec.egress === "deny" && evidence.result !== "blocked") {
      const reached = evidence.outcome === "connected" || evidence.outcome === "refused";
      throw new DenvError(
        "forbidden",
        `egress is deny but the probe from ${svc} reached ${reached ? evidence.target : evidence.ipv6?.target}`,
        {
          details: { egress: evidence },
        },
      );
    }
    return evidence;
  }

  /** Restores an environment to a version: containers replaced, datasets re-cloned, healthy again. */
  async rollback(environmentId: string, versionId: string): Promise<{ health: HealthEvidence; ms: number }> {
    const env = this.environment(environmentId);
    const version = this.version(versionId);
    const begun = performance.now();
    await this.removeStack(env);
    for (const [vol, ds] of Object.entries(env.datasets)) {
      await this.storage.destroyDataset(ds);
      const snap = version.snapshots[vol];
      if (snap) await this.storage.clone(snap, ds);
      else await this.storage.createDataset(ds);
    }
    await this.limitDatasets(env);
    env.spec = version.spec;
    env.versionId = version.id;
    env.status = "creating";
    env.containers = {};
    await this.store.putEnvironment(env);
    const { health } = await this.start(env.id);
    return { health, ms: Math.round(performance.now() - begun) };
  }

  /** Removes containers, volumes, networks and datasets. Idempotent: an unknown id is already gone. */
  async destroy(environmentId: string): Promise<void> {
    const env = this.store.environment(environmentId);
    if (!env) return;
    env.status = "destroying";
    await this.store.putEnvironment(env);
    await this.teardown(env);
  }

  /** Deletes a version's snapshots and its record. */
  async deleteVersion(versionId: string): Promise<void> {
    const v = this.store.version(versionId);
    if (!v) return;
    for (const snap of Object.values(v.snapshots)) await this.storage.destroySnapshot(snap);
    await this.store.deleteVersion(versionId);
  }

  /**
   * Removes an environment's containers, volumes and networks, found by record and by label. A
   * create the engine was still finishing when its caller died can surface a moment later and hold
   * a volume or network: such a conflict sends it round again, a few times.
   */
  private async removeStack(env: EnvironmentRecord): Promise<void> {
    const labels = { [LABEL.owner]: this.store.ownerId, [LABEL.environment]: env.id };
    for (let attempt = 1; ; attempt++) {
      try {
        const byLabel = await this.runtime.listContainers(labels);
        const ids = new Set([...Object.values(env.containers), ...byLabel.map((c) => c.id)]);
        await Promise.all([...ids].map((id) => this.runtime.removeContainer(id)));
        const vols = await this.runtime.listVolumes(labels);
        await Promise.all(vols.map((v) => this.runtime.removeVolume(v.name)));
        for (const n of await this.runtime.listNetworks(labels)) await this.runtime.removeNetwork(n.id);
        return;
      } catch (err) {
        if (!(err instanceof DenvError && err.code === "conflict") || attempt >= 10) throw err;
        await sleep(200);
      }
    }
  }

  private async teardown(env: EnvironmentRecord): Promise<void> {
    await this.removeStack(env);
    for (const id of Object.values(env.containers)) {
      this.agentTargets.delete(id);
      this.defaultUsers.delete(id);
    }
    for (const svc of Object.keys(env.spec.services))
      await this.agents.close(AgentChannel.keyOf(env.id, svc));
    for (const ds of Object.values(env.datasets)) {
      // An id no driver accepts was never created (a record from before names were checked).
      if (isSafeId(ds)) await this.storage.destroyDataset(ds);
    }
    await this.store.deleteEnvironment(env.id);
    this.log("Destroyed environment", { environment: env.id });
  }

  // ---------------------------------------------------------------------------------------------
  // Exec and files.

  private containerOf(
    environmentId: string,
    service?: string,
  ): { env: EnvironmentRecord; id: string; service: string } {
    const env = this.environment(environmentId);
    const svc = service ?? env.spec.agent?.service ?? Object.keys(env.spec.services)[0];
    // Own properties only: a service named "constructor" or "__proto__" is no service.
    const id = svc && Object.hasOwn(env.containers, svc) ? env.containers[svc] : undefined;
    if (!svc || typeof id !== "string") {
      throw new DenvError(
        "not_found",
        `environment ${env.name} has no service ${JSON.stringify((service ?? "").slice(0, 64))}; it has ${Object.keys(env.containers).join(", ")}`,
      );
    }
    return { env, id, service: svc };
  }

  async exec(environmentId: string, service: string | undefined, options: ExecOptions): Promise<ExecResult> {
    const { id } = this.containerOf(environmentId, service);
    return this.runIn(id, options);
  }

  /**
   * Stops one service's container (SIGTERM, then SIGKILL after the grace period), leaving the rest
   * of the environment running: what compose-aware frameworks (Harbor's stop_service) ask for
   * before collecting from the services that remain. Its volumes and filesystem stay readable.
   */
  async stopService(environmentId: string, service: string, graceMs = 10_000): Promise<{ stopped: string }> {
    const { id, service: svc } = this.containerOf(environmentId, service);
    await this.runtime.stopContainer(id, graceMs);
    this.log("Stopped service", { environment: environmentId, service: svc });
    return { stopped: svc };
  }

  /** A byte stream to `port` on the service's loopback (through its agent); see AgentExecutor. */
  async openPort(environmentId: string, service: string | undefined, port: number): Promise<Socket> {
    const { id, service: svc } = this.containerOf(environmentId, service);
    if (!this.executor.openPort) throw new DenvError("unavailable", "this host cannot reach container ports");
    try {
      return await this.executor.openPort(id, port);
    } catch (err) {
      throw new DenvError("unavailable", `service ${svc}, port ${port}: ${(err as Error).message}`);
    }
  }

  /** Extracts a tar at `path` in a service, after checking every entry stays inside it. */
  async putFiles(
    environmentId: string,
    service: string | undefined,
    path: string,
    tar: Readable,
  ): Promise<{ entries: number; bytes: number }> {
    const { id } = this.containerOf(environmentId, service);
    path = checkContainerPath(path);
    // The checked tar goes to a file first: a tar refused half-way must leave nothing behind.
    const tmp = join(this.options.stateDir, `upload-${randomBytes(6).toString("hex")}.tar`);
    try {
      const stats = await sanitizeTar(tar, createWriteStream(tmp));
      await this.runtime.putArchive(id, path, createReadStream(tmp));
      return stats;
    } finally {
      await rm(tmp, { force: true });
    }
  }

  /**
   * A tar of `path` in a service. The path is walked inside the container by its agent, without
   * following any link (a link the agent planted on the way is refused, not followed to files it
   * could not read). A container that is not running has no agent and runs nothing that could
   * swap a path: the engine reads it, after each component is checked not to be a link.
   */
  async getFiles(environmentId: string, service: string | undefined, path: string): Promise<Buffer> {
    const { env, id, service: svc } = this.containerOf(environmentId, service);
    const clean = checkContainerPath(path);
    const st = await this.runtime.inspectContainer(id);
    const key = AgentChannel.keyOf(env.id, svc);
    if (st.running && this.executor.readFiles && this.options.agentBinary) {
      // Just after a start the agent may still be dialling in.
      await this.agents.waitConnected(key, AGENT_WAIT_MS);
      const tar = await this.executor.readFiles(id, clean, { maxBytes: MAX_FILES_BYTES });
      if (tar) return tar;
      throw new DenvError("unavailable", "the service's agent is not answering; try again in a moment");
    }
    if (st.running && !st.paused && this.options.agentBinary)
      throw new DenvError("unavailable", "the service's agent is not answering; try again in a moment");
    // Stopped or paused (or a host without agents): nothing in the container runs to race the check.
    let prefix = "";
    for (const part of clean.split("/").filter(Boolean).slice(0, -1)) {
      prefix += `/${part}`;
      const stat = await this.runtime.statPath(id, prefix);
      if (!stat) throw new DenvError("not_found", `${prefix} does not exist in the service`);
      if (stat.mode & GO_MODE_SYMLINK)
        throw new DenvError(
          "invalid_argument",
          `${prefix} is a symbolic link; denv does not follow links in a path (read the link's target)`,
        );
    }
    const chunks: Buffer[] = [];
    let bytes = 0;
    for await (const c of await this.runtime.getArchive(id, clean)) {
      bytes += (c as Buffer).length;
      if (bytes > MAX_FILES_BYTES)
        throw new DenvError(
          "payload_too_large",
          `${clean} is over ${MAX_FILES_BYTES / 1024 ** 2} MiB as a tar; get a smaller path`,
        );
      chunks.push(c as Buffer);
    }
    return Buffer.concat(chunks);
  }

  /** Stops listening for agents (the process is going away; containers and data stay). */
  async close(): Promise<void> {
    await this.agents.closeAll();
  }

  // ---------------------------------------------------------------------------------------------
  // Reconcile.

  /**
   * Settles the engine and the storage against the records: environments caught mid-operation
   * (status creating or destroying) are removed entirely; labelled objects of unknown environments
   * are removed; datasets and snapshots no record holds are destroyed; recorded environments whose
   * containers are gone are marked lost, and stopped ones are started again.
   */
  async reconcile(): Promise<{ removed: string[]; lost: string[]; failed: string[] }> {
    const removed: string[] = [];
    const lost: string[] = [];
    // One record or object that cannot be settled is logged and left: it never keeps denvd from
    // coming up (a host that cannot start is lost to every environment on it).
    const failed: string[] = [];
    const attempt = async (what: string, fn: () => Promise<void>) => {
      try {
        await fn();
      } catch (err) {
        failed.push(what);
        this.log("Could not reconcile", { what, error: (err as Error).message });
      }
    };
    for (const env of this.store.environments()) {
      if (env.status === "creating" || env.status === "destroying") {
        await attempt(env.id, async () => {
          await this.teardown(env);
          removed.push(env.id);
        });
      }
    }
    const owner = { [LABEL.owner]: this.store.ownerId };
    const known = new Set(this.store.environments().map((e) => e.id));
    // Labelled objects of environments no record holds.
    const kinds: [string, () => Promise<ObjectSummary[]>, (o: ObjectSummary) => Promise<void>][] = [
      ["containers", () => this.runtime.listContainers(owner), (o) => this.runtime.removeContainer(o.id)],
      ["volumes", () => this.runtime.listVolumes(owner), (o) => this.runtime.removeVolume(o.name)],
      ["networks", () => this.runtime.listNetworks(owner), (o) => this.runtime.removeNetwork(o.id)],
    ];
    for (const [kind, list, remove] of kinds) {
      await attempt(kind, async () => {
        for (const o of await list()) {
          if (!known.has(o.labels[LABEL.environment] ?? ""))
            await attempt(o.name, async () => {
              await remove(o);
              removed.push(o.name);
            });
        }
      });
    }
    const datasets = new Set(this.store.environments().flatMap((e) => Object.values(e.datasets)));
    await attempt("datasets", async () => {
      for (const ds of await this.storage.listDatasets()) {
        if (!datasets.has(ds))
          await attempt(ds, async () => {
            await this.storage.destroyDataset(ds);
            removed.push(ds);
          });
      }
    });
    const snaps = new Set(this.store.versions().flatMap((v) => Object.values(v.snapshots)));
    await attempt("snapshots", async () => {
      for (const snap of await this.storage.listSnapshots()) {
        if (!snaps.has(snap))
          await attempt(snap, async () => {
            await this.storage.destroySnapshot(snap);
            removed.push(snap);
          });
      }
    });
    for (const env of this.store.environments()) {
      if (env.status !== "running") continue;
      await attempt(env.id, async () => {
        const states = await Promise.all(
          Object.values(env.containers).map((id) => this.runtime.inspectContainer(id).catch(() => null)),
        );
        if (states.some((st) => st === null)) {
          env.status = "lost";
          await this.store.putEnvironment(env);
          lost.push(env.id);
        } else {
          for (const st of states) if (st && !st.running) await this.runtime.startContainer(st.id);
        }
      });
    }
    // Agents keep running in their containers across a denvd restart and dial in again once
    // denvd listens for them.
    if (this.options.agentBinary) {
      for (const env of this.store.environments()) {
        if (env.status !== "running") continue;
        for (const [svc, id] of Object.entries(env.containers)) {
          await attempt(`${env.id}/${svc}`, async () => {
            await this.agents.listen(AgentChannel.keyOf(env.id, svc));
            const s = env.spec.services[svc];
            if (s) this.registerAgent(env, svc, id, await this.identityOf(svc, s));
          });
        }
      }
    }
    if (removed.length || lost.length || failed.length) this.log("Reconciled", { removed, lost, failed });
    return { removed, lost, failed };
  }
}

/** Go's os.ModeSymlink, as the engine reports a path's mode. */
const GO_MODE_SYMLINK = 1 << 27;

/** An absolute path in a container, normalised; `..` and NUL bytes refused. */
export function checkContainerPath(path: string): string {
  if (!path.startsWith("/")) throw new DenvError("invalid_argument", `path ${path} must be absolute`);
  if (path.includes("\0")) throw new DenvError("invalid_argument", "a path cannot hold NUL bytes");
  if (path.split("/").includes(".."))
    throw new DenvError("invalid_argument", `path ${path} must not contain ".."`);
  return posix.normalize(path).replace(/(.)\/$/, "$1");
}

/**
 * What denvd takes from the control plane is checked before anything is made: the spec's shape,
 * and every name against the rule all drivers and the engine accept. A spec that fails is refused
 * whole, leaving no record, dataset or object behind.
 */
export function checkSpec(spec: ResolvedSpec): void {
  const parsed = resolvedSpecSchema.safeParse(spec);
  if (!parsed.success)
    throw new DenvError(
      "invalid_argument",
      `the spec is not a resolved spec: ${parsed.error.issues[0]?.message ?? ""}`,
    );
  const names: [string, string][] = [
    ...Object.keys(spec.services).map((n): [string, string] => ["service", n]),
    ...Object.keys(spec.datasets).map((n): [string, string] => ["volume", n]),
    ...Object.keys(spec.networks).map((n): [string, string] => ["network", n]),
  ];
  for (const [kind, name] of names) {
    const problem = nameProblem(name);
    if (problem) throw new DenvError("invalid_argument", `${kind} name "${name}" ${problem}`);
  }
}
