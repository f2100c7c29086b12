/**
 * denvd's runtime as a library: stacks (whole environments) on one host, built from a resolved
 * spec, snapshotted consistently into versions, forked, rolled back, destroyed, and reached through
 * exec and files. Every step returns evidence a lab can audit. The sidecar serves it over its
 * WebSocket through operation-handlers.ts; tests drive the same handlers against the real engine.
 *
 * This class is a facade: each concern lives in its own module (stack-starter, service-health,
 * snapshotter, stack-lifecycle, stack-files, reconcile, …), which all share one StackContext.
 * Processes restart on fork and rollback: what a version keeps is every volume's state, not memory.
 */

import type { Socket } from "node:net";
import type { Readable } from "node:stream";
import {
  type BuildImageParams,
  DenvError,
  type DiffEvidence,
  type ForkEvidence,
  type HealthEvidence,
  type OpResult,
  type ResolvedSpec,
  type SnapshotEvidence,
  type WarmEvidence,
} from "@denv/protocol";
import { defaultClockLibrary } from "./clock/clock-state.ts";
import { clockDirFor, holdStackClock, releaseStackClock } from "./clock/stack-clock.ts";
import { EgressGateways, egressPolicyOf } from "./egress/egress-gateways.ts";
import type { EgressRecord } from "./egress/egress-proxy.ts";
import { AgentExecutor } from "./exec/agent-executor.ts";
import { EngineExecutor } from "./exec/engine-executor.ts";
import type { ExecOptions, ExecResult, Executor, FileSink, FsRequest } from "./exec/executor.ts";
import { type GpuInventory, readGpuInventory } from "./host/gpu-inventory.ts";
import { startHostAgent } from "./host/host-command.ts";
import { OpJournal } from "./host/op-journal.ts";
import { type ReconcileReport, reconcile } from "./host/reconcile.ts";
import { type StackRecord, StateStore, type VersionRecord } from "./host/state-store.ts";
import type { ContainerRuntime, Labels } from "./runtime/container-runtime.ts";
import { waitServiceHealthy } from "./services/service-health.ts";
import type { LiveMode } from "./snapshots/live-capture.ts";
import { snapshotStack } from "./snapshots/snapshotter.ts";
import { type DiffStackOptions, diffStack } from "./snapshots/stack-diff.ts";
import { digestStack } from "./snapshots/stack-digest.ts";
import { VersionTransfers } from "./snapshots/version-transfers.ts";
import { AgentRegistry } from "./stack/agent-registry.ts";
import type { EgressEvidence } from "./stack/egress-probe.ts";
import { buildServiceImage, findBuiltImage, removeBuiltImages } from "./stack/image-builder.ts";
import { LABEL } from "./stack/labels.ts";
import { DEFAULT_SUBNET_POOL, NetworkAllocator } from "./stack/network-allocator.ts";
import type { DenvdOptions, StackContext } from "./stack/stack-context.ts";
import { probeStack } from "./stack/stack-egress.ts";
import { setStackEgress } from "./stack/stack-egress-gateway.ts";
import {
  type FsEntry,
  fileOp,
  getFiles,
  putFiles,
  readFilesTo,
  type ServiceTarget,
} from "./stack/stack-files.ts";
import {
  deleteVersion,
  destroyStack,
  type ForkStackOptions,
  forkStack,
  type PrepareEvidence,
  type PrepareOptions,
  prepareStack,
  rollbackStack,
  warmStack,
} from "./stack/stack-lifecycle.ts";
import { type PauseEvidence, pauseStack, unpauseStack } from "./stack/stack-pause.ts";
import { seedDataset } from "./stack/stack-seeds.ts";
import { type StartResult, startStack } from "./stack/stack-starter.ts";
import type { StorageDriver } from "./storage/storage-driver.ts";

export type { DenvdOptions } from "./stack/stack-context.ts";

export class Denvd {
  readonly storage: StorageDriver;
  readonly runtime: ContainerRuntime;
  readonly executor: Executor;
  private readonly ctx: StackContext;
  private readonly store: StateStore;
  private readonly agents: AgentRegistry;
  /** The operations that change engine state, written down before they act (op-journal.ts). */
  /** Snapshots under way, by the version id they make: a delete of that version waits for it. */
  private readonly making = new Map<string, Promise<unknown>>();
  readonly journal: OpJournal;
  /** Versions moving to and from other hosts (version-transfers.ts). */
  readonly transfers: VersionTransfers;
  /** What the reconcile at open found and settled (and what it could not). */
  lastReconcile: ReconcileReport = { removed: [], lost: [], thawed: [], interrupted: [], failed: [] };

  private constructor(options: DenvdOptions, store: StateStore) {
    const t = options.egressProbeTarget;
    if (t && (!/^[0-9.]+$|^[0-9a-f:]+$/i.test(t.host) || !Number.isInteger(t.port))) {
      throw new DenvError("invalid_argument", "the egress probe target must be an IP address and a port");
    }
    this.storage = options.storage;
    this.runtime = options.runtime;
    this.store = store;
    this.journal = new OpJournal(options.stateDir);
    this.agents = new AgentRegistry(options.stateDir, options.runtime);
    const engine = new EngineExecutor(options.runtime);
    this.executor =
      options.executor ??
      (options.agentBinary ? new AgentExecutor(engine, (id) => this.agents.target(id)) : engine);
    const log = options.log ?? (() => {});
    const executor = this.executor;
    const agents = this.agents;
    // The set-up builds the clock library beside the agent; a caller may name another, or none.
    if (options.clockLibrary === undefined) options = { ...options, clockLibrary: defaultClockLibrary() };
    this.ctx = {
      gpuMode: async () => (await this.gpus()).mode,
      options,
      store,
      runtime: options.runtime,
      storage: options.storage,
      executor,
      agents,
      networks: new NetworkAllocator(options.runtime, options.subnetPool),
      egress: new EgressGateways({
        stateDir: options.stateDir,
        runtime: options.runtime,
        containersOf: (id) => store.stack(id)?.containers ?? {},
        hosts: options.egressHosts,
        // The stacks' own networks are never reached through a proxy (another environment's, say).
        neverReach: [options.subnetPool ?? DEFAULT_SUBNET_POOL],
        idleTimeoutMs: options.egressIdleTimeoutMs,
        maxUploadBytes: options.egressMaxUploadBytes,
        log,
      }),
      log,
      labels: (extra) => ({ ...options.extraLabels, [LABEL.owner]: store.ownerId, ...extra }),
      stack: (id) => this.stack(id),
      version: (id) => this.version(id),
      runIn: (containerId, o) =>
        executor.exec(containerId, { ...o, user: o.user ?? agents.defaultUser(containerId) ?? null }),
    };
    this.transfers = new VersionTransfers(this.ctx);
  }

  /** Opens the state directory, prepares storage, and reconciles: no orphan survives a restart. */
  static async open(options: DenvdOptions): Promise<Denvd> {
    // denvd's own host commands (btrfs, du, the probe's) through a host agent (host-command.ts).
    if (options.agentBinary) await startHostAgent(options.agentBinary);
    await options.runtime.ping();
    await options.storage.init();
    const d = new Denvd(options, await StateStore.open(options.stateDir));
    await d.journal.open();
    d.lastReconcile = await d.reconcile();
    return d;
  }

  get ownerId(): string {
    return this.store.ownerId;
  }

  /** The host's GPUs and how the engine passes them (gpu-inventory.ts), read once. */
  gpus(): Promise<GpuInventory> {
    const o = this.ctx.options;
    this.gpuInventory ??= readGpuInventory(
      o.gpuInventoryDir !== undefined
        ? { root: o.gpuInventoryDir }
        : o.runtime.engineInfo
          ? { engineInfo: () => (o.runtime.engineInfo as NonNullable<typeof o.runtime.engineInfo>)() }
          : {},
    );
    return this.gpuInventory;
  }

  private gpuInventory: Promise<GpuInventory> | null = null;

  get stateDir(): string {
    return this.ctx.options.stateDir;
  }

  /** The labels every object of this denvd carries (for containers made outside a stack, e.g. the grader). */
  objectLabels(): Labels {
    return this.ctx.labels({});
  }

  /** The stack's clock directory when its clock is frozen (the grader mounts it too). */
  clockDir(stack: StackRecord): string | null {
    return clockDirFor(this.ctx, stack);
  }

  stacks(): StackRecord[] {
    return this.store.stacks();
  }

  versions(): VersionRecord[] {
    return this.store.versions();
  }

  stack(id: string): StackRecord {
    const stack = this.store.stack(id);
    if (!stack) throw new DenvError("not_found", `no stack ${id} on this host`);
    return stack;
  }

  /** Records (or clears) a service as frozen by verify: the one kind of pause a restart keeps. */
  async recordFrozen(stackId: string, service: string, frozen: boolean): Promise<void> {
    const stack = this.stack(stackId);
    const set = new Set(stack.frozen ?? []);
    if (frozen === set.has(service)) return;
    if (frozen) set.add(service);
    else set.delete(service);
    stack.frozen = [...set].sort();
    if (stack.frozen.length === 0) delete stack.frozen;
    await this.store.putStack(stack);
  }

  version(id: string): VersionRecord {
    const v = this.store.version(id);
    if (!v) throw new DenvError("not_found", `no version ${id} on this host`);
    return v;
  }

  // The phases, one call each; the control plane records each one's evidence as it happens.

  findBuiltImage(buildKey: string): Promise<string | null> {
    return findBuiltImage(this.ctx, buildKey);
  }

  removeBuiltImages(p: { team_id: string; project_id: string; keep: string[] }) {
    return removeBuiltImages(this.ctx, p);
  }

  buildImage(
    params: BuildImageParams,
    context: Readable,
    log: (text: string) => Promise<void> | void,
  ): Promise<{ image_id: string; ms: number; steps: number; log_tail: string[] }> {
    return buildServiceImage(this.ctx, params, context, log);
  }

  prepare(
    spec: ResolvedSpec,
    options: PrepareOptions,
  ): Promise<{ stack: StackRecord; evidence: PrepareEvidence }> {
    return prepareStack(this.ctx, spec, options);
  }

  seedDataset(stackId: string, volume: string, tar: Readable) {
    return seedDataset(this.ctx, stackId, volume, tar);
  }

  start(
    stackId: string,
    hooks: { onStarted?: (service: string) => void; settleMs?: number } = {},
  ): Promise<StartResult> {
    return startStack(this.ctx, stackId, hooks);
  }

  warm(stackId: string): Promise<WarmEvidence> {
    return warmStack(this.ctx, stackId);
  }

  /** Pause that keeps memory (stack-pause.ts). */
  pause(stackId: string): Promise<PauseEvidence> {
    return pauseStack(this.ctx, stackId);
  }

  unpause(stackId: string): Promise<{ health: HealthEvidence; ms: number }> {
    return unpauseStack(this.ctx, stackId);
  }

  /** A running stack's egress policy, changed (egress-gateways.ts). */
  setEgress(stackId: string, policy: { allow: string[]; deny: string[] }): Promise<{ closed: number }> {
    return setStackEgress(this.ctx, stackId, policy);
  }

  /** The stack's egress policy now and its log: every connection through its proxy (the last `limit`). */
  egressLog(
    stackId: string,
    limit?: number,
  ): {
    policy: { allow: string[]; deny: string[] } | null;
    records: EgressRecord[];
    earlier: number;
    dropped: number;
  } {
    const stack = this.stack(stackId);
    return { policy: egressPolicyOf(stack), ...this.ctx.egress.readLog(stack.id, limit) };
  }

  snapshot(
    stackId: string,
    options: { versionId?: string; live?: LiveMode } = {},
  ): Promise<{ version: VersionRecord; evidence: SnapshotEvidence }> {
    const run = snapshotStack(this.ctx, stackId, options);
    const id = options.versionId;
    if (id) {
      this.making.set(id, run);
      void run.then(
        () => this.making.delete(id),
        () => this.making.delete(id),
      );
    }
    return run;
  }

  probeEgress(stackId: string): Promise<EgressEvidence> {
    return probeStack(this.ctx, stackId);
  }

  fork(
    versionId: string,
    options: ForkStackOptions,
  ): Promise<{ stack: StackRecord; evidence: ForkEvidence }> {
    return forkStack(this.ctx, versionId, options);
  }

  /** Every service of a running stack checked once (a promote's soak): health evidence, or why not. */
  async checkHealth(stackId: string): Promise<HealthEvidence> {
    const stack = this.ctx.stack(stackId);
    const begun = performance.now();
    const entries = await Promise.all(
      Object.keys(stack.containers).map(
        async (svc) => [svc, await waitServiceHealthy(this.ctx, stack, svc, performance.now())] as const,
      ),
    );
    return { services: Object.fromEntries(entries), ms: Math.round(performance.now() - begun) };
  }

  /** What changed in a stack since a version (stack-diff.ts). */
  diff(stackId: string, options: DiffStackOptions): Promise<DiffEvidence> {
    return diffStack(this.ctx, stackId, options);
  }

  /** Every volume's state, digested, for a replay report (stack-digest.ts). */
  digestVolumes(stackId: string, options: { holdClock: boolean }): Promise<OpResult<"digest_volumes">> {
    return digestStack(this.ctx, stackId, options);
  }

  /**
   * Stops a stack's frozen clock (between a replay's steps) at what it reads plus `advanceMs` (a
   * step: STEP_ADVANCE_MS); its reading, or null.
   */
  holdClock(stackId: string, advanceMs?: number): Promise<string | null> {
    return holdStackClock(this.ctx, stackId, advanceMs);
  }

  /** Starts a stack's held clock (a pool's member handed over); its reading after, or null. */
  releaseClock(stackId: string, tickMs?: number): Promise<string | null> {
    return releaseStackClock(this.ctx, stackId, tickMs);
  }

  rollback(stackId: string, versionId: string): Promise<{ health: HealthEvidence; ms: number }> {
    return rollbackStack(this.ctx, stackId, versionId);
  }

  destroy(stackId: string): Promise<void> {
    return destroyStack(this.ctx, stackId);
  }

  async deleteVersion(versionId: string): Promise<void> {
    // A version still being made (the server that asked for it stopped, and its restart deletes
    // what it never recorded) is deleted once it exists, not before: else it would be left behind.
    await this.making.get(versionId)?.catch(() => {});
    const v = this.store.version(versionId);
    // A transfer reading its snapshots (to another host, or as an incremental's base) finishes first.
    if (v && this.transfers.holdsAny(v))
      throw new DenvError(
        "conflict",
        `version ${versionId} is being sent to another host; delete it once the transfer ends`,
      );
    return deleteVersion(this.ctx, versionId);
  }

  // Exec, files, ports and services of a running stack.

  /** A service's container: the one asked for, else the agent's, else the first. */
  private serviceTarget(stackId: string, service?: string): ServiceTarget {
    const stack = this.stack(stackId);
    const svc = service ?? stack.spec.agent?.service ?? Object.keys(stack.spec.services)[0];
    // Own properties only: a service named "constructor" or "__proto__" is no service.
    const id = svc && Object.hasOwn(stack.containers, svc) ? stack.containers[svc] : undefined;
    if (!svc || typeof id !== "string") {
      throw new DenvError(
        "not_found",
        `environment ${stack.name} has no service ${JSON.stringify((service ?? "").slice(0, 64))}; it has ${Object.keys(stack.containers).join(", ")}`,
      );
    }
    return { stackId: stack.id, containerId: id, service: svc };
  }

  async exec(stackId: string, service: string | undefined, options: ExecOptions): Promise<ExecResult> {
    return this.ctx.runIn(this.serviceTarget(stackId, service).containerId, options);
  }

  /**
   * Stops one service's container (SIGTERM, then SIGKILL after the grace period), leaving the rest
   * of the stack running: what compose-aware frameworks (Harbor's stop_service) ask for before
   * collecting from the services that remain. Its volumes and filesystem stay readable.
   */
  async stopService(stackId: string, service: string, graceMs = 10_000): Promise<{ stopped: string }> {
    const t = this.serviceTarget(stackId, service);
    await this.runtime.stopContainer(t.containerId, graceMs);
    this.ctx.log("Stopped service", { stack: stackId, service: t.service });
    return { stopped: t.service };
  }

  /** A byte stream to `port` on the service's loopback (through its agent); see AgentExecutor. */
  async openPort(stackId: string, service: string | undefined, port: number): Promise<Socket> {
    const t = this.serviceTarget(stackId, service);
    if (!this.executor.openPort) throw new DenvError("unavailable", "this host cannot reach container ports");
    try {
      return await this.executor.openPort(t.containerId, port);
    } catch (err) {
      throw new DenvError("unavailable", `service ${t.service}, port ${port}: ${(err as Error).message}`);
    }
  }

  /** A tar written at `path` as `user` (the service's own by default); see stack-files.ts. */
  async putFiles(
    stackId: string,
    service: string | undefined,
    path: string,
    tar: Readable,
    options: { user?: string | null } = {},
  ): Promise<{ entries: number; bytes: number }> {
    return putFiles(this.ctx, this.serviceTarget(stackId, service), path, tar, options);
  }

  /** A tar of `path`, read as `user` (the service's own by default) without following links. */
  async getFiles(
    stackId: string,
    service: string | undefined,
    path: string,
    options: { user?: string | null } = {},
  ): Promise<Buffer> {
    return getFiles(this.ctx, this.serviceTarget(stackId, service), path, options);
  }

  /** The same tar, to a sink as it is made (the streamed path the server uses). */
  async readFilesTo(
    stackId: string,
    service: string | undefined,
    path: string,
    sink: FileSink,
    options: { user?: string | null } = {},
  ): Promise<{ bytes: number }> {
    return readFilesTo(this.ctx, this.serviceTarget(stackId, service), path, sink, options);
  }

  /** stat, list, mkdir, remove or rename in a service, as `user` (see stack-files.ts). */
  async fileOp(
    stackId: string,
    service: string | undefined,
    request: FsRequest,
    options: { user?: string | null } = {},
  ): Promise<{ entries: FsEntry[]; created: boolean }> {
    return fileOp(this.ctx, this.serviceTarget(stackId, service), request, options);
  }

  /** Settles the engine and storage against the records (see reconcile.ts). */
  reconcile(): Promise<ReconcileReport> {
    return reconcile(this.ctx, this.journal);
  }

  /** Stops listening for agents and closes the records (the process is going away; containers and data stay). */
  async close(): Promise<void> {
    await this.agents.close();
    this.journal.close();
    this.store.close();
  }
}
