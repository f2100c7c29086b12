/**
 * Where environments run, as the control plane sees it: one port in denv's own types, as
 * `ContainerRuntime` and `StorageDriver` are on a host. `DenvdTarget` (a team's sidecar hosts) is
 * the implementation today; hosted providers and a fleet of hosts come behind the same port. A
 * caller reads `capabilities()` before it acts, so nobody is promised what a target cannot do, and
 * `/v1/targets` and the console show the same row.
 *
 * Still going through the host hub directly (to move behind this port): deployments of projects,
 * snapshots, rollbacks, verify, pools, replay, promote, files and port URLs.
 */

/** The kinds of target denv knows. */
export type TargetKind = "denvd";

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

/** An environment a target made: its id in the store, and the deployment that made it. */
export interface MadeEnvironment {
  environmentId: string;
  deploymentId: string;
}

export interface TargetStatus {
  /** Whether it can take work now. */
  available: boolean;
  /** Connected hosts, for a target made of hosts. */
  hosts: number | null;
  /** What a person should know: why it is not available, or that a driver is untested live. */
  note: string | null;
}

export interface Target {
  readonly name: string;
  readonly kind: TargetKind;
  capabilities(teamId: string): Promise<TargetCapabilities>;
  status(teamId: string): Promise<TargetStatus>;
  /** A sandbox for one episode; answers once it is ready, or fails saying why. */
  createSandbox(teamId: string, spec: SandboxSpec): Promise<MadeEnvironment>;
}
