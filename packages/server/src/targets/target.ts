/**
 * Where environments run, as the control plane sees it: one port in denv's own types, as
 * `ContainerRuntime` and `StorageDriver` are on a host. `DenvdTarget` (a team's sidecar hosts) is
 * the implementation today; hosted providers and a fleet of hosts come behind the same port. A
 * caller reads `capabilities()` before it acts, so nobody is promised what a target cannot do, and
 * `/v1/targets` and the console show the same row.
 *
 * Exec, files, logs and stopping a service go through it; hosted providers (E2B, Daytona, Prime)
 * are targets of their own. The lifecycle of stacks on a team's sidecar hosts (prepare, start,
 * snapshot, fork, rollback, verify's steps, destroy, version copies, tunnels) is the port beside
 * it, stack-lifecycle.ts, which the deployment kinds, keepers and routes speak; the hosts' typed
 * operations and the WebSocket hub behind it are private to targets/denvd/ (a source rule says
 * so). A project's deploy on a hosted target is still its own path (deployments/hosted-deploy.ts).
 */
import type { Readable } from "node:stream";
import { DenvError, type fsEntry, type LogLine } from "@denv/protocol";
import type { z } from "zod";

/** A path in a container as the user saw it (a link is reported as a link, not followed). */
export type FsEntry = z.infer<typeof fsEntry>;

/** The kinds of target denv knows. */
export type TargetKind = "denvd" | "e2b" | "daytona" | "modal" | "prime";

/** One cell of a capability row: whether the target can, and how, in words shown as they are. */
export interface Capability {
  supported: boolean;
  detail: string;
}

/** What a target can do, one cell per promise a caller may rely on. */
export interface TargetCapabilities {
  /** A compose file with several services runs as one environment. */
  multiServiceStack: Capability;
  /** Every volume of an environment is snapshotted at one instant. */
  consistentSnapshot: Capability;
  /** A version forks into new environments. */
  fork: Capability;
  /** What a fork costs in time. */
  forkTime: Capability;
  /** egress: deny is applied and then proven by a probe. */
  egressDenyVerified: Capability;
  /** Memory, CPU and pids caps are enforced and read back. */
  capsEnforced: Capability;
  gpu: Capability;
  /** The grader runs on a fork as a separate principal. */
  verify: Capability;
}

/** A one-container sandbox made from an image. */
export interface ImageSandboxSpec {
  name?: string;
  image: string;
  cmd?: string[];
  env?: Record<string, string>;
  ports?: number[];
  /** Paths kept across snapshot and fork. */
  volumes?: string[];
  egress?: "deny" | "allow";
  user?: string;
}

/** A sandbox from an image, or a fork of a version (a reference the version store resolves). */
export type SandboxSpec = ImageSandboxSpec | { fromVersion: string; name?: string };

/** An environment a target made: its id in the store, and the deployment that made it (none for a hosted sandbox). */
export interface MadeEnvironment {
  environmentId: string;
  deploymentId: string | null;
}

/** A snapshot a hosted target took of a sandbox: the provider's id for it, and what was measured. */
export interface TargetSnapshot {
  ref: string;
  evidence: Record<string, unknown>;
}

export interface TargetStatus {
  /** Whether it can take work now. */
  available: boolean;
  /** Connected hosts, for a target made of hosts. */
  hosts: number | null;
  /** What a person should know: why it is not available, or that a driver is untested live. */
  note: string | null;
}

/** A running environment as its target placed it (the store's record of where it runs). */
export interface PlacedEnvironment {
  id: string;
  name: string;
  /** The host and stack, for a target made of hosts. */
  hostId: string | null;
  stackId: string | null;
}

/** Where in an environment: a service (none: the agent's, else the first) and as whom. */
export interface ServicePath {
  service?: string;
  /** name|uid[:group|gid]; none: the service's own user. */
  user?: string;
  path: string;
}

export interface ExecRequest {
  service?: string;
  command: string | string[];
  user?: string;
  cwd?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  /** Per stream; output past it is counted and dropped. None: all of it. */
  maxOutputBytes?: number;
  /** A replay's step: a held frozen clock advances only while the command runs. */
  episodeClock?: boolean;
  /** On a terminal of this size (its output all stdout); a target without terminals refuses it. */
  tty?: { rows: number; cols: number };
}

export interface ExecOutcome {
  exitCode: number;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  stdoutDroppedBytes: number;
  stderrDroppedBytes: number;
  timedOut: boolean;
  durationMs: number;
}

/** Output as the command writes it; the target waits while the promise is pending. */
export type OutputSink = (which: "stdout" | "stderr", chunk: Buffer) => void | Promise<void>;

/** Which of an environment's logs: one service's or all, the last lines or those since a time, followed or not. */
export interface LogsRequest {
  service?: string;
  tailLines?: number;
  sinceMs?: number;
  follow: boolean;
}

/** Lines as the target sends them (each checked on arrival); `stop()` ends a followed read. */
export interface LogLines {
  lines: AsyncIterable<LogLine>;
  stop(): void;
}

/** Reaching into a running environment: commands, files, logs, one service stopped. */
export interface EnvironmentIo {
  /** What the services wrote, each line with its service, stream and time. */
  logs(env: PlacedEnvironment, req: LogsRequest): Promise<LogLines>;
  exec(
    env: PlacedEnvironment,
    req: ExecRequest,
    stdin: Readable | Buffer | null,
    onOutput: OutputSink,
  ): Promise<ExecOutcome>;
  /** Extracts a tar at the path (parents made; a directory never replaced by a file, nor the reverse). */
  putFiles(
    env: PlacedEnvironment,
    at: ServicePath,
    tar: Readable,
  ): Promise<{ entries: number; bytes: number }>;
  /** A tar of the path, never following a link; resolves once its first byte came, or fails why. */
  getFiles(env: PlacedEnvironment, at: ServicePath): Promise<Readable>;
  statPath(env: PlacedEnvironment, at: ServicePath): Promise<FsEntry>;
  listPath(env: PlacedEnvironment, at: ServicePath, depth: number): Promise<FsEntry[]>;
  makeDir(env: PlacedEnvironment, at: ServicePath, parents: boolean): Promise<{ created: boolean }>;
  removePath(env: PlacedEnvironment, at: ServicePath, recursive: boolean): Promise<void>;
  renamePath(env: PlacedEnvironment, at: Omit<ServicePath, "path">, from: string, to: string): Promise<void>;
  stopService(env: PlacedEnvironment, service: string): Promise<void>;
}

export interface Target extends EnvironmentIo {
  readonly name: string;
  readonly kind: TargetKind;
  capabilities(teamId: string): Promise<TargetCapabilities>;
  status(teamId: string): Promise<TargetStatus>;
  /** A sandbox for one episode; answers once it is ready, or fails saying why. */
  createSandbox(teamId: string, spec: SandboxSpec): Promise<MadeEnvironment>;
}

/**
 * What only a team's own hosts do (rollback, verify, diff, port URLs), refused on an environment a
 * hosted target runs as not_supported, naming the target, before anything is recorded.
 */
export function requireHostsTarget(env: { name: string; target_id: string }, what: string): void {
  if (env.target_id !== "denvd")
    throw new DenvError(
      "not_supported",
      `environment ${env.name} runs on target ${env.target_id}, a hosted provider: ${what} needs a denvd host (GET /v1/targets shows what each target can do)`,
      { details: { target: env.target_id } },
    );
}

/** The one service of a hosted sandbox, as environments name their services. */
export const HOSTED_SERVICE = "main";
