/** Shared set-up for tests that run denvd's runtime against the real engine and a real btrfs pool. */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import {
  BtrfsDriver,
  Denvd,
  DockerRuntime,
  defaultAgentBinary,
  type EgressTarget,
  operationHandlers,
  performOperation,
} from "@denv/denvd";
import {
  DenvError,
  OPERATIONS,
  type OpMethod,
  type OpParams,
  type OpResult,
  type ResolvedSpec,
} from "@denv/protocol";
import { pinSpec, RegistryPinner, validateCompose } from "@denv/spec";
import Docker from "dockerode";
import { removeLabelled } from "./engine.ts";

export const repoRoot = join(import.meta.dirname, "..", "..");

/**
 * What a host's state directory holds, read from its files as another process (a killed denvd's
 * included) left them: the owner id from `state.json`, the records from `state.db`.
 */
export function readHostState(stateDir: string): {
  ownerId: string;
  stacks: Record<string, any>;
  versions: Record<string, any>;
} {
  const { ownerId } = JSON.parse(readFileSync(join(stateDir, "state.json"), "utf8")) as { ownerId: string };
  const db = new DatabaseSync(join(stateDir, "state.db"));
  try {
    const rows = db.prepare("SELECT kind, id, json FROM records ORDER BY rowid").all() as {
      kind: string;
      id: string;
      json: string;
    }[];
    const of = (kind: string) =>
      Object.fromEntries(rows.filter((r) => r.kind === kind).map((r) => [r.id, JSON.parse(r.json)]));
    return { ownerId, stacks: of("stack"), versions: of("version") };
  } finally {
    db.close();
  }
}

/** Writes a stack's record into the host's database as a kill mid-operation leaves it. */
export function writeHostStack(stateDir: string, rec: { id: string }): void {
  const db = new DatabaseSync(join(stateDir, "state.db"));
  try {
    db.prepare(
      "INSERT INTO records (kind, id, json) VALUES ('stack', ?, ?) ON CONFLICT (kind, id) DO UPDATE SET json = excluded.json",
    ).run(rec.id, JSON.stringify(rec));
  } finally {
    db.close();
  }
}

/** What test servers may fetch from besides the public hosts: this machine's registry. */
export const LOCAL_REGISTRY = ["127.0.0.1:5000"];

/** The ops-world spec, validated and pinned through the local registry. */
export async function opsWorldSpec(mutate?: (text: string) => string): Promise<ResolvedSpec> {
  let text = readFileSync(join(repoRoot, "examples", "ops-world", "docker-compose.yaml"), "utf8");
  if (mutate) text = mutate(text);
  const r = validateCompose(text, { env: {}, projectName: "ops-world" });
  if (!r.ok) throw new Error(JSON.stringify(r.errors));
  return pinSpec(r.spec, new RegistryPinner());
}

/** The host's address on Docker's default bridge: on this machine, reachable only with a route out. */
export function dockerBridgeAddress(): string {
  const out = execFileSync("ip", ["-4", "-o", "addr", "show", "docker0"], { encoding: "utf8" });
  const m = /inet (\d+\.\d+\.\d+\.\d+)/.exec(out);
  if (!m?.[1]) throw new Error("docker0 has no IPv4 address");
  return m[1];
}

/** A TCP listener on this machine for the egress probe to aim at. */
export async function probeListener(): Promise<{ target: EgressTarget; server: Server }> {
  const server = createServer((s) => s.end());
  await new Promise<void>((r) => server.listen(0, "0.0.0.0", r));
  const port = (server.address() as { port: number }).port;
  return { server, target: { host: dockerBridgeAddress(), port } };
}

export interface TestHost {
  denvd: Denvd;
  runId: string;
  stateDir: string;
  storage: BtrfsDriver;
  docker: Docker;
  close(): Promise<void>;
}

export async function openTestHost(options: {
  egressProbeTarget?: EgressTarget | null;
  storage?: "btrfs";
  runId?: string;
  stateDir?: string;
  datasetGrowthBytes?: number;
  healthDeadline?: { floorMs?: number; ceilingMs?: number; progressWindowMs?: number };
  egressHosts?: Record<string, string[]>;
  egressIdleTimeoutMs?: number;
  egressMaxUploadBytes?: number;
}): Promise<TestHost> {
  const runId = options.runId ?? `t-${randomBytes(4).toString("hex")}`;
  const stateDir = options.stateDir ?? join("/var/lib/denv-test", runId);
  const storage = new BtrfsDriver({ stateDir, imageSizeBytes: 16 * 1024 ** 3 });
  const denvd = await Denvd.open({
    stateDir,
    storage,
    runtime: new DockerRuntime(),
    extraLabels: { "dev.denv.test": runId },
    egressProbeTarget: options.egressProbeTarget ?? null,
    minFreeBytes: 256 * 1024 ** 2,
    ...(options.datasetGrowthBytes ? { datasetGrowthBytes: options.datasetGrowthBytes } : {}),
    ...(options.healthDeadline ? { healthDeadline: options.healthDeadline } : {}),
    agentBinary: defaultAgentBinary(),
    ...(options.egressHosts ? { egressHosts: options.egressHosts } : {}),
    ...(options.egressIdleTimeoutMs ? { egressIdleTimeoutMs: options.egressIdleTimeoutMs } : {}),
    ...(options.egressMaxUploadBytes ? { egressMaxUploadBytes: options.egressMaxUploadBytes } : {}),
  });
  const docker = new Docker();
  return {
    denvd,
    runId,
    stateDir,
    storage,
    docker,
    async close() {
      for (const stack of denvd.stacks()) await denvd.destroy(stack.id).catch(() => {});
      for (const v of denvd.versions()) await denvd.deleteVersion(v.id).catch(() => {});
      await denvd.close();
      await removeLabelled(docker, { "dev.denv.test": runId });
      await storage.unmount().catch(() => {});
      await rm(stateDir, { recursive: true, force: true });
    },
  };
}

/**
 * Runs a host operation the way the control plane does: params as they arrive over the wire
 * (JSON), checked against the protocol table, the same handler the sidecar runs, and the result
 * checked as HostHub checks it.
 */
export async function hostOp<M extends OpMethod>(
  denvd: Denvd,
  method: M,
  params: OpParams<M>,
): Promise<OpResult<M>> {
  const handlers = operationHandlers(denvd, {
    openTunnel: () => Promise.reject(new DenvError("unavailable", "tests open no tunnels")),
  });
  const result = await performOperation(handlers, method, JSON.parse(JSON.stringify(params)));
  return OPERATIONS[method].result.parse(JSON.parse(JSON.stringify(result))) as OpResult<M>;
}

/**
 * A deploy on one host through the phases the control plane runs, in its order: prepare, start
 * (whose result carries the egress probe), warm, snapshot. A failure destroys what was made, as
 * the server's deploy does.
 */
export async function deployStack(denvd: Denvd, spec: ResolvedSpec, options: { name: string }) {
  const prepared = await hostOp(denvd, "prepare", {
    spec,
    name: options.name,
    operation_id: `op_${randomBytes(6).toString("hex")}`,
  });
  const stackId = prepared.stack_id;
  try {
    const started = await hostOp(denvd, "start", { stack_id: stackId });
    const warm = await hostOp(denvd, "warm", { stack_id: stackId });
    const snap = await hostOp(denvd, "snapshot", { stack_id: stackId });
    return {
      stack: denvd.stack(stackId),
      version: denvd.version(snap.version_id),
      evidence: {
        prepare: prepared.evidence,
        start: started.evidence,
        health: started.health,
        warm,
        snapshot: snap.evidence,
        egress: started.egress,
      },
    };
  } catch (err) {
    await hostOp(denvd, "destroy", { stack_id: stackId }).catch(() => {});
    throw err;
  }
}

export type DeployedStack = Awaited<ReturnType<typeof deployStack>>;
