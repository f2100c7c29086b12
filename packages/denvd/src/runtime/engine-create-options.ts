/**
 * A container's spec (denv's ContainerSpec) as the Docker Engine API's create body: times in
 * nanoseconds, mounts and device requests in the engine's shapes, swap held to the memory cap.
 * Pure, so what denvd asks the engine for can be read and tested apart from the engine.
 */
import type Docker from "dockerode";
import type { ContainerSpec } from "./container-runtime.ts";

export function engineCreateOptions(spec: ContainerSpec): Docker.ContainerCreateOptions {
  const networkMode =
    spec.network.kind === "none"
      ? "none"
      : spec.network.kind === "container"
        ? `container:${spec.network.containerId}`
        : (spec.network.networks[0]?.name ?? "none");
  const endpoints =
    spec.network.kind === "network"
      ? Object.fromEntries(spec.network.networks.map((n) => [n.name, { Aliases: n.aliases }]))
      : undefined;
  const ms = 1_000_000; // ns per ms
  return {
    name: spec.name,
    Image: spec.image,
    ...(spec.entrypoint ? { Entrypoint: spec.entrypoint } : {}),
    ...(spec.cmd ? { Cmd: spec.cmd } : {}),
    Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`),
    ...(spec.user ? { User: spec.user } : {}),
    ...(spec.workingDir ? { WorkingDir: spec.workingDir } : {}),
    ...(spec.hostname ? { Hostname: spec.hostname } : {}),
    Labels: spec.labels,
    Tty: spec.tty,
    OpenStdin: spec.openStdin,
    ...(spec.stopSignal ? { StopSignal: spec.stopSignal } : {}),
    StopTimeout: Math.ceil(spec.stopTimeoutMs / 1000),
    Healthcheck: spec.healthcheck
      ? {
          Test: spec.healthcheck.test,
          Interval: spec.healthcheck.intervalMs * ms,
          Timeout: spec.healthcheck.timeoutMs * ms,
          StartPeriod: spec.healthcheck.startPeriodMs * ms,
          Retries: spec.healthcheck.retries,
        }
      : undefined,
    HostConfig: {
      NetworkMode: networkMode,
      Memory: spec.memoryBytes,
      // Swap equal to memory: no swap beyond the cap.
      MemorySwap: spec.memoryBytes,
      PidsLimit: spec.pids,
      NanoCpus: Math.round(spec.cpus * 1e9),
      Init: spec.init,
      ReadonlyRootfs: spec.readOnlyRootfs,
      CapDrop: spec.capDrop,
      ...(spec.noNewPrivileges ? { SecurityOpt: ["no-new-privileges:true"] } : {}),
      ExtraHosts: spec.extraHosts,
      Ulimits: Object.entries(spec.ulimits).map(([Name, u]) => ({ Name, Soft: u.soft, Hard: u.hard })),
      ...(spec.shmSizeBytes ? { ShmSize: spec.shmSizeBytes } : {}),
      Sysctls: spec.sysctls,
      ...(spec.ipcMode ? { IpcMode: spec.ipcMode } : {}),
      ...(spec.pidMode ? { PidMode: spec.pidMode } : {}),
      ...(spec.deviceRequests?.length
        ? {
            DeviceRequests: spec.deviceRequests.map((d) => ({
              Driver: d.driver,
              Count: d.count,
              DeviceIDs: d.deviceIds,
              Capabilities: d.capabilities,
              Options: d.options,
            })),
          }
        : {}),
      RestartPolicy: restartPolicy(spec.restart),
      // What a service writes is kept for `denv logs`, bounded and rotated: a chatty service
      // keeps its last LOG_FILES × LOG_FILE_SIZE, never the host's disk.
      LogConfig: { Type: "json-file", Config: { "max-size": LOG_FILE_SIZE, "max-file": String(LOG_FILES) } },
      // The typings demand VolumeOptions fields the Engine API treats as optional.
      Mounts: spec.mounts.map((m) =>
        m.kind === "volume"
          ? {
              Type: "volume" as const,
              Source: m.volume,
              Target: m.target,
              ReadOnly: m.readOnly,
              VolumeOptions: { NoCopy: m.nocopy, ...(m.subpath ? { Subpath: m.subpath } : {}) },
            }
          : m.kind === "bind"
            ? { Type: "bind" as const, Source: m.source, Target: m.target, ReadOnly: m.readOnly }
            : {
                Type: "tmpfs" as const,
                Target: m.target,
                TmpfsOptions: {
                  ...(m.sizeBytes ? { SizeBytes: m.sizeBytes } : {}),
                  ...(m.mode !== null ? { Mode: m.mode } : {}),
                },
              },
      ) as unknown as Docker.MountSettings[],
    },
    ...(endpoints ? { NetworkingConfig: { EndpointsConfig: endpoints } } : {}),
  };
}

/** Each service's output file is rotated at this size (the engine's units)… */
export const LOG_FILE_SIZE = "10m";
/** …and this many are kept: 30 MiB of a service's last output at most. */
export const LOG_FILES = 3;

/** compose's `restart` as the engine's policy: on-failure[:N], no (the engine's ""), or the name. */
export function restartPolicy(restart: string): { Name: string; MaximumRetryCount?: number } {
  const m = /^on-failure(?::(\d+))?$/.exec(restart);
  if (m) return { Name: "on-failure", ...(m[1] ? { MaximumRetryCount: Number(m[1]) } : {}) };
  return { Name: restart === "no" ? "" : restart };
}
