/** @module @denv/denvd — the host sidecar's runtime: stacks, storage, snapshots, forks, exec, files. */
export { Denvd, type DenvdOptions } from "./denvd.ts";
export { DEFAULT_AGENT_BINARY, defaultAgentBinary } from "./exec/agent-binary.ts";
export { AGENT_SOCKET_NAME, AgentChannel } from "./exec/agent-channel.ts";
export { AgentExecutor } from "./exec/agent-executor.ts";
export { BTRFS_BUILTIN } from "./exec/agent-protocol.ts";
export { EngineExecutor } from "./exec/engine-executor.ts";
export type { ExecOptions, ExecResult, Executor } from "./exec/executor.ts";
export {
  type HostCommandResult,
  hostAgentPid,
  runHostBuiltin,
  runHostCommand,
  startHostAgent,
  stopHostAgent,
} from "./host/host-command.ts";
export {
  type OperationHandlers,
  type OpStreams,
  operationHandlers,
  performOperation,
  streamSink,
} from "./host/operation-handlers.ts";
export { DENVD_VERSION, joinServer, Sidecar } from "./host/sidecar.ts";
export type { StackRecord, VersionRecord } from "./host/state-store.ts";
export { findFreezer, isFrozen as freezerIsFrozen } from "./runtime/cgroup-freezer.ts";
export type { ContainerRuntime, ContainerSpec, ContainerState } from "./runtime/container-runtime.ts";
export { DockerCheckpoints } from "./runtime/docker-checkpoints.ts";
export { DockerRuntime } from "./runtime/docker-runtime.ts";
export { BUSY_SHARE, cpuDemandReader, cpuUsageMs } from "./services/service-progress.ts";
export { containerSettleProbe, settleService } from "./services/service-settle.ts";
export {
  bridgeLinkLocal,
  type EgressTarget,
  hostAddress,
  loopbackOnly,
  MIN_WAIT_MS,
  probeEgress,
} from "./stack/egress-probe.ts";
export { LABEL } from "./stack/labels.ts";
export { checkEntryName, sanitizeTar } from "./stack/tar-sanitizer.ts";
export { DEFAULT_COLLECT_MAX_BYTES, Verifier } from "./stack/verify.ts";
export { BtrfsDriver } from "./storage/btrfs-driver.ts";
export { DirDriver } from "./storage/dir-driver.ts";
export type { StorageDriver, StorageKind } from "./storage/storage-driver.ts";
export { ZfsDriver } from "./storage/zfs-driver.ts";
