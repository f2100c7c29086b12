/**
 * The container runtime port, in denv's own types: what denvd needs from a container engine, and
 * nothing of any engine's API shapes. One adapter (docker-runtime.ts) speaks the Docker Engine API.
 */
import type { Readable } from "node:stream";

export type Labels = Record<string, string>;

export interface NetworkSpec {
  name: string;
  /** An IPv4 subnet (CIDR) for the network; the engine picks from its own pools when absent. */
  subnet?: string;
  /** No route out of the network (egress deny). */
  internal: boolean;
  labels: Labels;
}

export interface VolumeSpec {
  name: string;
  /** Host directory (a dataset) the volume stands for. */
  hostPath: string;
  labels: Labels;
}

export interface ContainerSpec {
  name: string;
  /** A pinned reference (repo@sha256:…) or an image ID. */
  image: string;
  entrypoint: string[] | null;
  cmd: string[] | null;
  env: Record<string, string>;
  user: string | null;
  workingDir: string | null;
  hostname: string | null;
  labels: Labels;
  network:
    | { kind: "network"; networks: { name: string; aliases: string[] }[] }
    | { kind: "none" }
    | { kind: "container"; containerId: string };
  mounts: (
    | {
        kind: "volume";
        volume: string;
        target: string;
        readOnly: boolean;
        subpath: string | null;
        nocopy: boolean;
      }
    | { kind: "tmpfs"; target: string; sizeBytes: number | null; mode: number | null }
    /** Only denvd's own files (the agent, the clock, the grader's inputs): user specs never get binds. */
    | { kind: "bind"; source: string; target: string; readOnly: boolean }
  )[];
  memoryBytes: number;
  pids: number;
  cpus: number;
  healthcheck: {
    test: string[];
    intervalMs: number;
    timeoutMs: number;
    startPeriodMs: number;
    retries: number;
  } | null;
  init: boolean;
  readOnlyRootfs: boolean;
  tty: boolean;
  openStdin: boolean;
  capDrop: string[];
  /** Processes cannot gain privileges through setuid binaries or file capabilities. */
  noNewPrivileges: boolean;
  extraHosts: string[];
  ulimits: Record<string, { soft: number; hard: number }>;
  shmSizeBytes: number | null;
  sysctls: Record<string, string>;
  stopSignal: string | null;
  stopTimeoutMs: number;
  restart: string;
  ipcMode?: string | null;
  pidMode?: string | null;
  /** GPUs, as the Engine API's DeviceRequests (container-spec.ts deviceRequestsFor). */
  deviceRequests?: DeviceRequest[];
}

/** One of the Engine API's HostConfig.DeviceRequests. */
export interface DeviceRequest {
  driver: string;
  /** -1: all; 0 with deviceIds. */
  count: number;
  deviceIds: string[];
  /** An OR-list of AND-lists. */
  capabilities: string[][];
  options: Record<string, string>;
}

export interface ContainerState {
  id: string;
  name: string;
  running: boolean;
  paused: boolean;
  exitCode: number;
  /** Host PID of the container's first process; 0 when not running. */
  pid: number;
  labels: Labels;
  /** Caps as the engine recorded them. */
  memoryBytes: number;
  pids: number;
  nanoCpus: number;
  /** Addresses by network name, with the engine's id of each network. */
  addresses: Record<string, { ip: string; gateway: string; networkId: string }>;
  /** Host path of the container's merged root filesystem, while it exists; null when unknown. */
  rootfsPath: string | null;
}

/** What the engine says about a path in a container, without reading it. */
export interface PathStat {
  name: string;
  /** File mode bits as the engine reports them (Go's FileMode: 1<<27 is a symbolic link). */
  mode: number;
  linkTarget: string;
}

/** What an image says about running it (its config), in denv's own terms. */
export interface ImageConfig {
  /** USER, or null for root. */
  user: string | null;
  entrypoint: string[] | null;
  cmd: string[] | null;
  /** Names of the variables the image sets. */
  envNames: string[];
}

export interface RawExecOptions {
  cmd: string[];
  user?: string | null;
  workingDir?: string | null;
  env?: Record<string, string>;
  stdin?: Buffer | Readable | null;
  onStdout: (chunk: Buffer) => void;
  onStderr: (chunk: Buffer) => void;
  /** Called with the exec'd process's host PID once it runs (to kill its tree on timeout). */
  onPid?: (pid: number) => void;
}

/** An image build, in denv's terms (the engine's classic builder takes each of these). */
export interface BuildOptions {
  /** repository:tag the image is named by besides its id. */
  tag: string;
  /** Relative to the context. */
  dockerfile: string;
  args: Record<string, string>;
  target: string | null;
  cacheFrom: string[];
  noCache: boolean;
  labels: Labels;
  /** default: the engine's bridge (build steps reach what the engine reaches); none: no network. */
  network: "default" | "none";
  /** Each build step's memory cap (no swap beyond it). */
  memoryBytes: number;
}

/** A build that failed: the engine's error and the steps it got through. */
export class BuildFailure extends Error {}

export interface ObjectSummary {
  id: string;
  name: string;
  labels: Labels;
}

/** One line a container wrote, as the engine kept it. */
export interface LogEntry {
  stream: "stdout" | "stderr";
  /** When the engine took it, as it says (RFC 3339, nanoseconds). */
  time: string;
  line: string;
}

export interface LogOptions {
  /** Only the last lines the engine kept (per container); none: all of them. */
  tailLines?: number;
  /** Only lines from this time on (ms since the epoch). */
  sinceMs?: number;
  /** Keep going with lines written from now on, until stopped or the container ends. */
  follow: boolean;
}

/**
 * Checkpoints of a container's processes (CRIU), where the engine can take and restore them: what
 * a live version carries beside its volumes. Every directory is denvd's own, root-only.
 */
export interface CheckpointPort {
  /** Why this host cannot checkpoint or restore processes; null when it can. */
  unavailable(): Promise<string | null>;
  /**
   * Whether this host's CRIU reads the limits of a process that runs as another user without
   * CAP_SYS_RESOURCE (from /proc: scripts/ensure-criu.sh's denv-criu-limits.so).
   */
  readsLimitsFromProc(): boolean;
  /**
   * Dumps a running container's processes into `dir`, leaving them running (and frozen, when the
   * caller froze them). A failure is not_supported, in CRIU's words.
   */
  checkpoint(id: string, dir: string): Promise<{ ms: number; bytes: number }>;
  /** The container's own writable layer (its changes to the image) into a tar file. */
  saveLayer(id: string, file: string): Promise<{ bytes: number }>;
  /** A saved layer into a created, never started container. */
  loadLayer(id: string, file: string): Promise<void>;
  /** Starts a created container from a checkpoint `dir` instead of its command. */
  startFrom(id: string, dir: string): Promise<void>;
  /**
   * Pause that keeps memory: the container's processes checkpointed into the engine's own place
   * for the container and stopped (their memory freed); the container, its layer and its mounts stay.
   */
  suspend(id: string): Promise<{ ms: number; bytes: number }>;
  /** Starts a suspended container from its checkpoint, and drops the checkpoint. */
  unsuspend(id: string): Promise<void>;
  /**
   * Lets a network carry the addresses its restored containers kept from their parents (their
   * established connections' ends), within that network alone.
   */
  admitRestoredAddresses(network: string): Promise<void>;
}

export interface ContainerRuntime {
  /** Process checkpoints; absent where the engine has none. */
  readonly checkpoints?: CheckpointPort;
  ping(): Promise<void>;
  /** What the engine says of its runtimes and CDI (GET /info), for the GPU inventory. */
  engineInfo?(): Promise<{ runtimes: string[]; cdiSpecDirs: string[] }>;
  createNetwork(spec: NetworkSpec): Promise<string>;
  removeNetwork(nameOrId: string): Promise<void>;
  listNetworks(labels: Labels): Promise<ObjectSummary[]>;
  /** The IPv4 subnets of every network the engine has, whoever made it. */
  networkSubnets(): Promise<string[]>;
  createVolume(spec: VolumeSpec): Promise<void>;
  removeVolume(name: string): Promise<void>;
  listVolumes(labels: Labels): Promise<ObjectSummary[]>;
  hasImage(reference: string): Promise<boolean>;
  imageConfig(reference: string): Promise<ImageConfig>;
  pullImage(reference: string): Promise<void>;
  /** The id of the newest image carrying every one of these labels; null when there is none. */
  findImage(labels: Labels): Promise<string | null>;
  /** The ids of every image carrying all of these labels. */
  listImages(labels: Labels): Promise<string[]>;
  /** Removes an image (never forced): one a container uses is a conflict. */
  removeImage(id: string): Promise<void>;
  /**
   * Builds an image from a context tar. onLog gets the build's output as the engine writes it;
   * a step that fails rejects with a BuildFailure carrying the engine's words.
   */
  buildImage(
    context: Readable,
    options: BuildOptions,
    onLog: (text: string) => void,
    signal: AbortSignal,
  ): Promise<{ imageId: string }>;
  createContainer(spec: ContainerSpec): Promise<string>;
  startContainer(id: string): Promise<void>;
  stopContainer(id: string, timeoutMs: number): Promise<void>;
  removeContainer(id: string): Promise<void>;
  /** The engine's pause: recorded by the engine, so it outlives a restart of denvd. */
  pauseContainer(id: string): Promise<void>;
  unpauseContainer(id: string): Promise<void>;
  /**
   * Freezes a running container (its first process `pid`) for a window denvd closes itself (a
   * snapshot's, a digest's): its cgroup's freezer written directly where this process can reach
   * it, the engine's pause otherwise. The engine does not record the first kind: thawContainer
   * ends it, also after a restart, for what a kill inside the window left frozen.
   */
  freezeContainer(id: string, pid: number): Promise<void>;
  /** Ends a freezeContainer; true when the container was frozen by one. Never ends the engine's pause. */
  thawContainer(id: string): Promise<boolean>;
  inspectContainer(id: string): Promise<ContainerState>;
  listContainers(labels: Labels): Promise<ObjectSummary[]>;
  /** Waits for a container to exit; after timeoutMs it reports timedOut (the container keeps running). */
  waitContainer(id: string, timeoutMs: number): Promise<{ exitCode: number; timedOut: boolean }>;
  /**
   * A container's output so far, stdout and stderr apart and both in the order written; with
   * `tailLines`, only the last lines the engine kept.
   */
  containerLogs(
    id: string,
    options?: { tailLines?: number },
  ): Promise<{ stdout: Buffer; stderr: Buffer; combined: Buffer }>;
  /**
   * A container's lines, in the order written, each with its stream and time; `stop()` ends a
   * followed one (and the iteration) at once.
   */
  containerLogLines(id: string, options: LogOptions): { lines: AsyncIterable<LogEntry>; stop(): void };
  /**
   * Paths the container's own writable layer changed since it was made (the engine's diff; its
   * mounts left out): what a snapshot of the datasets does not keep.
   */
  containerChanges(id: string): Promise<{ path: string; kind: "changed" | "added" | "deleted" }[]>;
  /** Runs a command; resolves to its exit code when its output has ended. */
  exec(id: string, options: RawExecOptions): Promise<{ exitCode: number }>;
  putArchive(id: string, path: string, tar: Readable): Promise<void>;
  getArchive(id: string, path: string): Promise<Readable>;
  /** The engine's stat of a path in a container (no link followed in its last component); null: absent. */
  statPath(id: string, path: string): Promise<PathStat | null>;
}
