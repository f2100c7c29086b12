/**
 * What every hosted sandbox provider's target shares (E2B, Daytona): one container per
 * environment with one service (`main`), recorded in the store as an environment whose stack is
 * the provider's sandbox id. A driver gives three primitives (run a shell line as a user, write a
 * stream to a path, read a path as a stream) and this class builds the rest of the environment's
 * I/O on them: output limits, files as tars staged in the sandbox and unpacked by its own `tar`,
 * stat, list, mkdir, remove and rename by its own coreutils. So each provider's driver is only what
 * differs: its SDK, its errors and its row.
 */
import { randomBytes } from "node:crypto";
import { Readable, Transform } from "node:stream";
import { DenvError } from "@denv/protocol";
import { newId, now } from "../ids.ts";
import { refusalIn } from "../outbound-guard.ts";
import { environmentNamed, insertEnvironment } from "../store/environment-store.ts";
import type { Store } from "../store/open-store.ts";
import { sandboxProject } from "../store/project-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import { resolveVersionRef } from "../store/version-store.ts";
import {
  type ExecOutcome,
  type ExecRequest,
  type FsEntry,
  HOSTED_SERVICE,
  type ImageSandboxSpec,
  type LogLines,
  type MadeEnvironment,
  type OutputSink,
  type PlacedEnvironment,
  type SandboxSpec,
  type ServicePath,
  type Target,
  type TargetCapabilities,
  type TargetKind,
  type TargetSnapshot,
  type TargetStatus,
} from "./target.ts";

/** How long a command may run when the request names no timeout. */
export const DEFAULT_COMMAND_TIMEOUT_MS = 24 * 60 * 60_000;

export const shellQuote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
export const commandLine = (c: string | string[]) =>
  typeof c === "string" ? c : c.map(shellQuote).join(" ");

/** A provider's answer, in denv's words: what failed, at which target and provider, and why. */
export function providerError(target: string, provider: string, what: string, err: unknown): DenvError {
  if (err instanceof DenvError) return err;
  // A connection the fetch policy refused (a redirect, a URL from an answer): said as it is.
  const refused = refusalIn(err);
  if (refused) return refused;
  const message = (err as Error)?.message ?? String(err);
  const name = (err as Error)?.name ?? "";
  const code = /NotFound/.test(name)
    ? "not_found"
    : /Authentication|Authorization/.test(name)
      ? "invalid_argument"
      : /Timeout/.test(name)
        ? "timeout"
        : "unavailable";
  return new DenvError(code, `${what} on target ${target} (${provider}) failed: ${message.slice(0, 500)}`);
}

/** A provider's sandbox id is kept and sent back in paths and headers: only one that looks like an id. */
export const SANDBOX_ID = /^[A-Za-z0-9_-]{1,128}$/;

/**
 * A provider's snapshot id, kept in a version and sent back to create forks and to delete it: an id
 * with a namespace and a tag at most (E2B's `team/name:tag`), never a path that climbs.
 */
export const SNAPSHOT_REF =
  /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}(\/[A-Za-z0-9][A-Za-z0-9_.-]{0,127})?(:[A-Za-z0-9][A-Za-z0-9_.-]{0,127})?$/;

/** How a run of a shell line ended. */
export interface RunEnd {
  exitCode: number;
  timedOut: boolean;
}

export abstract class HostedSandboxTarget implements Target {
  readonly name: string;
  abstract readonly kind: TargetKind;
  /** The provider in words, for messages. */
  protected abstract readonly provider: string;
  /** What one sandbox is at this provider, in words ("VM", "container"). */
  protected abstract readonly sandboxWord: string;
  protected readonly store: Store;

  constructor(name: string, store: Store) {
    this.name = name;
    this.store = store;
  }

  abstract capabilities(teamId: string): Promise<TargetCapabilities>;

  /** Always available to take work (the provider answers or not at the call); untested live, said so. */
  async status(): Promise<TargetStatus> {
    const p = this.provider;
    return {
      available: true,
      hosts: null,
      note: `${p} driver: tested against a local double of ${p}'s published API, not against the live ${p}`,
    };
  }
  /** Whether the key is taken: the cheapest call that needs it. */
  abstract checkKey(): Promise<void>;
  /** Makes the sandbox at the provider; answers its id, its paths made and the user's. */
  protected abstract makeSandbox(teamId: string, name: string, spec: ImageSandboxSpec): Promise<string>;
  /** Starts a command in the background (a sandbox's `cmd`); no user: the sandbox's own. */
  protected abstract startBackground(
    sandboxId: string,
    line: string,
    user: string | undefined,
  ): Promise<void>;
  /** Ends the sandbox at the provider; one already gone is gone. */
  protected abstract killSandbox(sandboxId: string): Promise<void>;
  /**
   * Runs a shell line as the user (none: the sandbox's own), handing output on as it comes; never
   * throws for its exit code.
   */
  protected abstract run(
    env: PlacedEnvironment,
    line: string,
    opts: { user?: string; cwd?: string; env: Record<string, string>; timeoutMs: number },
    onOutput: (which: "stdout" | "stderr", chunk: Buffer) => void,
  ): Promise<RunEnd>;
  /** Writes a stream to a path in the sandbox, as the user. */
  protected abstract upload(
    env: PlacedEnvironment,
    path: string,
    user: string | undefined,
    body: Readable,
  ): Promise<void>;
  /** A path in the sandbox as a stream, read as the user. */
  protected abstract download(
    env: PlacedEnvironment,
    path: string,
    user: string | undefined,
  ): Promise<Readable>;

  /**
   * Takes a snapshot of the sandbox at the provider, for forks; its id there. A provider with no
   * snapshot primitive denv drives keeps this refusal (its row says so, and callers read it first).
   */
  protected snapshotSandbox(_sandboxId: string): Promise<string> {
    return Promise.reject(
      new DenvError(
        "not_supported",
        `target ${this.name} (${this.provider}) has no snapshot denv drives (GET /v1/targets shows its row)`,
      ),
    );
  }
  /** Makes a sandbox from a snapshot snapshotSandbox took; answers its id, as makeSandbox does. */
  protected sandboxFromSnapshot(_teamId: string, _name: string, _ref: string): Promise<string> {
    return Promise.reject(
      new DenvError("not_supported", `target ${this.name} (${this.provider}) cannot fork a snapshot`),
    );
  }
  /** Deletes a snapshot at the provider; one already gone is gone. */
  protected removeSnapshot(_ref: string): Promise<void> {
    return Promise.reject(
      new DenvError("not_supported", `target ${this.name} (${this.provider}) has no snapshots to delete`),
    );
  }

  /** A snapshot of the environment's sandbox, with the provider's id of it checked. */
  async snapshot(env: PlacedEnvironment): Promise<TargetSnapshot> {
    if (!env.stackId)
      throw new DenvError("conflict", `environment ${env.name} has no sandbox on ${this.name}`);
    const begun = performance.now();
    let ref: string;
    try {
      ref = await this.snapshotSandbox(env.stackId);
    } catch (err) {
      throw this.fail(`a snapshot of sandbox ${env.stackId}`, err);
    }
    if (typeof ref !== "string" || !SNAPSHOT_REF.test(ref))
      throw new DenvError(
        "unavailable",
        `target ${this.name} (${this.provider}) answered a snapshot id that is not one: ${JSON.stringify(String(ref).slice(0, 60))}`,
      );
    return {
      ref,
      evidence: {
        target: this.name,
        provider: this.provider,
        sandbox_id: env.stackId,
        snapshot_ref: ref,
        ms: Math.round(performance.now() - begun),
      },
    };
  }

  /** Deletes a version's snapshot at the provider. */
  async deleteSnapshot(ref: string): Promise<void> {
    // Only ever a ref this target answered and denv checked; anything else is not sent on.
    if (!SNAPSHOT_REF.test(ref))
      throw new DenvError(
        "conflict",
        `the recorded snapshot id ${JSON.stringify(ref.slice(0, 60))} is not one`,
      );
    try {
      await this.removeSnapshot(ref);
    } catch (err) {
      throw this.fail(`deleting snapshot ${ref}`, err);
    }
  }

  protected fail(what: string, err: unknown): DenvError {
    return providerError(this.name, this.provider, what, err);
  }

  async createSandbox(teamId: string, spec: SandboxSpec): Promise<MadeEnvironment> {
    if ("fromVersion" in spec) return this.forkVersion(teamId, spec.fromVersion, spec.name);
    if (spec.ports?.length)
      throw new DenvError(
        "not_supported",
        `target ${this.name} (${this.provider}): port URLs are not available on hosted targets yet`,
      );
    const project = await sandboxProject(this.store, teamId);
    const name = spec.name ?? `sbx-${randomBytes(4).toString("hex")}`;
    if (await environmentNamed(this.store, project.id, name))
      throw new DenvError("conflict", `an environment named ${name} already exists`);
    const sandboxId = await this.checkedId(await this.makeSandbox(teamId, name, spec));
    try {
      if (spec.cmd?.length) await this.startBackground(sandboxId, commandLine(spec.cmd), spec.user);
      return await this.record(teamId, project.id, name, sandboxId, null, true);
    } catch (err) {
      await this.killSandbox(sandboxId).catch(() => {});
      throw this.fail(`starting ${commandLine(spec.cmd ?? [])}`, err);
    }
  }

  /**
   * The one service of a project's compose file as a sandbox (a deploy's prepare phase on this
   * target): made from its pinned image with its variables, its user and its volumes' paths, and
   * egress as the file says. Nothing is recorded here: the deploy records the environment, and ends
   * the sandbox (killService) when a later phase fails.
   */
  async deployService(teamId: string, envName: string, spec: ImageSandboxSpec): Promise<string> {
    let made: string;
    try {
      made = await this.makeSandbox(teamId, envName, spec);
    } catch (err) {
      throw this.fail(`creating a sandbox from ${spec.image}`, err);
    }
    return this.checkedId(made);
  }

  /** Starts a deployed service's command in its sandbox, in the background. */
  async startService(sandboxId: string, command: string[], user: string | undefined): Promise<void> {
    try {
      await this.startBackground(sandboxId, commandLine(command), user);
    } catch (err) {
      throw this.fail(`starting ${commandLine(command)}`, err);
    }
  }

  /** Ends a deployed service's sandbox; one already gone is gone. */
  async killService(sandboxId: string): Promise<void> {
    try {
      await this.killSandbox(sandboxId);
    } catch (err) {
      throw this.fail(`ending sandbox ${sandboxId}`, err);
    }
  }

  /**
   * A fork of a version this target holds (a snapshot of one of its sandboxes): a new sandbox
   * from the snapshot, an environment of the version's project whose parent is the version.
   */
  async forkVersion(teamId: string, versionId: string, name: string | undefined, sandbox = true) {
    const v = await resolveVersionRef(this.store, teamId, versionId);
    if (v.target_id !== this.name || !v.snapshot_ref)
      throw new DenvError(
        "invalid_argument",
        `target ${this.name} (${this.provider}) cannot fork ${v.id}: it lives on ${v.target_id === "denvd" ? "a denvd host" : `target ${v.target_id}`}; fork it there, or create a sandbox from an image here`,
      );
    const forkName = name ?? `sbx-${randomBytes(4).toString("hex")}`;
    if (await environmentNamed(this.store, v.project_id, forkName))
      throw new DenvError("conflict", `an environment named ${forkName} already exists`);
    let made: string;
    try {
      made = await this.sandboxFromSnapshot(teamId, forkName, v.snapshot_ref);
    } catch (err) {
      throw this.fail(`a fork of ${v.id} (snapshot ${v.snapshot_ref})`, err);
    }
    const sandboxId = await this.checkedId(made);
    try {
      return await this.record(teamId, v.project_id, forkName, sandboxId, v.id, sandbox);
    } catch (err) {
      await this.killSandbox(sandboxId).catch(() => {});
      throw err;
    }
  }

  /** The id a provider answered, when it is one; else the sandbox is ended and the answer refused. */
  private async checkedId(sandboxId: string): Promise<string> {
    if (SANDBOX_ID.test(sandboxId)) return sandboxId;
    await this.killSandbox(sandboxId).catch(() => {});
    throw new DenvError(
      "unavailable",
      `target ${this.name} (${this.provider}) answered a sandbox id that is not one: ${JSON.stringify(sandboxId.slice(0, 40))}`,
    );
  }

  /** The environment a sandbox serves, recorded; a fork's version is its current and parent one. */
  private async record(
    teamId: string,
    projectId: string,
    name: string,
    sandboxId: string,
    versionId: string | null,
    sandbox: boolean,
  ): Promise<MadeEnvironment> {
    const env: EnvironmentsTable = {
      id: newId("env"),
      team_id: teamId,
      project_id: projectId,
      name,
      status: "running",
      host_id: null,
      // On a hosted target the provider's sandbox: what serves the environment now.
      stack_id: sandboxId,
      current_version_id: versionId,
      parent_version_id: versionId,
      sandbox: sandbox ? 1 : 0,
      target_id: this.name,
      pool_id: null,
      created_at: now(),
    };
    await insertEnvironment(this.store, env);
    return { environmentId: env.id, deploymentId: null };
  }

  /** Kills the sandbox; one already gone is gone. */
  async destroy(env: PlacedEnvironment): Promise<void> {
    if (!env.stackId) return;
    try {
      await this.killSandbox(env.stackId);
    } catch (err) {
      throw this.fail(`destroying sandbox ${env.stackId}`, err);
    }
  }

  protected checkService(env: PlacedEnvironment, service: string | undefined): void {
    if (service !== undefined && service !== HOSTED_SERVICE)
      throw new DenvError(
        "not_found",
        `environment ${env.name} has no service ${JSON.stringify(service.slice(0, 64))}; it has ${HOSTED_SERVICE}`,
      );
  }

  async exec(
    env: PlacedEnvironment,
    req: ExecRequest,
    stdin: Readable | Buffer | null,
    onOutput: OutputSink,
  ): Promise<ExecOutcome> {
    this.checkService(env, req.service);
    if (req.tty)
      throw new DenvError(
        "not_supported",
        `target ${this.name} runs commands without a terminal (exec -t needs a denvd host)`,
      );
    let line = commandLine(req.command);
    if (stdin && !(Buffer.isBuffer(stdin) && stdin.length === 0)) {
      // No provider here takes a command's stdin as it runs: it goes up whole first, staged in the
      // sandbox, and the command reads it from there (removed when the command's shell exits).
      const staged = `/tmp/.denv-stdin-${randomBytes(8).toString("hex")}`;
      try {
        await this.upload(env, staged, req.user, Buffer.isBuffer(stdin) ? Readable.from([stdin]) : stdin);
      } catch (err) {
        throw this.fail("uploading a command's stdin", err);
      }
      line = `trap 'rm -f ${staged}' EXIT; { ${line}
} < ${staged}`;
    }
    const limit = req.maxOutputBytes ?? Number.POSITIVE_INFINITY;
    const kept = { stdout: 0, stderr: 0 };
    const dropped = { stdout: 0, stderr: 0 };
    // Counted per stream and handed on in order; past the limit, counted and dropped.
    let chain = Promise.resolve();
    const take = (which: "stdout" | "stderr", b: Buffer) => {
      const room = Math.max(0, limit - kept[which]);
      const part = b.subarray(0, room);
      kept[which] += part.length;
      dropped[which] += b.length - part.length;
      if (part.length) chain = chain.then(() => onOutput(which, part));
    };
    const started = performance.now();
    const end = await this.run(
      env,
      line,
      {
        ...(req.user ? { user: req.user } : {}),
        ...(req.cwd ? { cwd: req.cwd } : {}),
        env: req.env ?? {},
        timeoutMs: req.timeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS,
      },
      take,
    );
    await chain;
    return {
      exitCode: end.timedOut ? 124 : end.exitCode,
      stdoutTruncated: dropped.stdout > 0,
      stderrTruncated: dropped.stderr > 0,
      stdoutDroppedBytes: dropped.stdout,
      stderrDroppedBytes: dropped.stderr,
      timedOut: end.timedOut,
      durationMs: Math.round(performance.now() - started),
    };
  }

  /** Runs a shell line in the sandbox as the user; its stdout, or the error its stderr names. */
  protected async sh(env: PlacedEnvironment, user: string | undefined, line: string): Promise<string> {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const r = await this.exec(env, { command: line, ...(user ? { user } : {}) }, null, (w, b) => {
      (w === "stdout" ? out : err).push(b);
    });
    const stderr = Buffer.concat(err).toString().trim();
    if (r.exitCode !== 0) {
      const code = /No such file/.test(stderr)
        ? "not_found"
        : /Permission denied/.test(stderr)
          ? "permission_denied"
          : /Is a directory/.test(stderr)
            ? "is_directory"
            : /Not a directory/.test(stderr)
              ? "not_a_directory"
              : /exists|not empty/i.test(stderr)
                ? "conflict"
                : "unavailable";
      throw new DenvError(code, stderr.slice(0, 500) || `exit ${r.exitCode}`);
    }
    return Buffer.concat(out).toString();
  }

  async putFiles(env: PlacedEnvironment, at: ServicePath, tar: Readable) {
    this.checkService(env, at.service);
    // Streamed through as it comes (counted on the way), never held whole in this process.
    let bytes = 0;
    const counted = tar.pipe(
      new Transform({
        transform(chunk: Buffer, _enc, done) {
          bytes += chunk.length;
          done(null, chunk);
        },
      }),
    );
    tar.once("error", (err) => counted.destroy(err));
    const staged = `/tmp/.denv-put-${randomBytes(8).toString("hex")}.tar`;
    try {
      await this.upload(env, staged, at.user, counted);
    } catch (err) {
      throw this.fail(`uploading to ${at.path}`, err);
    }
    const q = shellQuote(at.path);
    const listing = await this.sh(
      env,
      at.user,
      `mkdir -p ${q} && tar -xf ${shellQuote(staged)} -C ${q} --no-same-owner && tar -tf ${shellQuote(staged)}; s=$?; rm -f ${shellQuote(staged)}; exit $s`,
    );
    return { entries: listing.split("\n").filter(Boolean).length, bytes };
  }

  async getFiles(env: PlacedEnvironment, at: ServicePath): Promise<Readable> {
    this.checkService(env, at.service);
    const staged = `/tmp/.denv-get-${randomBytes(8).toString("hex")}.tar`;
    const dir = at.path === "/" ? "/" : at.path.replace(/\/[^/]*$/, "") || "/";
    const base = at.path === "/" ? "." : (at.path.split("/").pop() as string);
    await this.sh(env, at.user, `tar -cf ${shellQuote(staged)} -C ${shellQuote(dir)} -- ${shellQuote(base)}`);
    const cleanUp = () => void this.sh(env, at.user, `rm -f ${shellQuote(staged)}`).catch(() => {});
    try {
      // Streamed as the provider sends it, never held whole in this process.
      const out = await this.download(env, staged, at.user);
      out.once("close", cleanUp);
      return out;
    } catch (err) {
      cleanUp();
      throw this.fail(`downloading ${at.path}`, err);
    }
  }

  private async stats(env: PlacedEnvironment, user: string | undefined, line: string): Promise<FsEntry[]> {
    // One line per path: type, size, mode (octal), uid, gid, owner, group, mtime (s), path, link.
    const out = await this.sh(env, user, line);
    return out
      .split("\n")
      .filter(Boolean)
      .map((l) => {
        const [type, size, mode, uid, gid, owner, group, mtime, path, link] = l.split("\t");
        const p = path ?? "";
        return {
          path: p,
          name: p === "/" ? "/" : (p.split("/").pop() ?? p),
          type:
            type === "directory"
              ? "directory"
              : type === "symbolic link"
                ? "symlink"
                : type?.startsWith("regular")
                  ? "file"
                  : "other",
          size: Number(size),
          mode: Number.parseInt(mode ?? "0", 8),
          uid: Number(uid),
          gid: Number(gid),
          owner: owner === "UNKNOWN" ? null : (owner ?? null),
          group: group === "UNKNOWN" ? null : (group ?? null),
          modified_at: new Date(Number(mtime) * 1000).toISOString(),
          link_target: link ? link : null,
        } satisfies FsEntry;
      });
  }

  private static readonly STAT = `stat -c '%F\t%s\t%a\t%u\t%g\t%U\t%G\t%Y\t%n\t' --`;

  async statPath(env: PlacedEnvironment, at: ServicePath): Promise<FsEntry> {
    this.checkService(env, at.service);
    const [e] = await this.stats(env, at.user, `${HostedSandboxTarget.STAT} ${shellQuote(at.path)}`);
    if (!e) throw new DenvError("not_found", `${at.path} does not exist`);
    if (e.type === "symlink")
      e.link_target = (await this.sh(env, at.user, `readlink -- ${shellQuote(at.path)}`)).trim();
    return e;
  }

  async listPath(env: PlacedEnvironment, at: ServicePath, depth: number): Promise<FsEntry[]> {
    this.checkService(env, at.service);
    const q = shellQuote(at.path);
    const entries = await this.stats(
      env,
      at.user,
      `test -d ${q} || { printf '%s: Not a directory\\n' ${q} >&2; exit 1; }; find ${q} -mindepth 1 -maxdepth ${Math.floor(depth)} -exec ${HostedSandboxTarget.STAT} {} +`,
    );
    return entries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  }

  async makeDir(env: PlacedEnvironment, at: ServicePath, parents: boolean) {
    this.checkService(env, at.service);
    const q = shellQuote(at.path);
    const out = await this.sh(
      env,
      at.user,
      `if test -d ${q}; then echo exists; else mkdir ${parents ? "-p " : ""}-- ${q} && echo made; fi`,
    );
    return { created: out.trim() === "made" };
  }

  async removePath(env: PlacedEnvironment, at: ServicePath, recursive: boolean): Promise<void> {
    this.checkService(env, at.service);
    const q = shellQuote(at.path);
    await this.sh(
      env,
      at.user,
      recursive
        ? `rm -rf -- ${q}`
        : `if test -d ${q} && ! test -L ${q}; then rmdir -- ${q}; else rm -f -- ${q}; fi`,
    );
  }

  async renamePath(env: PlacedEnvironment, at: Omit<ServicePath, "path">, from: string, to: string) {
    this.checkService(env, at.service);
    await this.sh(env, at.user, `mv -T -- ${shellQuote(from)} ${shellQuote(to)}`);
  }

  async logs(env: PlacedEnvironment): Promise<LogLines> {
    throw new DenvError(
      "not_supported",
      `environment ${env.name} runs on target ${this.name} (${this.provider}), which keeps no service logs denv can read: exec a command to read the files its program writes`,
    );
  }

  async stopService(env: PlacedEnvironment): Promise<void> {
    throw new DenvError(
      "not_supported",
      `environment ${env.name} runs on target ${this.name} (${this.provider}), one ${this.sandboxWord} with one service: destroy it instead`,
    );
  }
}
