import assert from "node:assert/strict";
import { test } from "node:test";
import type { ContainerSpec } from "./container-runtime.ts";
import { engineCreateOptions, restartPolicy } from "./engine-create-options.ts";

const spec: ContainerSpec = {
  name: "s1-db",
  image: "127.0.0.1:5000/denv/postgres@sha256:00",
  entrypoint: null,
  cmd: ["postgres"],
  env: { A: "1" },
  user: "1000:1000",
  workingDir: null,
  hostname: null,
  labels: { "dev.denv.stack": "s1" },
  network: { kind: "network", networks: [{ name: "net-1", aliases: ["db"] }] },
  mounts: [
    { kind: "volume", volume: "v-pg", target: "/data", readOnly: false, subpath: null, nocopy: true },
    { kind: "tmpfs", target: "/tmp", sizeBytes: 1024, mode: 0o1777 },
  ],
  memoryBytes: 512 * 1024 ** 2,
  pids: 256,
  cpus: 1.5,
  healthcheck: { test: ["CMD", "true"], intervalMs: 2000, timeoutMs: 1000, startPeriodMs: 0, retries: 3 },
  init: true,
  readOnlyRootfs: false,
  tty: false,
  openStdin: false,
  capDrop: ["NET_RAW"],
  noNewPrivileges: true,
  extraHosts: [],
  ulimits: { nofile: { soft: 1024, hard: 2048 } },
  shmSizeBytes: null,
  sysctls: {},
  stopSignal: null,
  stopTimeoutMs: 10_500,
  restart: "on-failure:3",
};

test("a spec becomes the engine's body: ns times, swap held to memory, mounts and network in its shapes", () => {
  const o = engineCreateOptions(spec);
  assert.equal(o.Healthcheck?.Interval, 2_000_000_000);
  assert.equal(o.StopTimeout, 11);
  assert.equal(o.HostConfig?.MemorySwap, o.HostConfig?.Memory);
  assert.equal(o.HostConfig?.NanoCpus, 1_500_000_000);
  assert.deepEqual(o.HostConfig?.SecurityOpt, ["no-new-privileges:true"]);
  assert.equal(o.HostConfig?.NetworkMode, "net-1");
  assert.deepEqual(o.NetworkingConfig?.EndpointsConfig, { "net-1": { Aliases: ["db"] } });
  assert.deepEqual(o.HostConfig?.Mounts?.[1], {
    Type: "tmpfs",
    Target: "/tmp",
    TmpfsOptions: { SizeBytes: 1024, Mode: 0o1777 },
  });
  assert.deepEqual(o.HostConfig?.RestartPolicy, { Name: "on-failure", MaximumRetryCount: 3 });
  assert.equal(engineCreateOptions({ ...spec, network: { kind: "none" } }).HostConfig?.NetworkMode, "none");
});

test("restart policies: no is the engine's empty name; on-failure without a count has none", () => {
  assert.deepEqual(restartPolicy("no"), { Name: "" });
  assert.deepEqual(restartPolicy("on-failure"), { Name: "on-failure" });
  assert.deepEqual(restartPolicy("unless-stopped"), { Name: "unless-stopped" });
});
