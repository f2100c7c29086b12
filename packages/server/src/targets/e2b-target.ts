/**
 * E2B as a target, driven through its official TypeScript SDK (`e2b`) with the team's key: a
 * sandbox is one Firecracker VM made from a template, and a template is built from the image the
 * sandbox names (once per image; its name is derived from the image). Commands run through envd's
 * process service, files go as a tar through envd's file upload and a `tar` in the sandbox.
 *
 * Not run against the live E2B: its tests run against a local double of the published API
 * (test/e2e/e2b-double.ts), and the row says so. What E2B has no primitive for here is refused
 * with the reason: several services, a fork of a denv version, verify, stopping a service, port
 * URLs; stdin to a command is not carried yet. Output is text to E2B's SDK (it decodes UTF-8), so
 * bytes that are not UTF-8 arrive replaced.
 */
import { createHash, randomBytes } from "node:crypto";
import { Readable, Transform } from "node:stream";
import { DenvError } from "@denv/protocol";
import { CommandExitError, Sandbox, Template } from "e2b";
import { newId, now } from "../ids.ts";
import { environmentNamed } from "../store/environment-store.ts";
import type { Store } from "../store/open-store.ts";
import { sandboxProject } from "../store/project-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import type {
  ExecOutcome,
  ExecRequest,
  FsEntry,
  MadeEnvironment,
  OutputSink,
  PlacedEnvironment,
  SandboxSpec,
  ServicePath,
  Target,
  TargetCapabilities,
  TargetStatus,
} from "./target.ts";

/** How long E2B keeps a sandbox without a call (its longest for most plans): denv asks for it. */
const SANDBOX_TIMEOUT_MS = 60 * 60_000;
/** How long a command may run when the request names no timeout (E2B's SDK has its own 60 s). */
const DEFAULT_COMMAND_TIMEOUT_MS = 24 * 60 * 60_000;
/** The one service of a hosted sandbox, as environments name their services. */
export const HOSTED_SERVICE = "main";

export interface E2bConnection {
  apiKey: string;
  /** Another endpoint speaking E2B's API (self-hosted E2B, a test's double); null: E2B's own. */
  apiUrl: string | null;
}

const shellQuote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
const commandLine = (c: string | string[]) => (typeof c === "string" ? c : c.map(shellQuote).join(" "));

/** E2B's answer, in denv's words: what failed, at which provider, and why. */
function providerError(target: string, what: string, err: unknown): DenvError {
  if (err instanceof DenvError) return err;
  const message = (err as Error)?.message ?? String(err);
  const name = (err as Error)?.name ?? "";
  const code = /NotFound/.test(name)
    ? "not_found"
    : /Authentication/.test(name)
      ? "invalid_argument"
      : /Timeout/.test(name)
        ? "timeout"
        : "unavailable";
  return new DenvError(code, `${what} on target ${target} (E2B) failed: ${message.slice(0, 500)}`);
}

export class E2bTarget implements Target {
  readonly name: string;
  readonly kind = "e2b" as const;
  private readonly store: Store;
  private readonly conn: E2bConnection;
  /**
   * Sandboxes this process has connected to, so each call is not a connect first: keyed by the
   * account and endpoint as well as the id, since an id comes from whatever endpoint a team named
   * (one of its own could answer another team's sandbox id, and must not be handed that sandbox).
   */
  private static readonly connected = new Map<string, Promise<Sandbox>>();

  constructor(name: string, conn: E2bConnection, store: Store) {
    this.name = name;
    this.conn = conn;
    this.store = store;
  }

  /** The cache's key of a sandbox of this account at this endpoint. */
  private cacheKey(sandboxId: string): string {
    const account = createHash("sha256")
      .update(`${this.conn.apiUrl ?? ""}\n${this.conn.apiKey}`)
      .digest("hex");
    return `${account}/${sandboxId}`;
  }

  /** The SDK's connection options: E2B's own endpoints, or the one given for API and envd alike. */
  private opts() {
    return {
      apiKey: this.conn.apiKey,
      ...(this.conn.apiUrl ? { apiUrl: this.conn.apiUrl, sandboxUrl: this.conn.apiUrl } : {}),
    };
  }

  /** Whether the key is taken: the cheapest call that needs it. */
  async checkKey(): Promise<void> {
    try {
      await Sandbox.list({ ...this.opts(), limit: 1 }).nextItems();
    } catch (err) {
      throw new DenvError(
        "invalid_argument",
        `E2B did not accept the key: ${(err as Error).message.slice(0, 300)}`,
      );
    }
  }

  async capabilities(): Promise<TargetCapabilities> {
    const no = (detail: string) => ({ supported: false, detail });
    return {
      multiServiceStack: no("no (one VM per sandbox)"),
      consistentSnapshot: no("pause + snapshot (not driven by denv yet)"),
      fork: no("no (E2B forks its own sandboxes; a denv version lives on a denvd host)"),
      forkTime: { supported: false, detail: "seconds (E2B's figure)" },
      egressDenyVerified: {
        supported: true,
        detail: "provider network config (allow_internet_access: false), not probed",
      },
      capsEnforced: { supported: true, detail: "provider tier (the template's vCPU and memory)" },
      gpu: no("no"),
      verify: no("no (verify is not available on hosted providers yet)"),
    };
  }

  async status(): Promise<TargetStatus> {
    return {
      available: true,
      hosts: null,
      note: "E2B driver: tested against a local double of E2B's published API, not against the live E2B",
    };
  }

  async createSandbox(teamId: string, spec: SandboxSpec): Promise<MadeEnvironment> {
    if ("fromVersion" in spec)
      throw new DenvError(
        "invalid_argument",
        `target ${this.name} (E2B) cannot fork ${spec.fromVersion}: a denv version lives on a denvd host; create a sandbox from an image here`,
      );
    if (spec.ports?.length)
      throw new DenvError(
        "invalid_argument",
        `target ${this.name} (E2B): port URLs are not available on hosted targets yet`,
      );
    const project = await sandboxProject(this.store, teamId);
    const name = spec.name ?? `sbx-${randomBytes(4).toString("hex")}`;
    if (await environmentNamed(this.store, project.id, name))
      throw new DenvError("conflict", `an environment named ${name} already exists`);
    const template = await this.templateOf(spec.image);
    let sandbox: Sandbox;
    try {
      sandbox = await Sandbox.create(template, {
        ...this.opts(),
        envs: spec.env ?? {},
        // The provider's own setting; the row says it is not probed.
        allowInternetAccess: spec.egress === "allow",
        metadata: { denv_team: teamId, denv_name: name },
        timeoutMs: SANDBOX_TIMEOUT_MS,
      });
    } catch (err) {
      throw providerError(this.name, `creating a sandbox from ${spec.image}`, err);
    }
    // The id is the provider's answer, kept and sent back in paths and headers: only one that looks
    // like an id (E2B's are lowercase letters and digits) is taken.
    if (!/^[A-Za-z0-9_-]{1,128}$/.test(sandbox.sandboxId)) {
      await Sandbox.kill(sandbox.sandboxId, this.opts()).catch(() => {});
      throw new DenvError(
        "unavailable",
        `target ${this.name} (E2B) answered a sandbox id that is not one: ${JSON.stringify(sandbox.sandboxId.slice(0, 40))}`,
      );
    }
    try {
      // The sandbox's paths (denv's default /work) are there and the user's, as a denvd sandbox's
      // volumes are; E2B keeps them for the sandbox's life (no fork here to carry them on).
      const user = spec.user ?? "user";
      const paths = (spec.volumes ?? ["/work"]).map(shellQuote).join(" ");
      await sandbox.commands.run(`mkdir -p -- ${paths} && chown ${shellQuote(user)} -- ${paths}`, {
        user: "root",
      });
      if (spec.cmd?.length) await sandbox.commands.run(commandLine(spec.cmd), { background: true, user });
      const env: EnvironmentsTable = {
        id: newId("env"),
        team_id: teamId,
        project_id: project.id,
        name,
        status: "running",
        host_id: null,
        // On a hosted target the provider's sandbox: what serves the environment now.
        stack_id: sandbox.sandboxId,
        current_version_id: null,
        parent_version_id: null,
        sandbox: 1,
        target_id: this.name,
        pool_id: null,
        created_at: now(),
      };
      await this.store.insertInto("environments").values(env).execute();
      E2bTarget.connected.set(this.cacheKey(sandbox.sandboxId), Promise.resolve(sandbox));
      return { environmentId: env.id, deploymentId: null };
    } catch (err) {
      await sandbox.kill().catch(() => {});
      throw providerError(this.name, `starting ${commandLine(spec.cmd ?? [])}`, err);
    }
  }

  /** The template built from an image, named from the image: built once, found after. */
  private async templateOf(image: string): Promise<string> {
    const name = `denv-${createHash("sha256").update(image).digest("hex").slice(0, 20)}`;
    try {
      if (!(await Template.exists(name, this.opts())))
        await Template.build(Template().fromImage(image), name, this.opts());
      return name;
    } catch (err) {
      throw providerError(this.name, `building a template from ${image}`, err);
    }
  }

  private sandbox(env: PlacedEnvironment): Promise<Sandbox> {
    const id = env.stackId;
    if (!id) throw new DenvError("conflict", `environment ${env.name} has no sandbox on ${this.name}`);
    const key = this.cacheKey(id);
    let s = E2bTarget.connected.get(key);
    if (!s) {
      s = Sandbox.connect(id, this.opts());
      E2bTarget.connected.set(key, s);
      s.catch(() => E2bTarget.connected.delete(key));
    }
    return s.catch((err: unknown) => {
      throw providerError(this.name, `reaching sandbox ${id}`, err);
    });
  }

  private checkService(env: PlacedEnvironment, service: string | undefined): void {
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
    if (stdin && !(Buffer.isBuffer(stdin) && stdin.length === 0))
      throw new DenvError(
        "invalid_argument",
        `target ${this.name} (E2B): stdin to a command is not carried yet`,
      );
    const sb = await this.sandbox(env);
    const limit = req.maxOutputBytes ?? Number.POSITIVE_INFINITY;
    const kept = { stdout: 0, stderr: 0 };
    const dropped = { stdout: 0, stderr: 0 };
    // E2B's SDK hands output on as text; it is counted and handed on in order.
    let chain = Promise.resolve();
    const take = (which: "stdout" | "stderr") => (text: string) => {
      const b = Buffer.from(text);
      const room = Math.max(0, limit - kept[which]);
      const part = b.subarray(0, room);
      kept[which] += part.length;
      dropped[which] += b.length - part.length;
      if (part.length) chain = chain.then(() => onOutput(which, part));
    };
    const started = performance.now();
    const timeoutMs = req.timeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
    let exitCode: number;
    let timedOut = false;
    try {
      const handle = await sb.commands.run(commandLine(req.command), {
        background: true,
        user: req.user ?? "user",
        ...(req.cwd ? { cwd: req.cwd } : {}),
        envs: req.env ?? {},
        timeoutMs: 0,
        onStdout: take("stdout"),
        onStderr: take("stderr"),
      });
      const timer = setTimeout(() => {
        timedOut = true;
        void handle.kill().catch(() => {});
      }, timeoutMs);
      try {
        exitCode = (await handle.wait()).exitCode;
      } catch (err) {
        if (!(err instanceof CommandExitError)) throw err;
        exitCode = err.exitCode;
      } finally {
        clearTimeout(timer);
      }
    } catch (err) {
      if (!timedOut) throw providerError(this.name, "a command", err);
      exitCode = 137;
    }
    await chain;
    return {
      exitCode: timedOut ? 124 : exitCode,
      stdoutTruncated: dropped.stdout > 0,
      stderrTruncated: dropped.stderr > 0,
      stdoutDroppedBytes: dropped.stdout,
      stderrDroppedBytes: dropped.stderr,
      timedOut,
      durationMs: Math.round(performance.now() - started),
    };
  }

  /** Runs a shell line in the sandbox as the user; its stdout, or conflict with its stderr. */
  private async sh(env: PlacedEnvironment, user: string | undefined, line: string): Promise<string> {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const r = await this.exec(env, { command: line, user }, null, (w, b) => {
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
    const sb = await this.sandbox(env);
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
      // As a stream, so envd takes it as one octet-stream body (not a multipart form).
      await sb.files.write(staged, Readable.toWeb(counted) as ReadableStream, {
        user: at.user ?? "user",
        useOctetStream: true,
      });
    } catch (err) {
      throw providerError(this.name, `uploading to ${at.path}`, err);
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
    const sb = await this.sandbox(env);
    const staged = `/tmp/.denv-get-${randomBytes(8).toString("hex")}.tar`;
    const dir = at.path === "/" ? "/" : at.path.replace(/\/[^/]*$/, "") || "/";
    const base = at.path === "/" ? "." : (at.path.split("/").pop() as string);
    await this.sh(env, at.user, `tar -cf ${shellQuote(staged)} -C ${shellQuote(dir)} -- ${shellQuote(base)}`);
    const cleanUp = () => void this.sh(env, at.user, `rm -f ${shellQuote(staged)}`).catch(() => {});
    try {
      // Streamed as the provider sends it, never held whole in this process.
      const web = await sb.files.read(staged, { format: "stream", user: at.user ?? "user" });
      const out = Readable.fromWeb(web as Parameters<typeof Readable.fromWeb>[0]);
      out.once("close", cleanUp);
      return out;
    } catch (err) {
      cleanUp();
      throw providerError(this.name, `downloading ${at.path}`, err);
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
    const [e] = await this.stats(env, at.user, `${E2bTarget.STAT} ${shellQuote(at.path)}`);
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
      `test -d ${q} || { printf '%s: Not a directory\\n' ${q} >&2; exit 1; }; find ${q} -mindepth 1 -maxdepth ${Math.floor(depth)} -exec ${E2bTarget.STAT} {} +`,
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

  async stopService(env: PlacedEnvironment): Promise<void> {
    throw new DenvError(
      "invalid_argument",
      `environment ${env.name} runs on target ${this.name} (E2B), one VM with one service: destroy it instead`,
    );
  }

  /** Kills the sandbox; one already gone is gone. */
  async destroy(env: PlacedEnvironment): Promise<void> {
    if (!env.stackId) return;
    E2bTarget.connected.delete(this.cacheKey(env.stackId));
    try {
      await Sandbox.kill(env.stackId, this.opts());
    } catch (err) {
      throw providerError(this.name, `destroying sandbox ${env.stackId}`, err);
    }
  }
}
