/**
 * What each API benchmark runs against: `denv server` and a denvd (btrfs, the real engine, the
 * agent) joined to it in this process, a key, and `api()` that throws on any answer but 2xx.
 */
import { randomBytes } from "node:crypto";
import { readFileSync, rmSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  BtrfsDriver,
  Denvd,
  DirDriver,
  DockerRuntime,
  defaultAgentBinary,
  joinServer,
  Sidecar,
} from "@denv/denvd";
import { type RunningServer, type ServerOptions, startServer } from "@denv/server";
import { percentile } from "./bench-stats.ts";

export interface BenchRig {
  runId: string;
  /** On every engine object the run makes, its peers' included. */
  labels: Record<string, string>;
  stateDir: string;
  server: RunningServer;
  /** The team's key the rig's calls use (for the CLI and the SDK a benchmark runs). */
  key: string;
  denvd: Denvd;
  /** btrfs unless the rig was opened with `storage: "dir"` (copies). */
  storage: BtrfsDriver | DirDriver;
  api(method: string, path: string, body?: unknown): Promise<Record<string, any>>;
  /** The answer whatever its status. */
  raw(method: string, path: string, body?: unknown): Promise<{ status: number; data: Record<string, any> }>;
  close(): Promise<void>;
}

export async function openBenchRig(
  name: string,
  options: {
    serverOptions?: Partial<ServerOptions>;
    imageSizeBytes?: number;
    storage?: "btrfs" | "dir";
  } = {},
): Promise<BenchRig> {
  const runId = `bench-${name}-${randomBytes(3).toString("hex")}`;
  const labels = { "dev.denv.test": runId };
  const stateDir = join("/var/lib/denv-test", runId);
  const dataDir = await mkdtemp(join(tmpdir(), "denv-bench-"));
  const key = `dk_${runId}`;
  const server = await startServer({
    dataDir,
    adminKey: key,
    fetchAllow: ["127.0.0.1:5000"],
    ...options.serverOptions,
  });
  const storage =
    options.storage === "dir"
      ? new DirDriver(join(stateDir, "dir"))
      : new BtrfsDriver({ stateDir, imageSizeBytes: options.imageSizeBytes ?? 32 * 1024 ** 3 });
  const denvd = await Denvd.open({
    stateDir,
    storage,
    runtime: new DockerRuntime(),
    extraLabels: labels,
    minFreeBytes: 256 * 1024 ** 2,
    agentBinary: defaultAgentBinary(),
  });
  const raw = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${server.url}${path}`, {
      method,
      signal: AbortSignal.timeout(600_000),
      headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, data: (await res.json()) as Record<string, unknown> };
  };
  const api = async (method: string, path: string, body?: unknown) => {
    const r = await raw(method, path, body);
    if (r.status >= 300) throw new Error(`${method} ${path}: ${JSON.stringify(r.data)}`);
    return r.data;
  };
  const token = (await api("POST", "/v1/hosts/join-token")).token as string;
  const joined = await joinServer(server.url, token, "bench");
  const sidecar = new Sidecar({ serverUrl: server.url, secret: joined.secret, denvd });
  sidecar.start();
  await sidecar.ready;
  return {
    runId,
    labels,
    stateDir,
    server,
    key,
    denvd,
    storage,
    api,
    raw,
    async close() {
      await sidecar.stop();
      await server.close();
      for (const e of denvd.stacks()) await denvd.destroy(e.id).catch(() => {});
      for (const v of denvd.versions()) await denvd.deleteVersion(v.id).catch(() => {});
      if (storage instanceof BtrfsDriver) await storage.unmount().catch(() => {});
      rmSync(stateDir, { recursive: true, force: true });
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** CPU time the whole host spent (all cores), in seconds, from /proc/stat. */
export function busyCpuS(): number {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]?.trim().split(/\s+/).slice(1).map(Number) ?? [];
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = f;
  return (user + nice + system + irq + softirq + steal) / 100;
}

/** The p-th percentile (interpolated), to a tenth. */
export const ms = (xs: number[], p = 0.5) => Math.round(percentile(xs, p) * 10) / 10;
export const log = (s: string) => process.stderr.write(`${s}\n`);
