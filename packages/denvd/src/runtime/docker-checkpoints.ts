/**
 * Process checkpoints of Docker's containers (live versions): CRIU through runc, the engine's own
 * runtime. A checkpoint is taken by runc directly, not through the engine's checkpoint call: that
 * one pauses the container itself and refuses one already frozen, while a live snapshot dumps
 * every service inside the one window in which the whole stack is frozen (runc leaves a frozen
 * container frozen). A restore goes through the engine (`start` with a checkpoint, its
 * experimental mode), so the engine, containerd and the container's record agree on what runs.
 * The engine takes a restore's images only from the container's own directory: they are copied in.
 *
 * The writable layer is read and written as the overlay2 driver's upper directory: a restored
 * process expects the files it had open in its container's own layer (a socket's directory, a
 * pid file, a log), and the new container's layer is empty until it is filled before its start.
 */

import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DenvError } from "@denv/protocol";
import type Docker from "dockerode";
import { runHostCommand } from "../host/host-command.ts";
import type { CheckpointPort } from "./container-runtime.ts";
import { ADDRESS_LIST, addressLines } from "./restored-addresses.ts";

/** runc's state for the engine's containers (dockerd's exec root, its runtime, its namespace). */
const DEFAULT_RUNC_ROOT = "/run/docker/runtime-runc/moby";
/** The name every restore is started from, in the container's own checkpoints directory. */
const RESTORE_NAME = "denv-live";
/** A suspended container's own checkpoint (pause that keeps memory). */
const SUSPEND_NAME = "denv-pause";
/** A start refused because containerd still holds the same checkpoint: tried this often, this far apart. */
const START_TRIES = 5;
const START_RETRY_MS = 1000;
const DUMP_TIMEOUT_MS = 120_000;
/** Marks denv's rules in the engine's DOCKER-USER chain (admitRestoredAddresses). */
const RULE_COMMENT = "denv-live-restored";
/** Where scripts/ensure-criu.sh puts its bundle (DENVD_CRIU_DIR names another). */
const DEFAULT_CRIU_DIR = "/var/lib/denv-host/criu/bin";

/** What the bundle's wrapper preloads into CRIU where it was built (packages/denvd/criu). */
const LIMITS_LIBRARY = "denv-criu-limits.so";

function defaultCriuDir(): string | null {
  const dir = process.env.DENVD_CRIU_DIR ?? DEFAULT_CRIU_DIR;
  return existsSync(join(dir, "criu")) ? dir : null;
}

export interface DockerCheckpointOptions {
  /** Where runc keeps the engine's containers (default dockerd's). */
  runcRoot?: string;
  /** A directory holding the `criu` runc should run (prepended to its PATH); default the bundle's, else PATH's. */
  criuDir?: string | null;
}

export class DockerCheckpoints implements CheckpointPort {
  private readonly docker: Docker;
  private readonly runcRoot: string;
  private readonly criuDir: string | null;
  private rootDir: Promise<string> | null = null;
  /** Networks whose rule is being added now: forks restoring at once add it once. */
  private readonly admitting = new Map<string, Promise<void>>();

  constructor(docker: Docker, options: DockerCheckpointOptions = {}) {
    this.docker = docker;
    this.runcRoot = options.runcRoot ?? DEFAULT_RUNC_ROOT;
    this.criuDir = options.criuDir ?? defaultCriuDir();
  }

  private env(): Record<string, string> {
    const env = Object.fromEntries(
      Object.entries(process.env).filter((e): e is [string, string] => typeof e[1] === "string"),
    );
    const path = env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin";
    return { ...env, PATH: this.criuDir ? `${this.criuDir}:${path}` : path };
  }

  readsLimitsFromProc(): boolean {
    return this.criuDir !== null && existsSync(join(this.criuDir, "..", "lib", LIMITS_LIBRARY));
  }

  async unavailable(): Promise<string | null> {
    const info = (await this.docker.info()) as { ExperimentalBuild?: boolean; Driver?: string };
    if (!info.ExperimentalBuild)
      return "the Docker engine restores checkpoints only in its experimental mode (dockerd --experimental, as scripts/setup-host.sh starts it)";
    if (info.Driver !== "overlay2")
      return `the Docker engine's storage driver is ${info.Driver}; a live version carries containers' layers from overlay2 only`;
    const criu = await runHostCommand("criu", ["--version"], { timeoutMs: 10_000, env: this.env() }).catch(
      () => null,
    );
    if (criu?.exitCode !== 0)
      return "no criu on this host (scripts/ensure-criu.sh installs one; DENVD_CRIU_DIR names its directory)";
    const runc = await stat(this.runcRoot).catch(() => null);
    if (!runc?.isDirectory()) return `runc keeps no containers in ${this.runcRoot}`;
    return null;
  }

  async checkpoint(id: string, dir: string): Promise<{ ms: number; bytes: number }> {
    const begun = performance.now();
    const images = join(dir, "images");
    const work = join(dir, "work");
    await mkdir(images, { recursive: true, mode: 0o700 });
    await mkdir(work, { recursive: true, mode: 0o700 });
    await writeFile(join(images, ADDRESS_LIST), await this.addresses(id), { mode: 0o600 });
    const r = await runHostCommand(
      "runc",
      [
        "--root",
        this.runcRoot,
        "checkpoint",
        "--leave-running",
        "--image-path",
        images,
        "--work-path",
        work,
        id,
      ],
      { timeoutMs: DUMP_TIMEOUT_MS, env: this.env() },
    );
    if (r.exitCode !== 0 || r.timedOut) {
      const log = await dumpLogTail(join(work, "dump.log"));
      throw new DenvError(
        "not_supported",
        `CRIU could not checkpoint it: ${log || r.stderr.trim().split("\n").slice(-2).join(" | ") || `runc exited ${r.exitCode}`}`,
      );
    }
    return { ms: Math.round(performance.now() - begun), bytes: await dirBytes(images) };
  }

  async saveLayer(id: string, file: string): Promise<{ bytes: number }> {
    const upper = await this.upperDir(id);
    // Taken while the container is frozen: the tree cannot change under tar. Sockets are left out
    // (tar skips them); a restored process binds its own again. Whiteouts and opaque directories
    // (character devices, trusted.overlay.* attributes) travel as they are.
    const r = await runHostCommand(
      "tar",
      ["-C", upper, "--numeric-owner", "--xattrs", "--xattrs-include=trusted.overlay.*", "-cf", file, "."],
      { timeoutMs: DUMP_TIMEOUT_MS },
    );
    if (r.exitCode !== 0 && r.exitCode !== 1)
      throw new DenvError("storage_error", `saving ${id.slice(0, 12)}'s layer failed: ${r.stderr.trim()}`);
    return { bytes: (await stat(file)).size };
  }

  async loadLayer(id: string, file: string): Promise<void> {
    const upper = await this.upperDir(id);
    const r = await runHostCommand(
      "tar",
      ["-C", upper, "--numeric-owner", "--xattrs", "--xattrs-include=trusted.overlay.*", "-xpf", file],
      { timeoutMs: DUMP_TIMEOUT_MS },
    );
    if (r.exitCode !== 0)
      throw new DenvError("storage_error", `restoring ${id.slice(0, 12)}'s layer failed: ${r.stderr.trim()}`);
  }

  async startFrom(id: string, dir: string): Promise<void> {
    const target = join(await this.containerDir(id), "checkpoints", RESTORE_NAME);
    await rm(target, { recursive: true, force: true });
    await mkdir(join(target, ".."), { recursive: true, mode: 0o700 });
    // Linked where the engine's directory is on the same filesystem (CRIU only reads the images),
    // copied where it is not.
    const copy = (how: string) =>
      runHostCommand("cp", [how, join(dir, "images"), target], { timeoutMs: DUMP_TIMEOUT_MS });
    let cp = await copy("-al");
    if (cp.exitCode !== 0) {
      await rm(target, { recursive: true, force: true });
      cp = await copy("-a");
    }
    if (cp.exitCode !== 0)
      throw new DenvError("storage_error", `copying the checkpoint failed: ${cp.stderr}`);
    try {
      await this.startChecked(id, target, RESTORE_NAME, "restore");
    } finally {
      await rm(target, { recursive: true, force: true });
    }
  }

  /**
   * The engine's start from a checkpoint in the container's directory. The engine hands the
   * directory to containerd as a tar in its content store, and a tar containerd already holds
   * (forks of one version started at once; a checkpoint the engine just took, not yet collected)
   * is refused as existing: each start's tar is made its own by a file naming the container and
   * the moment, which CRIU does not read. Should it still collide, it is tried again as the
   * engine's collector frees the other (a few times, a second apart).
   */
  private async startChecked(id: string, dir: string, name: string, what: string): Promise<void> {
    await writeFile(join(dir, "denv-start"), `${id} ${Date.now()} ${randomBytes(8).toString("hex")}\n`);
    for (let tries = 1; ; tries++) {
      try {
        // The checkpoint is a query parameter; an empty body (the engine refuses a start with one).
        await this.docker.getContainer(id).start({ _query: { checkpoint: name }, _body: {} } as object);
        return;
      } catch (err) {
        const said = (err as { json?: { message?: string } }).json?.message ?? String(err);
        if (/already exists/.test(said) && tries < START_TRIES) {
          await new Promise((r) => setTimeout(r, START_RETRY_MS));
          continue;
        }
        throw engineFailure(what, err);
      }
    }
  }

  async suspend(id: string): Promise<{ ms: number; bytes: number }> {
    const begun = performance.now();
    // Read while it runs: its network namespace goes with its stop, and its start may get others.
    const addresses = await this.addresses(id);
    const endpoints = await this.endpoints(id);
    // The engine's own checkpoint, stopping the container: it records the stop as its own (no
    // restart policy starts it again) and keeps the images where its start takes them from.
    await new Promise<void>((resolve, reject) =>
      this.docker.modem.dial(
        {
          path: `/containers/${encodeURIComponent(id)}/checkpoints`,
          method: "POST",
          options: { CheckpointID: SUSPEND_NAME, Exit: true },
          statusCodes: { 200: true, 201: true, 204: true, 404: "no such container", 500: "server error" },
        },
        (err: unknown) => (err ? reject(engineFailure("suspend", err)) : resolve()),
      ),
    );
    await this.pinAddresses(id, endpoints).catch(async (err: unknown) => {
      // Left without a network it cannot stay paused: it runs again from its checkpoint.
      await this.unsuspend(id).catch(() => {});
      throw engineFailure("suspend", err);
    });
    const dir = join(await this.containerDir(id), "checkpoints", SUSPEND_NAME);
    await writeFile(join(dir, ADDRESS_LIST), addresses, { mode: 0o600 });
    const bytes = await dirBytes(dir).catch(() => 0);
    return { ms: Math.round(performance.now() - begun), bytes };
  }

  /**
   * The engine drops what enters a network's bridge from outside its subnet (its isolation rules
   * for an internal network), which a restored connection's packets are: they carry the parent's
   * addresses. One rule in DOCKER-USER, which the engine runs first, accepts what enters and
   * leaves by this network's own bridge (never anything bound elsewhere: no way out is opened).
   * Rules of bridges gone since are removed on the way. Without the engine's chain (its iptables
   * off) nothing drops them, and nothing is added.
   */
  admitRestoredAddresses(network: string): Promise<void> {
    let done = this.admitting.get(network);
    if (!done) {
      done = this.admitBridge(network);
      this.admitting.set(network, done);
      // Forgotten once settled (a later call finds the rule with -C): nothing kept per fork.
      done.then(
        () => this.admitting.delete(network),
        () => this.admitting.delete(network),
      );
    }
    return done;
  }

  private async admitBridge(network: string): Promise<void> {
    const net = (await this.docker.getNetwork(network).inspect()) as {
      Id: string;
      Options?: Record<string, string>;
    };
    const bridge = net.Options?.["com.docker.network.bridge.name"] ?? `br-${net.Id.slice(0, 12)}`;
    const iptables = (args: string[]) => runHostCommand("iptables", ["-w", ...args], { timeoutMs: 30_000 });
    const listed = await iptables(["-S", "DOCKER-USER"]);
    if (listed.exitCode !== 0) return;
    for (const rule of listed.stdout.split("\n")) {
      const iface = new RegExp(`^-A DOCKER-USER -i (\\S+) -o \\S+ .*${RULE_COMMENT}`).exec(rule)?.[1];
      if (iface && iface !== bridge && !existsSync(`/sys/class/net/${iface}`))
        await iptables([
          "-D",
          ...rule
            .replace(/^-A /, "")
            .split(" ")
            .map((a) => a.replace(/^"|"$/g, "")),
        ]);
    }
    const mine = [
      "DOCKER-USER",
      "-i",
      bridge,
      "-o",
      bridge,
      "-m",
      "comment",
      "--comment",
      RULE_COMMENT,
      "-j",
      "ACCEPT",
    ];
    if ((await iptables(["-C", ...mine])).exitCode === 0) return;
    const added = await iptables(["-I", ...mine]);
    if (added.exitCode !== 0)
      throw new DenvError(
        "engine_error",
        `admitting restored addresses on ${bridge} failed: ${added.stderr.trim()}`,
      );
  }

  /** The container's endpoints on its networks, as the engine has them while it runs. */
  private async endpoints(id: string): Promise<Record<string, Endpoint>> {
    const c = (await this.docker.getContainer(id).inspect()) as {
      NetworkSettings?: { Networks?: Record<string, Endpoint> };
    };
    return c.NetworkSettings?.Networks ?? {};
  }

  /**
   * A stopped container's addresses are the engine's to give again, lowest free first, in the
   * order its containers start: services that came up in another order (those that depend on
   * none start together) would swap addresses at a resume, and each restored process adds back
   * its old one (the action script), so two containers would answer for one address and a
   * service's name would lead to another's (a refused connect). Each is reconnected with the
   * address it had as its own, which its start takes again. A reconnect the engine refuses
   * leaves it connected as before, with its names, to take whichever address it is given.
   */
  private async pinAddresses(id: string, endpoints: Record<string, Endpoint>): Promise<void> {
    const short = id.slice(0, 12);
    for (const [network, ep] of Object.entries(endpoints)) {
      if (!ep.IPAddress || ep.IPAMConfig?.IPv4Address === ep.IPAddress) continue;
      const config = {
        Aliases: (ep.Aliases ?? []).filter((a) => a !== short),
        Links: ep.Links ?? undefined,
        DriverOpts: ep.DriverOpts ?? undefined,
      };
      const net = this.docker.getNetwork(network);
      await net.disconnect({ Container: id, Force: true });
      try {
        await net.connect({
          Container: id,
          EndpointConfig: { ...config, IPAMConfig: { ...ep.IPAMConfig, IPv4Address: ep.IPAddress } },
        });
      } catch {
        await net.connect({ Container: id, EndpointConfig: config });
      }
    }
  }

  /** The container's IPv4 addresses, as its network namespace has them, in the list's shape. */
  private async addresses(id: string): Promise<string> {
    const c = (await this.docker.getContainer(id).inspect()) as { State?: { Pid?: number } };
    const pid = c.State?.Pid;
    if (!pid) return "";
    const inNs = (args: string[]) =>
      runHostCommand("nsenter", ["-t", String(pid), "-n", "ip", "-4", ...args], { timeoutMs: 10_000 });
    const [addrs, routes] = await Promise.all([
      inNs(["-o", "addr", "show", "scope", "global"]),
      inNs(["route", "show", "scope", "link"]),
    ]);
    return addrs.exitCode === 0 ? addressLines(addrs.stdout, routes.exitCode === 0 ? routes.stdout : "") : "";
  }

  async unsuspend(id: string): Promise<void> {
    const dir = join(await this.containerDir(id), "checkpoints", SUSPEND_NAME);
    await this.startChecked(id, dir, SUSPEND_NAME, "resume");
    await rm(dir, { recursive: true, force: true });
  }

  private async upperDir(id: string): Promise<string> {
    const c = (await this.docker.getContainer(id).inspect()) as {
      GraphDriver?: { Name?: string; Data?: Record<string, string> };
    };
    const upper = c.GraphDriver?.Data?.UpperDir;
    if (c.GraphDriver?.Name !== "overlay2" || !upper)
      throw new DenvError("not_supported", `container ${id.slice(0, 12)} is not on overlay2`);
    return upper;
  }

  private async containerDir(id: string): Promise<string> {
    this.rootDir ??= this.docker.info().then((i) => (i as { DockerRootDir: string }).DockerRootDir);
    const full = ((await this.docker.getContainer(id).inspect()) as { Id: string }).Id;
    return join(await this.rootDir, "containers", full);
  }
}

/** A container's endpoint on one network, as the engine's inspect gives it. */
interface Endpoint {
  IPAddress?: string;
  IPAMConfig?: { IPv4Address?: string; IPv6Address?: string } | null;
  Aliases?: string[] | null;
  Links?: string[] | null;
  DriverOpts?: Record<string, string> | null;
}

/** The engine's refusal, in its words (CRIU's log lines among them). */
function engineFailure(what: string, err: unknown): DenvError {
  const said =
    (err as { json?: { message?: string } }).json?.message ?? String((err as Error).message ?? err);
  return new DenvError("service_failed", `CRIU could not ${what} it: ${said.slice(-600)}`, { cause: err });
}

/** The error lines at the end of CRIU's log: what it could not take, in its words. */
async function dumpLogTail(path: string): Promise<string> {
  const text = await readFile(path, "utf8").catch(() => "");
  const errors = text.split("\n").filter((l) => /Error|error|Can't|Unable/.test(l));
  return errors
    .slice(-3)
    .map((l) => l.replace(/^\(\d+\.\d+\)\s*/, "").trim())
    .join(" | ")
    .slice(0, 600);
}

async function dirBytes(dir: string): Promise<number> {
  let total = 0;
  for (const e of await readdir(dir, { withFileTypes: true }))
    if (e.isFile()) total += (await stat(join(dir, e.name))).size;
  return total;
}
