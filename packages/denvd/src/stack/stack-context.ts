/**
 * What the modules that build and run stacks share: denvd's options, its records, the engine and
 * storage ports, the agents and the network allocator. Denvd makes one and hands it to each module,
 * so every concern lives in its own file and none holds another's state.
 */
import { randomBytes } from "node:crypto";
import type { EgressGateways } from "../egress/egress-gateways.ts";
import type { ExecOptions, ExecResult, Executor } from "../exec/executor.ts";
import type { StackRecord, StateStore, VersionRecord } from "../host/state-store.ts";
import type { ContainerRuntime, Labels } from "../runtime/container-runtime.ts";
import type { StorageDriver } from "../storage/storage-driver.ts";
import type { AgentRegistry } from "./agent-registry.ts";
import type { EgressTarget } from "./egress-probe.ts";
import type { NetworkAllocator } from "./network-allocator.ts";

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
   * How long a service may take to become healthy (service-health.ts): at least floorMs (default
   * 60 s) or its healthcheck's own start_period + interval × (retries + 1); past that, while its
   * CPU time grows over the last progressWindowMs (default 5 s), up to ceilingMs (default 4 times
   * the deadline).
   */
  healthDeadline?: { floorMs?: number; ceilingMs?: number; progressWindowMs?: number };
  /**
   * Host path of the static denv-agent. When set, it is every container's entrypoint (it starts
   * the service's command) and exec goes through it instead of the engine's exec; when absent, the engine.
   */
  agentBinary?: string | null;
  /** Host path of libdenv-clock.so (clock/denv-clock.c); without it a frozen clock is reported real. */
  clockLibrary?: string | null;
  /** Where stack networks get their /24 subnets (default 172.16.0.0/12). */
  subnetPool?: string;
  /** Refuse a fork or snapshot when the pool has less free space than this. */
  minFreeBytes?: number;
  /**
   * How much each dataset of a stack may grow beyond what it held when it was made (empty, or the
   * snapshot it was cloned from): no stack fills the pool. Default 10 GiB.
   */
  datasetGrowthBytes?: number;
  log?: (message: string, context?: Record<string, unknown>) => void;
  /** Read the GPU inventory from this directory instead of the host (a test's fixture: gpu-inventory.ts). */
  gpuInventoryDir?: string;
  /**
   * Names the egress proxies answer before the host's resolver (name → IPv4 addresses): a site's
   * internal mirror, or a test's own internet. A policy still decides whether a name is reached.
   */
  egressHosts?: Record<string, string[]>;
  /** An egress connection idle this long is closed (default 120 s). */
  egressIdleTimeoutMs?: number;
  /** What one egress connection may send out (default 1 GiB). */
  egressMaxUploadBytes?: number;
}

export interface StackContext {
  /** How this host passes GPUs to containers (gpu-inventory.ts). */
  gpuMode(): Promise<"cdi" | "nvidia" | "none">;
  readonly options: DenvdOptions;
  readonly store: StateStore;
  readonly runtime: ContainerRuntime;
  readonly storage: StorageDriver;
  readonly executor: Executor;
  readonly agents: AgentRegistry;
  readonly networks: NetworkAllocator;
  /** The egress gateways of stacks whose egress is a policy. */
  readonly egress: EgressGateways;
  log(message: string, context?: Record<string, unknown>): void;
  /** denvd's labels (owner, and the test marks) plus these. */
  labels(extra: Labels): Labels;
  /** A stack by id; not_found when this host has none. */
  stack(id: string): StackRecord;
  version(id: string): VersionRecord;
  /** A command in a container, as the given user or else the container's own. */
  runIn(containerId: string, options: ExecOptions): Promise<ExecResult>;
}

export const newId = (prefix: string) => `${prefix}_${randomBytes(6).toString("hex")}`;
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const TAIL_BYTES = 2048;
/** The end of a command's output, as evidence keeps it. */
export const tail = (b: Buffer) => b.subarray(Math.max(0, b.length - TAIL_BYTES)).toString("utf8");
