/**
 * A team's sidecar hosts as one target: what denvd can do (every cell of the row, with the storage
 * its hosts report deciding how snapshots and forks are made), sandboxes deployed through the
 * deployment runner on the host with the most free storage (handed in as `createSandbox`), and an
 * environment's exec and files as typed operations on its host over the hosts' byte streams.
 */
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import {
  DenvError,
  type GpuInventory,
  isDenvError,
  type LogLine,
  logLine,
  type MuxStream,
} from "@denv/protocol";
import { teamHosts } from "../../store/host-store.ts";
import type { Store } from "../../store/open-store.ts";
import type {
  ExecOutcome,
  ExecRequest,
  FsEntry,
  LogLines,
  LogsRequest,
  MadeEnvironment,
  OutputSink,
  PlacedEnvironment,
  SandboxSpec,
  ServicePath,
  Target,
  TargetCapabilities,
  TargetStatus,
} from "../target.ts";
import { execOnStack } from "./host-exec.ts";
import type { HostOperations } from "./host-operations.ts";

/** How long a transfer of files may take (10 GiB at 20 MiB/s is under 9 minutes). */
const TRANSFER_TIMEOUT_MS = 60 * 60_000;

export interface DenvdTargetDeps {
  store: Store;
  hosts: Pick<HostOperations, "call" | "streamCall" | "isConnected">;
  createSandbox(teamId: string, spec: SandboxSpec): Promise<MadeEnvironment>;
}

/** How long a followed log may be read: a day (its reader's going away ends it sooner). */
const FOLLOW_TIMEOUT_MS = 24 * 60 * 60_000;
/** The longest line of a host's log stream taken (the host cuts entries at 64 KiB, then escapes them). */
const MAX_LOG_LINE_BYTES = 1024 * 1024;

/**
 * A host's newline-delimited log lines, each checked against the wire's schema on arrival: a
 * line that is not one, or longer than MAX_LOG_LINE_BYTES, ends the read as the host's fault.
 */
async function* checkedLogLines(stream: MuxStream, done: Promise<unknown>): AsyncGenerator<LogLine> {
  let pending = "";
  const tooLong = () => new DenvError("unavailable", "the host sent a log line over 1 MiB; try again");
  const parsed = (text: string): LogLine => {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      value = undefined;
    }
    const line = logLine.safeParse(value);
    if (!line.success)
      throw new DenvError("unavailable", "the host sent a log line denv cannot read; try again");
    return line.data;
  };
  for await (const chunk of stream) {
    pending += (chunk as Buffer).toString("utf8");
    const parts = pending.split("\n");
    pending = parts.pop() ?? "";
    for (const text of parts) {
      if (text.length > MAX_LOG_LINE_BYTES) throw tooLong();
      if (text) yield parsed(text);
    }
    if (pending.length > MAX_LOG_LINE_BYTES) throw tooLong();
  }
  if (pending) yield parsed(pending);
  await done;
}

/** The host and stack an environment runs on; conflict when the record has none. */
function onHost(env: PlacedEnvironment): { hostId: string; stackId: string } {
  if (!env.hostId || !env.stackId)
    throw new DenvError("conflict", `environment ${env.name} is not running on a host`);
  return { hostId: env.hostId, stackId: env.stackId };
}

/** The host operation's addressing of a service and user. */
function hostTarget(stackId: string, at: Omit<ServicePath, "path">) {
  return { stack_id: stackId, service: at.service, ...(at.user ? { user: at.user } : {}) };
}

/**
 * The GPU cell from what the team's hosts report (their hello's inventory): supported where one
 * can pass a GPU to a container (CDI or the engine's nvidia driver), and then a service's
 * `gpus:` is placed on a host that has them free; otherwise why not.
 */
export function gpuCapability(inventories: (GpuInventory | null)[]) {
  const usable = inventories.filter((i): i is GpuInventory => i !== null && i.mode !== "none");
  const devices = usable.reduce((n, i) => n + i.devices.length, 0);
  if (devices > 0)
    return {
      supported: true,
      detail: `${devices} GPU${devices === 1 ? "" : "s"} on ${usable.length} host${usable.length === 1 ? "" : "s"} (a service's gpus: placed where they are free)`,
    };
  if (inventories.length === 0) return { supported: false, detail: "no host joined yet" };
  const why = inventories.find((i) => i?.note)?.note;
  return { supported: false, detail: `no host of the team can pass a GPU${why ? ` (${why})` : ""}` };
}

export class DenvdTarget implements Target {
  readonly name = "denvd";
  readonly kind = "denvd" as const;
  private readonly deps: DenvdTargetDeps;

  constructor(deps: DenvdTargetDeps) {
    this.deps = deps;
  }

  async capabilities(teamId: string): Promise<TargetCapabilities> {
    const hosts = await teamHosts(this.deps.store, teamId);
    const storages = new Set(hosts.map((h) => h.storage));
    const cow = storages.has("zfs") || storages.has("btrfs");
    const yes = (detail: string) => ({ supported: true, detail });
    return {
      multiServiceStack: yes("yes"),
      consistentSnapshot: yes(
        storages.has("zfs") ? "ZFS" : storages.has("btrfs") ? "btrfs" : "pause + copy (dir)",
      ),
      fork: yes("yes"),
      forkTime: yes(cow ? "~1 s" : "grows with data (copies)"),
      egressDenyVerified: yes("yes"),
      capsEnforced: yes("yes"),
      gpu: gpuCapability(hosts.map((h) => (h.gpus_json ? (JSON.parse(h.gpus_json) as GpuInventory) : null))),
      verify: yes("yes"),
    };
  }

  async status(teamId: string): Promise<TargetStatus> {
    const hosts = (await teamHosts(this.deps.store, teamId)).filter((h) => this.deps.hosts.isConnected(h.id));
    return {
      available: hosts.length > 0,
      hosts: hosts.length,
      note: hosts.length
        ? null
        : "no host connected: `denv host join-token`, then the installer on a machine",
    };
  }

  createSandbox(teamId: string, spec: SandboxSpec): Promise<MadeEnvironment> {
    return this.deps.createSandbox(teamId, spec);
  }

  exec(
    env: PlacedEnvironment,
    req: ExecRequest,
    stdin: Readable | Buffer | null,
    onOutput: OutputSink,
  ): Promise<ExecOutcome> {
    return execOnStack(this.deps.hosts, onHost(env), req, stdin, onOutput);
  }

  async putFiles(env: PlacedEnvironment, at: ServicePath, body: Readable) {
    const { hostId, stackId } = onHost(env);
    const { streams, result } = await this.deps.hosts.streamCall(
      hostId,
      "put_files",
      1,
      ([id]) => ({ ...hostTarget(stackId, at), path: at.path, tar_stream: id as number }),
      { timeoutMs: TRANSFER_TIMEOUT_MS },
    );
    const tar = streams[0] as MuxStream;
    tar.on("error", () => {});
    // The body goes to the host as fast as it takes it; a body refused on the way (too large)
    // cuts the stream, and the host keeps nothing of it.
    const sending = pipeline(body, tar);
    sending.catch(() => {});
    try {
      return await result;
    } catch (err) {
      await sending.catch((bodyErr: unknown) => {
        if (isDenvError(bodyErr)) throw bodyErr;
      });
      throw err;
    }
  }

  async getFiles(env: PlacedEnvironment, at: ServicePath): Promise<Readable> {
    const { hostId, stackId } = onHost(env);
    const { streams, result } = await this.deps.hosts.streamCall(
      hostId,
      "get_files",
      1,
      ([id]) => ({ ...hostTarget(stackId, at), path: at.path, tar_stream: id as number }),
      { timeoutMs: TRANSFER_TIMEOUT_MS },
    );
    const tar = streams[0] as MuxStream;
    // Its one reader is the answer, which frees each frame once written.
    tar.handsOverReads = true;
    // The host sends no byte before the path was found and may be read: until the first one (or
    // the end), a failure is the operation's, answered as its error code.
    const ready = new Promise<void>((resolve, reject) => {
      const go = () => {
        tar.off("readable", go);
        tar.off("error", reject);
        resolve();
      };
      tar.on("readable", go);
      tar.once("error", reject);
    });
    await Promise.race([ready, result.then(() => ready)]).catch(async (err: unknown) => {
      tar.destroy();
      // The operation's own error says why; a cut stream alone says less.
      throw await result.then(
        () => err,
        (opErr: unknown) => opErr,
      );
    });
    // Failed already (its host broke the protocol, say): an error, not a beginning.
    if (tar.errored)
      throw new DenvError("unavailable", `the host cut the tar of ${at.path} short; try again`);
    // A failure after the first byte cuts the stream: the reader sees a truncated transfer.
    tar.on("error", () => {});
    result.catch(() => {});
    return tar;
  }

  async logs(env: PlacedEnvironment, req: LogsRequest): Promise<LogLines> {
    const { hostId, stackId } = onHost(env);
    const { streams, result } = await this.deps.hosts.streamCall(
      hostId,
      "service_logs",
      1,
      ([id]) => ({
        stack_id: stackId,
        follow: req.follow,
        logs_stream: id as number,
        ...(req.service === undefined ? {} : { service: req.service }),
        ...(req.tailLines === undefined ? {} : { tail_lines: req.tailLines }),
        ...(req.sinceMs === undefined ? {} : { since_ms: req.sinceMs }),
      }),
      { timeoutMs: FOLLOW_TIMEOUT_MS },
    );
    const stream = streams[0] as MuxStream;
    // The operation's own error (no such service, say) is what the reader of the lines meets.
    result.catch((err: Error) => stream.destroy(err));
    return { lines: checkedLogLines(stream, result), stop: () => stream.destroy() };
  }

  async statPath(env: PlacedEnvironment, at: ServicePath): Promise<FsEntry> {
    const { hostId, stackId } = onHost(env);
    return this.deps.hosts.call(hostId, "stat_path", { ...hostTarget(stackId, at), path: at.path });
  }

  async listPath(env: PlacedEnvironment, at: ServicePath, depth: number): Promise<FsEntry[]> {
    const { hostId, stackId } = onHost(env);
    const r = await this.deps.hosts.call(hostId, "list_path", {
      ...hostTarget(stackId, at),
      path: at.path,
      depth,
    });
    return r.entries;
  }

  async makeDir(env: PlacedEnvironment, at: ServicePath, parents: boolean) {
    const { hostId, stackId } = onHost(env);
    return this.deps.hosts.call(hostId, "make_dir", { ...hostTarget(stackId, at), path: at.path, parents });
  }

  async removePath(env: PlacedEnvironment, at: ServicePath, recursive: boolean): Promise<void> {
    const { hostId, stackId } = onHost(env);
    await this.deps.hosts.call(hostId, "remove_path", {
      ...hostTarget(stackId, at),
      path: at.path,
      recursive,
    });
  }

  async renamePath(env: PlacedEnvironment, at: Omit<ServicePath, "path">, from: string, to: string) {
    const { hostId, stackId } = onHost(env);
    await this.deps.hosts.call(hostId, "rename_path", { ...hostTarget(stackId, at), from, to });
  }

  async stopService(env: PlacedEnvironment, service: string): Promise<void> {
    const { hostId, stackId } = onHost(env);
    await this.deps.hosts.call(hostId, "stop_service", { stack_id: stackId, service });
  }
}
