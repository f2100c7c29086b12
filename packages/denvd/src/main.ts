/**
 * The denvd command: `denvd join --server URL --token T` once, then `denvd run`. It dials one
 * outbound WebSocket to the server and listens on no port.
 */

import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { parseBytes } from "@denv/spec/units";
import { Command } from "commander";
import { pino } from "pino";
import { Denvd } from "./denvd.ts";
import { defaultAgentBinary } from "./exec/agent-binary.ts";
import { readGpuInventory } from "./host/gpu-inventory.ts";
import { DENVD_VERSION, joinServer, Sidecar } from "./host/sidecar.ts";
import { DockerRuntime } from "./runtime/docker-runtime.ts";
import { BtrfsDriver } from "./storage/btrfs-driver.ts";
import { DirDriver } from "./storage/dir-driver.ts";
import type { StorageDriver } from "./storage/storage-driver.ts";
import { ZfsDriver } from "./storage/zfs-driver.ts";

interface HostConfig {
  /** The server's URL, or its replicas' URLs separated by commas (tried in turn). */
  server: string;
  host_id: string;
  secret: string;
  storage: "btrfs" | "dir" | "zfs";
  btrfs_pool?: string;
  /** The loop image's size, when the pool is denvd's own (default: fitted to the disk). */
  btrfs_pool_bytes?: number;
  zfs_pool?: string;
}

/** denvd's log: one JSON object per line on stderr (pino); DENVD_LOG_LEVEL sets what is written. */
const logger = pino(
  { level: process.env.DENVD_LOG_LEVEL ?? "info", base: { service: "denvd" } },
  pino.destination({ fd: 2, sync: true }),
);
const log = (message: string, context?: Record<string, unknown>) => logger.info(context ?? {}, message);

export function storageFor(
  config: Pick<HostConfig, "storage" | "btrfs_pool" | "btrfs_pool_bytes" | "zfs_pool">,
  stateDir: string,
): StorageDriver {
  if (config.storage === "zfs") return new ZfsDriver(config.zfs_pool ?? "denv");
  if (config.storage === "dir") return new DirDriver(join(stateDir, "dir"));
  return new BtrfsDriver({
    stateDir,
    ...(config.btrfs_pool ? { poolPath: config.btrfs_pool } : {}),
    ...(config.btrfs_pool_bytes ? { imageSizeBytes: config.btrfs_pool_bytes } : {}),
  });
}

export async function runDenvd(
  stateDir: string,
  options: { egressProbe?: string; label?: string[]; datasetGrowth?: string; server?: string } = {},
): Promise<{ sidecar: Sidecar; denvd: Denvd }> {
  const path = join(stateDir, "host.json");
  if (!existsSync(path))
    throw new Error(`${path} is missing: run \`denvd join --server URL --token T\` first`);
  const config = JSON.parse(readFileSync(path, "utf8")) as HostConfig;
  const servers = serverList(options.server ?? config.server);
  const [host, port] = (options.egressProbe ?? "").split(":");
  const denvd = await Denvd.open({
    stateDir,
    storage: storageFor(config, stateDir),
    runtime: new DockerRuntime(undefined, {
      onEngineError: (what, text) => log("Engine refused", { what, text }),
    }),
    egressProbeTarget: host && port ? { host, port: Number(port) } : null,
    agentBinary: defaultAgentBinary(),
    ...(options.datasetGrowth ? { datasetGrowthBytes: growthBytes(options.datasetGrowth) } : {}),
    extraLabels: Object.fromEntries(
      (options.label ?? []).map((l) => [l.split("=")[0], l.split("=").slice(1).join("=")]),
    ),
    log,
  });
  const sidecar = new Sidecar({
    serverUrl: servers,
    secret: config.secret,
    denvd,
    log,
    // What the host last told the server, for the installer's report and for people: status.json.
    onWelcome: (hostId, hello, serverUrl) => {
      const { type: _t, known_ops: _k, ...reported } = hello as Record<string, unknown>;
      writeFileSync(
        join(stateDir, "status.json"),
        `${JSON.stringify({ host_id: hostId, server: serverUrl, ...reported, connected_at: new Date().toISOString() })}\n`,
      );
    },
  });
  sidecar.start();
  return { sidecar, denvd };
}

/** `--server a,b`: the replicas of one server, each a http(s) URL. */
export function serverList(text: string): string[] {
  const urls = text
    .split(",")
    .map((u) => u.trim())
    .filter(Boolean);
  for (const u of urls)
    if (!/^https?:\/\//.test(u)) throw new Error(`--server ${u} is not a http:// or https:// URL`);
  if (!urls.length) throw new Error("--server names no URL");
  return urls;
}

/** --pool-size: a size of at least 1 GiB (btrfs's loop image holds a version and its forks). */
export function poolSizeBytes(text: string): number {
  const n = parseBytes(text);
  if (!n || n < 1024 ** 3) throw new Error(`--pool-size ${text} is not a size of at least 1g (e.g. 20g)`);
  return n;
}

function growthBytes(text: string): number {
  const n = parseBytes(text);
  if (!n) throw new Error(`--dataset-growth ${text} is not a size (e.g. 10g, 512m)`);
  return n;
}

/** Joins through the first replica that answers (a used token is refused by every replica alike). */
async function joinAny(urls: string[], token: string, name: string) {
  let last: unknown;
  for (const url of urls) {
    try {
      return await joinServer(url, token, name);
    } catch (err) {
      last = err;
      if ((err as { code?: string }).code !== "unavailable") throw err;
    }
  }
  throw last;
}

export async function main(argv: string[]): Promise<number> {
  const program = new Command("denvd")
    .version(DENVD_VERSION)
    .description("denv's host sidecar")
    .exitOverride();
  const stateOpt = [
    "--state-dir <dir>",
    "where denvd keeps its records and storage pool",
    "/var/lib/denvd",
  ] as const;
  program
    .command("join")
    .description("Join this host to a denv server with a single-use token (denv host join-token)")
    .requiredOption("--server <urls>", "the server's URL (its replicas' URLs, separated by commas)")
    .requiredOption("--token <token>", "the join token")
    .option("--name <name>", "this host's name", hostname())
    .option("--storage <kind>", "btrfs, dir or zfs", "btrfs")
    .option(
      "--btrfs-pool <path>",
      "a mounted btrfs filesystem to use (default: a loop image in the state dir)",
    )
    .option(
      "--pool-size <size>",
      "the loop image's size (e.g. 20g; default: nine tenths of the disk's free space, at most 64g)",
    )
    .option("--zfs-pool <name>", "a ZFS pool to use")
    .option(...stateOpt)
    .action(
      async (o: {
        server: string;
        token: string;
        name: string;
        storage: string;
        btrfsPool?: string;
        poolSize?: string;
        zfsPool?: string;
        stateDir: string;
      }) => {
        const poolBytes = o.poolSize === undefined ? undefined : poolSizeBytes(o.poolSize);
        const storage = o.zfsPool ? "zfs" : (o.storage as HostConfig["storage"]);
        const joined = await joinAny(serverList(o.server), o.token, o.name);
        mkdirSync(o.stateDir, { recursive: true });
        const path = join(o.stateDir, "host.json");
        const config: HostConfig = {
          server: serverList(o.server).join(","),
          host_id: joined.host_id,
          secret: joined.secret,
          storage,
          ...(o.btrfsPool ? { btrfs_pool: o.btrfsPool } : {}),
          ...(poolBytes ? { btrfs_pool_bytes: poolBytes } : {}),
          ...(o.zfsPool ? { zfs_pool: o.zfsPool } : {}),
        };
        writeFileSync(path, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
        chmodSync(path, 0o600);
        process.stdout.write(
          `joined as ${joined.host_id}; start it with \`denvd run --state-dir ${o.stateDir}\`\n`,
        );
      },
    );
  program
    .command("gpus")
    .description(
      "Print this host's GPUs as denvd reports them to the server (JSON): nvidia-smi, device nodes, CDI, the engine",
    )
    .option("--fixture <dir>", "read a directory laid out like a host instead (tests)")
    .action(async (o: { fixture?: string }) => {
      const docker = new DockerRuntime();
      const inv = await readGpuInventory(
        o.fixture ? { root: o.fixture } : { engineInfo: () => docker.engineInfo() },
      );
      process.stdout.write(`${JSON.stringify(inv, null, 2)}\n`);
    });
  program
    .command("run")
    .description("Run the sidecar: one outbound WebSocket to the server")
    .option(...stateOpt)
    .option("--egress-probe <ip:port>", "where the egress probe connects (default: each network's gateway)")
    .option(
      "--server <urls>",
      "the server's replicas to dial in turn, instead of host.json's (comma-separated)",
    )
    .option(
      "--dataset-growth <size>",
      "how much each dataset may grow beyond what it held when made (e.g. 10g; btrfs and zfs enforce it)",
      "10g",
    )
    .option(
      "--label <key=value>",
      "an extra label on every object denvd creates (repeatable)",
      (v: string, acc: string[]) => [...acc, v],
      [],
    )
    .action(
      async (o: {
        stateDir: string;
        egressProbe?: string;
        label: string[];
        datasetGrowth?: string;
        server?: string;
      }) => {
        const { sidecar, denvd } = await runDenvd(o.stateDir, o);
        const stop = async () => {
          await sidecar.stop();
          await denvd.close();
          process.exit(0);
        };
        process.on("SIGINT", stop);
        process.on("SIGTERM", stop);
        await new Promise(() => {});
      },
    );
  try {
    await program.parseAsync(argv, { from: "user" });
    return 0;
  } catch (err) {
    if (
      (err as { exitCode?: number }).exitCode !== undefined &&
      (err as { code?: string }).code?.startsWith("commander.")
    ) {
      return (err as { exitCode: number }).exitCode === 0 ? 0 : 2;
    }
    process.stderr.write(`denvd: ${(err as Error).message}\n`);
    return 1;
  }
}

if (import.meta.main)
  void main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
