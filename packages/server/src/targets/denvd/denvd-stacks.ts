/**
 * The lifecycle port (stack-lifecycle.ts) over a team's sidecar hosts: each verb one typed host
 * operation, its denv-side request put in the operation's wire form here and nowhere else.
 */
import type { Duplex, Readable } from "node:stream";
import type { MuxStream } from "@denv/protocol";
import type { Store } from "../../store/open-store.ts";
import type {
  BuildImageRequest,
  DiffRequest,
  ForkRequest,
  LifecycleCallOptions,
  LiveMode,
  LiveTransferRequest,
  PrepareRequest,
  ReceiveSnapshotRequest,
  SendSnapshotRequest,
  StackLifecycle,
  StackRef,
  VersionRecord,
} from "../stack-lifecycle.ts";
import type { ExecOutcome, ExecRequest, OutputSink } from "../target.ts";
import { DenvdTarget, type DenvdTargetDeps } from "./denvd-target.ts";
import { execOnStack } from "./host-exec.ts";
import type { HostOperations } from "./host-operations.ts";

const stack = (at: StackRef) => ({ stack_id: at.stackId });

export class DenvdStacks implements StackLifecycle {
  private readonly hosts: HostOperations;

  constructor(hosts: HostOperations) {
    this.hosts = hosts;
  }

  /** The team's hosts as a Target (exec, files, logs), its sandboxes made by `createSandbox`. */
  target(store: Store, createSandbox: DenvdTargetDeps["createSandbox"]): DenvdTarget {
    return new DenvdTarget({ store, hosts: this.hosts, createSandbox });
  }

  hostConnected(hostId: string): boolean {
    return this.hosts.isConnected(hostId);
  }

  waitForHost(hostId: string, timeoutMs: number): Promise<void> {
    return this.hosts.waitConnected(hostId, timeoutMs);
  }

  onHostReady(listener: (hostId: string) => void): void {
    this.hosts.onHostReady(listener);
  }

  prepare(hostId: string, req: PrepareRequest, options?: LifecycleCallOptions) {
    return this.hosts.call(
      hostId,
      "prepare",
      {
        spec: req.spec,
        name: req.name,
        operation_id: req.operationId,
        new_stack_id: req.newStackId,
        ...(req.dataFromVersionId ? { data_from_version_id: req.dataFromVersionId } : {}),
        ...(req.gpus ? { gpus: req.gpus } : {}),
      },
      options,
    );
  }

  async seedDataset(at: StackRef, dataset: string, options?: LifecycleCallOptions) {
    const { streams, result } = await this.hosts.streamCall(
      at.hostId,
      "seed_dataset",
      1,
      ([contentId]) => ({ ...stack(at), dataset, content_stream: contentId as number }),
      options,
    );
    return { streams: streams as [MuxStream], result };
  }

  start(at: StackRef) {
    return this.hosts.call(at.hostId, "start", stack(at));
  }

  exec(
    at: StackRef,
    req: ExecRequest,
    stdin: Readable | Buffer | null,
    onOutput: OutputSink,
  ): Promise<ExecOutcome> {
    return execOnStack(this.hosts, at, req, stdin, onOutput);
  }

  warm(at: StackRef) {
    return this.hosts.call(at.hostId, "warm", stack(at));
  }

  checkHealth(at: StackRef) {
    return this.hosts.call(at.hostId, "check_health", stack(at));
  }

  snapshot(at: StackRef, newVersionId?: string, options: { live?: LiveMode } = {}) {
    return this.hosts.call(at.hostId, "snapshot", {
      ...stack(at),
      ...(newVersionId ? { new_version_id: newVersionId } : {}),
      ...(options.live ? { live: options.live } : {}),
    });
  }

  fork(hostId: string, req: ForkRequest) {
    return this.hosts.call(hostId, "fork", {
      version_id: req.versionId,
      name: req.name,
      operation_id: req.operationId,
      new_stack_id: req.newStackId,
      ...(req.holdClock !== undefined ? { hold_clock: req.holdClock } : {}),
      ...(req.cold ? { cold: true } : {}),
      ...(req.gpus ? { gpus: req.gpus } : {}),
    });
  }

  rollback(at: StackRef, versionId: string, options?: LifecycleCallOptions) {
    return this.hosts.call(at.hostId, "rollback", { ...stack(at), version_id: versionId }, options);
  }

  async destroy(at: StackRef, options?: LifecycleCallOptions): Promise<void> {
    await this.hosts.call(at.hostId, "destroy", stack(at), options);
  }

  async resume(at: StackRef, options?: LifecycleCallOptions): Promise<void> {
    await this.hosts.call(at.hostId, "resume", stack(at), options);
  }

  pause(at: StackRef) {
    return this.hosts.call(at.hostId, "pause", stack(at));
  }

  unpause(at: StackRef) {
    return this.hosts.call(at.hostId, "unpause", stack(at));
  }

  setEgress(at: StackRef, policy: { allow: string[]; deny: string[] }) {
    return this.hosts.call(at.hostId, "set_egress", { ...stack(at), policy });
  }

  egressLog(at: StackRef, limit?: number) {
    return this.hosts.call(at.hostId, "egress_log", { ...stack(at), ...(limit ? { limit } : {}) });
  }

  diff(at: StackRef, req: DiffRequest) {
    return this.hosts.call(at.hostId, "diff", {
      ...stack(at),
      ...(req.against ? { against: req.against } : {}),
      ...(req.maxEntries !== undefined ? { max_entries: req.maxEntries } : {}),
      ...(req.maxDiffBytes !== undefined ? { max_diff_bytes: req.maxDiffBytes } : {}),
    });
  }

  digestVolumes(at: StackRef, holdClock?: boolean) {
    return this.hosts.call(at.hostId, "digest_volumes", {
      ...stack(at),
      ...(holdClock !== undefined ? { hold_clock: holdClock } : {}),
    });
  }

  async releaseClock(at: StackRef): Promise<void> {
    await this.hosts.call(at.hostId, "release_clock", stack(at));
  }

  async hostStacks(hostId: string, options?: LifecycleCallOptions) {
    return (await this.hosts.call(hostId, "status", {}, options)).stacks;
  }

  verifyStop(at: StackRef) {
    return this.hosts.call(at.hostId, "verify_stop", stack(at));
  }

  verifyCollect(at: StackRef, verifyId: string) {
    return this.hosts.call(at.hostId, "verify_collect", { ...stack(at), verify_id: verifyId });
  }

  verifyGrade(at: StackRef, verifyId: string) {
    return this.hosts.call(at.hostId, "verify_grade", { ...stack(at), verify_id: verifyId });
  }

  async verifyCleanup(hostId: string, verifyId: string, options?: LifecycleCallOptions): Promise<void> {
    await this.hosts.call(hostId, "verify_cleanup", { verify_id: verifyId }, options);
  }

  async findBuiltImage(hostId: string, buildKey: string): Promise<string | null> {
    return (await this.hosts.call(hostId, "find_built_image", { build_key: buildKey })).image_id;
  }

  async buildImage(hostId: string, req: BuildImageRequest, options?: LifecycleCallOptions) {
    const { streams, result } = await this.hosts.streamCall(
      hostId,
      "build_image",
      2,
      ([contextId, logId]) => ({
        ...req,
        context_stream: contextId as number,
        log_stream: logId as number,
      }),
      options,
    );
    return { streams: streams as [MuxStream, MuxStream], result };
  }

  removeBuiltImages(hostId: string, owner: { teamId: string; projectId: string }, keep: string[]) {
    return this.hosts.call(hostId, "remove_built_images", {
      team_id: owner.teamId,
      project_id: owner.projectId,
      keep,
    });
  }

  ensureImages(hostId: string, images: Record<string, string>) {
    return this.hosts.call(hostId, "ensure_images", { images });
  }

  describeVersion(hostId: string, versionId: string) {
    return this.hosts.call(hostId, "describe_version", { version_id: versionId });
  }

  async deleteVersion(hostId: string, versionId: string, options?: LifecycleCallOptions): Promise<void> {
    await this.hosts.call(hostId, "delete_version", { version_id: versionId }, options);
  }

  async sendSnapshot(hostId: string, req: SendSnapshotRequest, options?: LifecycleCallOptions) {
    const { streams, result } = await this.hosts.streamCall(
      hostId,
      "send_snapshot",
      1,
      ([id]) => ({ ...req, out_stream: id as number }),
      options,
    );
    return { streams: streams as [MuxStream], result };
  }

  async receiveSnapshot(hostId: string, req: ReceiveSnapshotRequest, options?: LifecycleCallOptions) {
    const { streams, result } = await this.hosts.streamCall(
      hostId,
      "receive_snapshot",
      1,
      ([id]) => ({ ...req, in_stream: id as number }),
      options,
    );
    return { streams: streams as [MuxStream], result };
  }

  async sendLive(hostId: string, req: LiveTransferRequest, options?: LifecycleCallOptions) {
    const { streams, result } = await this.hosts.streamCall(
      hostId,
      "send_live",
      1,
      ([id]) => ({ ...req, out_stream: id as number }),
      options,
    );
    return { streams: streams as [MuxStream], result };
  }

  async receiveLive(hostId: string, req: LiveTransferRequest, options?: LifecycleCallOptions) {
    const { streams, result } = await this.hosts.streamCall(
      hostId,
      "receive_live",
      1,
      ([id]) => ({ ...req, in_stream: id as number }),
      options,
    );
    return { streams: streams as [MuxStream], result };
  }

  adoptVersion(
    hostId: string,
    version: VersionRecord,
    sha256: Record<string, string>,
    liveSha256?: Record<string, string>,
  ) {
    return this.hosts.call(hostId, "adopt_version", {
      version,
      sha256,
      ...(liveSha256 ? { live_sha256: liveSha256 } : {}),
    });
  }

  async discardReceived(hostId: string, snapshotIds: string[], liveVersionId?: string): Promise<void> {
    await this.hosts.call(hostId, "discard_received", {
      snapshot_ids: snapshotIds,
      ...(liveVersionId ? { live_version_id: liveVersionId } : {}),
    });
  }

  openTunnel(
    at: StackRef,
    to: { service?: string | undefined; port: number },
    options?: { early?: boolean },
  ): Promise<Duplex> {
    return this.hosts.openTunnel(at.hostId, { ...stack(at), service: to.service, port: to.port }, options);
  }
}
