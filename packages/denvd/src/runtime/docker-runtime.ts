/**
 * The ContainerRuntime adapter over the Docker Engine API (dockerode). Engine errors become
 * DenvErrors with stable codes: 404 → not_found, 409 → conflict, anything else → engine_error.
 * Removing what is already gone succeeds, so teardown is idempotent.
 */
import { PassThrough, type Readable } from "node:stream";
import { DenvError } from "@denv/protocol";
import Docker from "dockerode";
import { type FreezerFiles, findFreezer, freeze, isFrozen, thaw } from "./cgroup-freezer.ts";
import {
  BuildFailure,
  type BuildOptions,
  type ContainerRuntime,
  type ContainerSpec,
  type ContainerState,
  type ImageConfig,
  type Labels,
  type LogEntry,
  type LogOptions,
  type NetworkSpec,
  type ObjectSummary,
  type PathStat,
  type RawExecOptions,
  type VolumeSpec,
} from "./container-runtime.ts";
import { DockerCheckpoints } from "./docker-checkpoints.ts";
import { engineCreateOptions } from "./engine-create-options.ts";
import { demuxOutput, LogFrames, timeMs } from "./log-frames.ts";

/**
 * Engine failures in denv's words. The engine's own text (container ids, daemon internals) never
 * goes into the message: it stays in `cause`, and in denvd's log through onEngineError.
 */
function mapError(err: unknown, what: string, notFound = "it no longer exists"): never {
  const status = (err as { statusCode?: number }).statusCode;
  engineErrorLog?.(what, engineText(err));
  if (status === 404) throw new DenvError("not_found", `${what}: ${notFound}`, { cause: err });
  if (status === 409) throw new DenvError("conflict", `${what}: it is busy or not running`, { cause: err });
  if (status === 400)
    throw new DenvError(
      "invalid_argument",
      `${what}: the engine refused the request (denvd's log has its words)`,
      {
        cause: err,
      },
    );
  throw new DenvError("engine_error", `${what}: the engine failed (denvd's log has its words)`, {
    cause: err,
  });
}

/** The engine's own words for a failure (for logs, and for decisions denvd makes on them). */
export function engineText(err: unknown): string {
  const e = (err instanceof DenvError ? err.cause : err) as { json?: { message?: string }; message?: string };
  return String(e?.json?.message ?? e?.message ?? "");
}

let engineErrorLog: ((what: string, text: string) => void) | undefined;

const labelFilter = (labels: Labels) =>
  JSON.stringify({ label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) });

const ignoreGone = (err: unknown) => {
  const status = (err as { statusCode?: number }).statusCode;
  if (status === 404 || status === 304) return;
  throw err;
};

export class DockerRuntime implements ContainerRuntime {
  readonly docker: Docker;
  readonly checkpoints: DockerCheckpoints;
  /** How each container frozen by freezeContainer was frozen, for its thaw. */
  private readonly freezes = new Map<string, FreezerFiles | "engine">();

  constructor(
    socketPath = "/var/run/docker.sock",
    options: { onEngineError?: (what: string, text: string) => void; criuDir?: string | null } = {},
  ) {
    this.docker = new Docker({ socketPath });
    this.checkpoints = new DockerCheckpoints(this.docker, { criuDir: options.criuDir ?? null });
    if (options.onEngineError) engineErrorLog = options.onEngineError;
  }

  async engineInfo(): Promise<{ runtimes: string[]; cdiSpecDirs: string[] }> {
    const info = (await this.docker.info()) as { Runtimes?: Record<string, unknown>; CDISpecDirs?: string[] };
    return { runtimes: Object.keys(info.Runtimes ?? {}), cdiSpecDirs: info.CDISpecDirs ?? [] };
  }

  async ping(): Promise<void> {
    await this.docker.ping().catch((e: unknown) => mapError(e, "the Docker engine does not answer"));
  }

  async createNetwork(spec: NetworkSpec): Promise<string> {
    const net = await this.docker
      .createNetwork({
        Name: spec.name,
        Driver: "bridge",
        Internal: spec.internal,
        Labels: spec.labels,
        CheckDuplicate: true,
        ...(spec.subnet ? { IPAM: { Driver: "default", Config: [{ Subnet: spec.subnet }] } } : {}),
        // An internal network still routes to the host's bridge address: without one, no host to reach.
        ...(spec.internal ? { Options: { "com.docker.network.bridge.inhibit_ipv4": "true" } } : {}),
      })
      .catch((e: unknown) => {
        // A subnet someone else took meanwhile: the caller picks another one.
        if (/overlap/i.test(engineText(e)))
          throw new DenvError("conflict", "the network's subnet is in use", {
            details: { subnet_overlap: true },
          });
        return mapError(e, "creating the environment's network");
      });
    return net.id;
  }

  async removeNetwork(nameOrId: string): Promise<void> {
    await this.docker
      .getNetwork(nameOrId)
      .remove()
      .catch(ignoreGone)
      .catch((e: unknown) => mapError(e, "removing the environment's network"));
  }

  async listNetworks(labels: Labels): Promise<ObjectSummary[]> {
    const nets = await this.docker.listNetworks({ filters: labelFilter(labels) });
    return nets.map((n) => ({ id: n.Id, name: n.Name, labels: n.Labels ?? {} }));
  }

  async networkSubnets(): Promise<string[]> {
    const nets = await this.docker.listNetworks();
    return nets.flatMap((n) =>
      (n.IPAM?.Config ?? []).map((c) => c.Subnet ?? "").filter((s) => s.includes(".")),
    );
  }

  async createVolume(spec: VolumeSpec): Promise<void> {
    // A local volume bound to the dataset's directory: the engine copies the image's content at the
    // mount point into it on first use when it is empty, as it does for any named volume.
    await this.docker
      .createVolume({
        Name: spec.name,
        Driver: "local",
        DriverOpts: { type: "none", o: "bind", device: spec.hostPath },
        Labels: spec.labels,
      })
      .catch((e: unknown) => mapError(e, "creating a volume"));
  }

  async removeVolume(name: string): Promise<void> {
    await this.docker
      .getVolume(name)
      .remove()
      .catch(ignoreGone)
      .catch((e: unknown) => mapError(e, "removing a volume"));
  }

  async listVolumes(labels: Labels): Promise<ObjectSummary[]> {
    const res = await this.docker.listVolumes({ filters: labelFilter(labels) });
    return (res.Volumes ?? []).map((v) => ({ id: v.Name, name: v.Name, labels: v.Labels ?? {} }));
  }

  async hasImage(reference: string): Promise<boolean> {
    try {
      await this.docker.getImage(reference).inspect();
      return true;
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return false;
      mapError(err, `looking up image ${reference}`);
    }
  }

  async imageConfig(reference: string): Promise<ImageConfig> {
    const info = await this.docker
      .getImage(reference)
      .inspect()
      .catch((e: unknown) => mapError(e, `looking up image ${reference}`, "the host does not have it"));
    const c = info.Config ?? ({} as Docker.ImageInspectInfo["Config"]);
    const list = (v: unknown) => (Array.isArray(v) && v.length ? (v as string[]) : null);
    return {
      user: c.User || null,
      entrypoint: list(c.Entrypoint),
      cmd: list(c.Cmd),
      envNames: (c.Env ?? []).map((e) => e.split("=")[0] ?? ""),
    };
  }

  async pullImage(reference: string): Promise<void> {
    const stream = await this.docker
      .pull(reference)
      .catch((e: unknown) => mapError(e, `pulling ${reference}`));
    await new Promise<void>((resolve, reject) => {
      this.docker.modem.followProgress(stream, (err: Error | null) => (err ? reject(err) : resolve()));
    }).catch((e: unknown) => mapError(e, `pulling ${reference}`));
  }

  async findImage(labels: Labels): Promise<string | null> {
    const images = await this.docker
      .listImages({ filters: { label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) } })
      .catch((e: unknown) => mapError(e, "listing images"));
    const newest = images.sort((a, b) => b.Created - a.Created)[0];
    return newest?.Id ?? null;
  }

  async listImages(labels: Labels): Promise<string[]> {
    const images = await this.docker
      .listImages({ filters: { label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) } })
      .catch((e: unknown) => mapError(e, "listing images"));
    return images.map((i) => i.Id);
  }

  async removeImage(id: string): Promise<void> {
    // Not forced, and its parent layers pruned: a container using it makes the engine say 409.
    await this.docker
      .getImage(id)
      .remove({ force: false, noprune: false })
      .catch((e: unknown) => mapError(e, `removing image ${id.slice(0, 19)}`));
  }

  async buildImage(
    context: Readable,
    o: BuildOptions,
    onLog: (text: string) => void,
    signal: AbortSignal,
  ): Promise<{ imageId: string }> {
    const stream = (await this.docker
      .buildImage(context, {
        t: o.tag,
        dockerfile: o.dockerfile,
        buildargs: o.args,
        ...(o.target ? { target: o.target } : {}),
        ...(o.cacheFrom.length ? { cachefrom: o.cacheFrom } : {}),
        nocache: o.noCache,
        labels: o.labels,
        networkmode: o.network,
        memory: o.memoryBytes,
        memswap: o.memoryBytes,
        rm: true,
        forcerm: true,
        // The classic builder: it needs no session, and runs no step privileged.
        version: "1",
        abortSignal: signal,
      } as Docker.ImageBuildOptions)
      .catch((e: unknown) => mapError(e, "starting the build"))) as Readable;
    let imageId: string | null = null;
    let failure: string | null = null;
    let pending = "";
    const line = (raw: string) => {
      if (!raw.trim()) return;
      let m: { stream?: string; aux?: { ID?: string }; error?: string; errorDetail?: { message?: string } };
      try {
        m = JSON.parse(raw);
      } catch {
        onLog(`${raw}\n`);
        return;
      }
      if (typeof m.stream === "string") onLog(m.stream);
      if (typeof m.aux?.ID === "string") imageId = m.aux.ID;
      if (m.error || m.errorDetail) {
        failure = String(m.errorDetail?.message ?? m.error);
        onLog(`${failure}\n`);
      }
    };
    try {
      for await (const chunk of stream) {
        pending += (chunk as Buffer).toString("utf8");
        // A line longer than 1 MiB is a build printing without newlines: handed on in pieces.
        if (pending.length > 1024 * 1024 && !pending.includes("\n")) {
          onLog(pending);
          pending = "";
        }
        const parts = pending.split("\n");
        pending = parts.pop() ?? "";
        for (const p of parts) line(p);
      }
      line(pending);
    } catch (err) {
      if (signal.aborted) throw new BuildFailure("the build was stopped");
      mapError(err, "reading the build's output");
    }
    if (failure) throw new BuildFailure(failure);
    if (!imageId) {
      // Older engines say "Successfully built <short id>" only: the tag names the result.
      const info = await this.docker
        .getImage(o.tag)
        .inspect()
        .catch((e: unknown) => mapError(e, `looking up the built image ${o.tag}`));
      imageId = info.Id;
    }
    return { imageId: imageId as string };
  }

  async createContainer(spec: ContainerSpec): Promise<string> {
    const c = await this.docker
      .createContainer(engineCreateOptions(spec))
      .catch((e: unknown) => mapError(e, "creating a container"));
    return c.id;
  }

  async startContainer(id: string): Promise<void> {
    await this.docker
      .getContainer(id)
      .start()
      .catch(ignoreGone)
      .catch((e: unknown) => {
        // The two reasons a user can act on, said in denv's words.
        const text = engineText(e);
        if (/executable file not found|no such file or directory/i.test(text))
          throw new DenvError("invalid_argument", "its command was not found in the image", { cause: e });
        if (/permission denied/i.test(text))
          throw new DenvError("invalid_argument", "its command is not executable in the image", { cause: e });
        return mapError(e, "starting a container");
      });
  }

  async stopContainer(id: string, timeoutMs: number): Promise<void> {
    await this.docker
      .getContainer(id)
      .stop({ t: Math.ceil(timeoutMs / 1000) })
      .catch(ignoreGone)
      .catch((e: unknown) => mapError(e, "stopping a container"));
  }

  async removeContainer(id: string): Promise<void> {
    await this.docker
      .getContainer(id)
      .remove({ force: true, v: false })
      .catch(ignoreGone)
      .catch((e: unknown) => mapError(e, "removing a container"));
  }

  async pauseContainer(id: string): Promise<void> {
    // The cgroup freezer can give up while the container forks quickly (runc: "unable to freeze"),
    // more so on a busy machine; the container is left running then, so trying again is safe.
    for (let attempt = 0; ; attempt++) {
      try {
        await this.docker.getContainer(id).pause();
        return;
      } catch (e) {
        if (attempt >= 5 || !/unable to freeze/i.test(String((e as Error).message)))
          mapError(e, "pausing a container");
        await new Promise((r) => setTimeout(r, 50 * 2 ** attempt));
      }
    }
  }

  async freezeContainer(id: string, pid: number): Promise<void> {
    const f = await findFreezer(pid, id);
    if (f) {
      try {
        await freeze(f);
        this.freezes.set(id, f);
        return;
      } catch {
        // It did not freeze and was thawed again: the engine's pause retries by itself.
      }
    }
    await this.pauseContainer(id);
    this.freezes.set(id, "engine");
  }

  async thawContainer(id: string): Promise<boolean> {
    const how = this.freezes.get(id);
    this.freezes.delete(id);
    if (how === "engine") {
      await this.unpauseContainer(id);
      return true;
    }
    if (how) {
      await thaw(how);
      return true;
    }
    // Not frozen by this process: a kill inside a window left it. (The engine's pause is not ours.)
    const st = await this.inspectContainer(id);
    const f = st.running && !st.paused ? await findFreezer(st.pid, st.id) : null;
    if (!f || !(await isFrozen(f))) return false;
    await thaw(f);
    return true;
  }

  async unpauseContainer(id: string): Promise<void> {
    await this.docker
      .getContainer(id)
      .unpause()
      .catch((e: unknown) => mapError(e, "unpausing a container"));
  }

  async inspectContainer(id: string): Promise<ContainerState> {
    const info = await this.docker
      .getContainer(id)
      .inspect()
      .catch((e: unknown) => mapError(e, "inspecting a container"));
    const addresses: ContainerState["addresses"] = {};
    for (const [name, n] of Object.entries(info.NetworkSettings?.Networks ?? {})) {
      addresses[name] = { ip: n.IPAddress, gateway: n.Gateway, networkId: n.NetworkID ?? "" };
    }
    return {
      id: info.Id,
      name: info.Name.replace(/^\//, ""),
      running: info.State.Running,
      paused: info.State.Paused,
      exitCode: info.State.ExitCode,
      pid: info.State.Pid,
      labels: info.Config.Labels ?? {},
      memoryBytes: info.HostConfig.Memory ?? 0,
      pids: info.HostConfig.PidsLimit ?? 0,
      nanoCpus: info.HostConfig.NanoCpus ?? 0,
      addresses,
      rootfsPath: (info.GraphDriver?.Data as Record<string, string> | undefined)?.MergedDir ?? null,
    };
  }

  async waitContainer(id: string, timeoutMs: number): Promise<{ exitCode: number; timedOut: boolean }> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const st = await this.inspectContainer(id);
      if (!st.running) return { exitCode: st.exitCode, timedOut: false };
      if (Date.now() >= deadline) return { exitCode: -1, timedOut: true };
      await new Promise((r) => setTimeout(r, Math.min(100, Math.max(1, deadline - Date.now()))));
    }
  }

  async containerChanges(id: string): Promise<{ path: string; kind: "changed" | "added" | "deleted" }[]> {
    const c = this.docker.getContainer(id);
    const [list, info] = await Promise.all([c.changes(), c.inspect()]);
    // The engine makes each mount's point (and the folders to it) in the layer: not the service's writes.
    const points = (info.Mounts ?? []).map((m) => m.Destination);
    const mountPoint = (p: string) => points.some((m) => m === p || m.startsWith(`${p}/`));
    return ((list ?? []) as { Path: string; Kind: number }[])
      .filter((x) => !mountPoint(x.Path))
      .map((x) => ({
        path: x.Path,
        kind: x.Kind === 1 ? "added" : x.Kind === 2 ? "deleted" : "changed",
      }));
  }

  async containerLogs(
    id: string,
    options: { tailLines?: number } = {},
  ): Promise<{ stdout: Buffer; stderr: Buffer; combined: Buffer }> {
    const raw = (await this.docker
      .getContainer(id)
      .logs({
        stdout: true,
        stderr: true,
        follow: false,
        ...(options.tailLines === undefined ? {} : { tail: options.tailLines }),
      })
      .catch((e: unknown) => mapError(e, "reading a container's output"))) as unknown as Buffer;
    return demuxOutput(raw);
  }

  containerLogLines(id: string, options: LogOptions): { lines: AsyncIterable<LogEntry>; stop(): void } {
    let source: Readable | null = null;
    let stopped = false;
    const docker = this.docker;
    async function* lines(): AsyncGenerator<LogEntry> {
      const query = {
        stdout: true,
        stderr: true,
        timestamps: true,
        ...(options.tailLines === undefined ? {} : { tail: options.tailLines }),
        // The engine takes whole seconds; the lines of the second before are filtered out here.
        ...(options.sinceMs === undefined ? {} : { since: Math.floor(options.sinceMs / 1000) }),
      };
      const frames = new LogFrames();
      const keep = (e: LogEntry) =>
        options.sinceMs === undefined || !e.time || timeMs(e.time) >= options.sinceMs;
      if (!options.follow) {
        const raw = (await docker
          .getContainer(id)
          .logs({ ...query, follow: false })
          .catch((e: unknown) => mapError(e, "reading a container's output"))) as unknown as Buffer;
        for (const e of frames.push(raw)) if (keep(e)) yield e;
        return;
      }
      source = (await docker
        .getContainer(id)
        .logs({ ...query, follow: true })
        .catch((e: unknown) => mapError(e, "reading a container's output"))) as unknown as Readable;
      if (stopped) source.destroy();
      try {
        for await (const chunk of source) for (const e of frames.push(chunk as Buffer)) if (keep(e)) yield e;
      } catch (err) {
        if (!stopped) throw err;
      }
    }
    return {
      lines: lines(),
      stop: () => {
        stopped = true;
        source?.destroy();
      },
    };
  }

  async listContainers(labels: Labels): Promise<ObjectSummary[]> {
    const list = await this.docker.listContainers({ all: true, filters: labelFilter(labels) });
    return list.map((c) => ({
      id: c.Id,
      name: (c.Names[0] ?? "").replace(/^\//, ""),
      labels: c.Labels ?? {},
    }));
  }

  async exec(id: string, options: RawExecOptions): Promise<{ exitCode: number }> {
    const container = this.docker.getContainer(id);
    const hasStdin = options.stdin !== undefined && options.stdin !== null;
    const exec = await container
      .exec({
        Cmd: options.cmd,
        AttachStdout: true,
        AttachStderr: true,
        AttachStdin: hasStdin,
        ...(options.user ? { User: options.user } : {}),
        ...(options.workingDir ? { WorkingDir: options.workingDir } : {}),
        Env: Object.entries(options.env ?? {}).map(([k, v]) => `${k}=${v}`),
      })
      .catch((e: unknown) => mapError(e, "running a command in the service"));
    const stream = (await exec
      .start({ hijack: true, stdin: hasStdin })
      .catch((e: unknown) => mapError(e, "running a command in the service"))) as NodeJS.ReadWriteStream &
      Readable;
    if (options.onPid) {
      // The engine fills in the exec's PID a moment after start; poll briefly for it.
      void (async () => {
        for (let i = 0; i < 50; i++) {
          const info = await exec.inspect().catch(() => null);
          if (info?.Pid) return options.onPid?.(info.Pid);
          if (info && !info.Running && i > 0) return;
          await new Promise((r) => setTimeout(r, 20));
        }
      })();
    }
    const stdout = new PassThrough().on("data", options.onStdout);
    const stderr = new PassThrough().on("data", options.onStderr);
    this.docker.modem.demuxStream(stream, stdout, stderr);
    const ended = new Promise<void>((resolve, reject) => {
      stream.on("end", resolve).on("close", resolve).on("error", reject);
    });
    if (hasStdin) {
      const input = options.stdin as Buffer | Readable;
      if (Buffer.isBuffer(input)) stream.end(input);
      else input.pipe(stream);
    }
    await ended;
    const info = await exec.inspect().catch((e: unknown) => mapError(e, "running a command in the service"));
    return { exitCode: info.ExitCode ?? -1 };
  }

  async putArchive(id: string, path: string, tar: Readable): Promise<void> {
    // noOverwriteDirNonDir: the engine refuses to replace a directory with a file (or the other
    // way round) instead of silently removing what was there.
    await this.docker
      .getContainer(id)
      .putArchive(tar, { path, noOverwriteDirNonDir: "true" })
      .catch((e: unknown) => {
        const text = String(
          (e as { json?: { message?: string } }).json?.message ?? (e as Error).message ?? "",
        );
        const m = /cannot overwrite (non-)?directory "([^"]*)"/.exec(text);
        if (m)
          throw new DenvError(
            m[1] ? "not_a_directory" : "is_directory",
            m[1]
              ? `${m[2]} is a file; a directory cannot replace it`
              : `${m[2]} is a directory; a file cannot replace it`,
          );
        return mapError(e, `writing files to ${path}`, "the directory does not exist in the service");
      });
  }

  async statPath(id: string, path: string): Promise<PathStat | null> {
    const res = (await this.docker
      .getContainer(id)
      .infoArchive({ path })
      .catch((e: unknown) => {
        if ((e as { statusCode?: number }).statusCode === 404) return null;
        return mapError(e, `reading ${path}`, "no such path in the service");
      })) as (Readable & { headers?: Record<string, string> }) | null;
    if (!res) return null;
    res.resume?.();
    const header = res.headers?.["x-docker-container-path-stat"];
    if (!header) return null;
    const stat = JSON.parse(Buffer.from(header, "base64").toString("utf8")) as {
      name: string;
      mode: number;
      linkTarget: string;
    };
    return { name: stat.name, mode: stat.mode, linkTarget: stat.linkTarget };
  }

  async getArchive(id: string, path: string): Promise<Readable> {
    return (await this.docker
      .getContainer(id)
      .getArchive({ path })
      .catch((e: unknown) => mapError(e, `reading ${path}`, "no such path in the service"))) as Readable;
  }
}

export { timeMs } from "./log-frames.ts";
