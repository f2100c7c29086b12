/**
 * The lifecycle of environments on a target made of hosts: the verbs the deployment kinds
 * (deploy, fork, snapshot, rollback, verify, promote, replay, destroy, resume), pools, version
 * copies, port URLs and routes use, in denv's own types, never the hosts' wire. `DenvdStacks`
 * (targets/denvd/) implements it over the sidecars' typed operations, which stay private to that
 * folder, so a fleet's relay or a test's stand-in can take its place behind the same verbs.
 *
 * A verb answers what the host measured (the evidence the phases record, typed by @denv/protocol)
 * or fails with a DenvError: host_unavailable when the host is away past its wait, the host's own
 * code otherwise.
 */
import type { Duplex, Readable } from "node:stream";
import type { MuxStream, OpParams, OpResult, ResolvedSpec } from "@denv/protocol";
import type { ExecOutcome, ExecRequest, OutputSink } from "./target.ts";

/** The GPUs (UUIDs) placement gave each service that asks for them. */
export type GpuAssignment = NonNullable<OpParams<"prepare">["gpus"]>;

/** A stack on one of the target's hosts. */
export interface StackRef {
  hostId: string;
  stackId: string;
}

/** How long a verb may take, and how long it waits for an absent host (none: the verb's own). */
export interface LifecycleCallOptions {
  timeoutMs?: number;
  waitForHostMs?: number;
}

export interface PrepareRequest {
  spec: ResolvedSpec;
  name: string;
  /** The deployment's id: the same id sent again is run at most once by the host. */
  operationId: string;
  /** The id the stack will have, chosen and recorded before the host is asked. */
  newStackId: string;
  /** Volumes start as clones of this version's snapshots of the same name, not empty. */
  dataFromVersionId?: string;
  gpus?: GpuAssignment;
}

export interface ForkRequest {
  versionId: string;
  name: string;
  operationId: string;
  newStackId: string;
  /** Keep a frozen clock held at the version's time until `releaseClock` (a pool's member). */
  holdClock?: boolean;
  gpus?: GpuAssignment;
  /** Start every service afresh, even from a live version. */
  cold?: boolean;
}

/** A live snapshot: every service's processes too (on), or those CRIU can take (best-effort). */
export type LiveMode = "on" | "best-effort";

export interface DiffRequest {
  /** The version compared against; none: the one the stack came from or was last rolled back to. */
  against?: string;
  maxEntries?: number;
  maxDiffBytes?: number;
}

/** An image build: the request as the prepare phase makes it, less the streams the verb opens. */
export type BuildImageRequest = Omit<OpParams<"build_image">, "context_stream" | "log_stream">;

/** A transfer of one volume of a version between two hosts, each side as the verb opens it. */
export type SendSnapshotRequest = Omit<OpParams<"send_snapshot">, "out_stream">;
export type ReceiveSnapshotRequest = Omit<OpParams<"receive_snapshot">, "in_stream">;
/** A transfer of one service's process images of a live version, each side as the verb opens it. */
export type LiveTransferRequest = Omit<OpParams<"send_live">, "out_stream">;

/** A verb that moves bytes: its streams once the host has them, and the outcome to come. */
export interface Streaming<R, S extends readonly MuxStream[]> {
  streams: S;
  result: Promise<R>;
}

export type PrepareOutcome = OpResult<"prepare">;
export type StartOutcome = OpResult<"start">;
export type WarmOutcome = OpResult<"warm">;
export type PauseOutcome = OpResult<"pause">;
export type UnpauseOutcome = OpResult<"unpause">;
export type SetEgressOutcome = OpResult<"set_egress">;
export type EgressLogOutcome = OpResult<"egress_log">;
export type HealthOutcome = OpResult<"check_health">;
export type SnapshotOutcome = OpResult<"snapshot">;
export type ForkOutcome = OpResult<"fork">;
export type RollbackOutcome = OpResult<"rollback">;
export type DiffOutcome = OpResult<"diff">;
export type DigestOutcome = OpResult<"digest_volumes">;
export type VerifyStopOutcome = OpResult<"verify_stop">;
export type CollectOutcome = OpResult<"verify_collect">;
export type GradeOutcome = OpResult<"verify_grade">;
export type BuildImageOutcome = OpResult<"build_image">;
export type SeedOutcome = OpResult<"seed_dataset">;
export type VersionOnHost = OpResult<"describe_version">;
export type TransferOutcome = OpResult<"send_snapshot">;
export type HostStacks = OpResult<"status">["stacks"];
export type VersionRecord = OpParams<"adopt_version">["version"];
export type AdoptOutcome = OpResult<"adopt_version">;

/** Whether the target's hosts are here: what placement, the join phase and the keepers read. */
export interface HostPresence {
  hostConnected(hostId: string): boolean;
  /** Resolves when the host is connected, or fails host_unavailable after timeoutMs. */
  waitForHost(hostId: string, timeoutMs: number): Promise<void>;
  /** Called each time a host says hello (first connection and every reconnect). */
  onHostReady(listener: (hostId: string) => void): void;
}

export interface StackLifecycle extends HostPresence {
  /** Images present and fresh datasets made: a stack that exists but runs nothing yet. */
  prepare(hostId: string, req: PrepareRequest, options?: LifecycleCallOptions): Promise<PrepareOutcome>;
  /** A prepared dataset filled from a tar written to the stream, before any container exists. */
  seedDataset(
    at: StackRef,
    dataset: string,
    options?: LifecycleCallOptions,
  ): Promise<Streaming<SeedOutcome, [MuxStream]>>;
  /** Networks, volumes and containers started in dependency order and healthy; egress probed. */
  start(at: StackRef): Promise<StartOutcome>;
  /** A command in a service of the stack (a gate's or a replay's own stack as well as a user's). */
  exec(
    at: StackRef,
    req: ExecRequest,
    stdin: Readable | Buffer | null,
    onOutput: OutputSink,
  ): Promise<ExecOutcome>;
  /** x-denv.warm's commands, in order. */
  warm(at: StackRef): Promise<WarmOutcome>;
  checkHealth(at: StackRef): Promise<HealthOutcome>;
  /** One consistent snapshot of every volume: a version, with its images pinned. */
  snapshot(at: StackRef, newVersionId?: string, options?: { live?: LiveMode }): Promise<SnapshotOutcome>;
  /** A new stack from a version, started and healthy. */
  fork(hostId: string, req: ForkRequest): Promise<ForkOutcome>;
  rollback(at: StackRef, versionId: string, options?: LifecycleCallOptions): Promise<RollbackOutcome>;
  /** Everything of the stack removed; one already gone is gone. */
  destroy(at: StackRef, options?: LifecycleCallOptions): Promise<void>;
  /** Thaws the agent verify froze. */
  resume(at: StackRef, options?: LifecycleCallOptions): Promise<void>;
  /** Pause that keeps memory: every service's processes checkpointed and stopped. */
  pause(at: StackRef): Promise<PauseOutcome>;
  /** A paused stack's services started again from their checkpoints, healthy. */
  unpause(at: StackRef): Promise<UnpauseOutcome>;
  /** A running stack's egress policy replaced; open connections it no longer allows are closed. */
  setEgress(at: StackRef, policy: { allow: string[]; deny: string[] }): Promise<SetEgressOutcome>;
  /** The stack's egress policy now and its log's last `limit` records. */
  egressLog(at: StackRef, limit?: number): Promise<EgressLogOutcome>;
  diff(at: StackRef, req: DiffRequest): Promise<DiffOutcome>;
  /** Every volume's state digested; `holdClock` (default true) holds a frozen clock for it. */
  digestVolumes(at: StackRef, holdClock?: boolean): Promise<DigestOutcome>;
  /** A held frozen clock starts to advance (a pool's member handed over). */
  releaseClock(at: StackRef): Promise<void>;
  /** The stacks a host holds, as it says. */
  hostStacks(hostId: string, options?: LifecycleCallOptions): Promise<HostStacks>;

  /** verify: the agent frozen, the declared paths collected, graded on a fork, and cleaned up. */
  verifyStop(at: StackRef): Promise<VerifyStopOutcome>;
  verifyCollect(at: StackRef, verifyId: string): Promise<CollectOutcome>;
  verifyGrade(at: StackRef, verifyId: string): Promise<GradeOutcome>;
  verifyCleanup(hostId: string, verifyId: string, options?: LifecycleCallOptions): Promise<void>;

  /** The image a host built earlier for a build key, when it still has it. */
  findBuiltImage(hostId: string, buildKey: string): Promise<string | null>;
  /** An image built from a context written to the first stream; its log read from the second. */
  buildImage(
    hostId: string,
    req: BuildImageRequest,
    options?: LifecycleCallOptions,
  ): Promise<Streaming<BuildImageOutcome, [MuxStream, MuxStream]>>;
  /** A project's built images removed from a host, but those kept and those in use. */
  removeBuiltImages(
    hostId: string,
    owner: { teamId: string; projectId: string },
    keep: string[],
  ): Promise<{ removed: string[]; in_use: string[] }>;
  /** Images present on a host: pulled by their pinned digest where missing. */
  ensureImages(hostId: string, images: Record<string, string>): Promise<OpResult<"ensure_images">>;

  /** A version's record as a host holds it, and the formats it sends it in. */
  describeVersion(hostId: string, versionId: string): Promise<VersionOnHost>;
  deleteVersion(hostId: string, versionId: string, options?: LifecycleCallOptions): Promise<void>;
  sendSnapshot(
    hostId: string,
    req: SendSnapshotRequest,
    options?: LifecycleCallOptions,
  ): Promise<Streaming<TransferOutcome, [MuxStream]>>;
  receiveSnapshot(
    hostId: string,
    req: ReceiveSnapshotRequest,
    options?: LifecycleCallOptions,
  ): Promise<Streaming<TransferOutcome, [MuxStream]>>;
  sendLive(
    hostId: string,
    req: LiveTransferRequest,
    options?: LifecycleCallOptions,
  ): Promise<Streaming<TransferOutcome, [MuxStream]>>;
  receiveLive(
    hostId: string,
    req: LiveTransferRequest,
    options?: LifecycleCallOptions,
  ): Promise<Streaming<TransferOutcome, [MuxStream]>>;
  /**
   * Staged snapshots (and process images) checked against what the sender counted, then recorded
   * as a version; says which services' processes the host now holds.
   */
  adoptVersion(
    hostId: string,
    version: VersionRecord,
    sha256: Record<string, string>,
    liveSha256?: Record<string, string>,
  ): Promise<AdoptOutcome>;
  /** Staged snapshots (and a version's staged process images) thrown away (a transfer given up). */
  discardReceived(hostId: string, snapshotIds: string[], liveVersionId?: string): Promise<void>;

  /**
   * A byte stream to a port in a service. With `early`, given as soon as the open is sent (a failed
   * open destroys it with the host's error): one round trip less for a request relayed on it.
   */
  openTunnel(
    at: StackRef,
    to: { service?: string | undefined; port: number },
    options?: { early?: boolean },
  ): Promise<Duplex>;
}
