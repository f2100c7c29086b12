/**
 * Verify: grading on a fork, as a separate principal, so the agent cannot tamper with its grade.
 *
 *   stop     every process of the agent's service is frozen (the cgroup freezer: background ones too)
 *   collect  x-denv.verifier.collect is copied, from the host side, to a root-owned directory in
 *            denvd's state dir. Nothing is followed or opened that is not a regular file with one
 *            link: a symlink, hard link, FIFO, socket or device anywhere inside, a path component
 *            that is a link, a name that is not UTF-8, or more than the size cap, scores 0.
 *   snapshot the environment's state, consistent (the frozen agent stays frozen)
 *   clone    a fork of that version, on its own network
 *   grade    the verifier image as root in its own container on the fork's network, the collected
 *            files mounted read-only at /collect; or the command "inside a service": for the
 *            agent's own service in a fresh container of its image on the fork's datasets, for
 *            another by exec in the fork's; either way as root under `env -i` with denvd's
 *            environment, from an empty /denv-grade, Python isolated (grader-command.ts), the
 *            files at /denv-collect, root-owned
 *
 * The reward convention: a number the verifier writes to $DENV_REWARD_FILE, or else the last
 * non-empty line of its stdout. A verifier that exits non-zero, prints no number, or outruns its
 * timeout scores 0, with the reason and its output tail in the evidence. The agent's environment is
 * left frozen for inspection unless resume is asked for.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readdir, rm, writeFile } from "node:fs/promises";
import { dirname, join, posix } from "node:path";
import { Readable } from "node:stream";
import { type CollectEvidence, DenvError, type GradeEvidence, type ResolvedSpec } from "@denv/protocol";

export type { CollectEvidence, GradeEvidence };

import tar from "tar-stream";
import { clockMounts } from "../clock/clock-state.ts";
import type { Denvd } from "../denvd.ts";
import type { StackRecord } from "../host/state-store.ts";
import { containerSpecFor, ONE_SHOT_CONTAINER } from "./container-spec.ts";
import { GRADE_DIR, GRADER_PATH, graderArgv, graderEnv, isolatedCommand } from "./grader-command.ts";
import { LABEL } from "./labels.ts";
import { NoFollowDir, NotFollowed } from "./no-follow-dir.ts";

export const DEFAULT_COLLECT_MAX_BYTES = 64 * 1024 * 1024;
/** Files (and directories) a collection may hold: more is refused, and the episode scores 0. */
export const DEFAULT_COLLECT_MAX_FILES = 10_000;
/** Files listed by name in the evidence; the rest are counted. */
const EVIDENCE_FILES = 200;
const TAIL = 4096;

class Refusal extends Error {}

const decoder = new TextDecoder("utf-8", { fatal: true });

export class Verifier {
  private readonly denvd: Denvd;
  private readonly stateDir: string;
  private readonly maxBytes: number;
  private readonly maxFiles: number;
  /** Entries walked by the collection under way (one Verifier per operation). */
  private entries = 0;

  constructor(
    denvd: Denvd,
    stateDir: string,
    options: { collectMaxBytes?: number; collectMaxFiles?: number } = {},
  ) {
    this.denvd = denvd;
    this.stateDir = stateDir;
    this.maxBytes = options.collectMaxBytes ?? DEFAULT_COLLECT_MAX_BYTES;
    this.maxFiles = options.collectMaxFiles ?? DEFAULT_COLLECT_MAX_FILES;
  }

  private agent(environmentId: string): { spec: ResolvedSpec; service: string; containerId: string } {
    const env = this.denvd.stack(environmentId);
    const service = env.spec.agent?.service;
    if (!service)
      throw new DenvError("invalid_argument", `environment ${env.name} has no x-denv.agent.service to stop`);
    if (!env.spec.verifier)
      throw new DenvError("invalid_argument", `environment ${env.name} has no x-denv.verifier`);
    return { spec: env.spec, service, containerId: env.containers[service] as string };
  }

  /** stop: freezes every process of the agent's service. Idempotent. */
  async stop(environmentId: string): Promise<{ service: string; frozen: true; ms: number }> {
    const t = performance.now();
    const { service, containerId } = this.agent(environmentId);
    const st = await this.denvd.runtime.inspectContainer(containerId);
    // Recorded before it acts: the next open thaws any paused container not recorded frozen.
    await this.denvd.recordFrozen(environmentId, service, true);
    if (!st.paused) await this.denvd.runtime.pauseContainer(containerId);
    return { service, frozen: true, ms: Math.round(performance.now() - t) };
  }

  async resume(environmentId: string): Promise<void> {
    const { service, containerId } = this.agent(environmentId);
    const st = await this.denvd.runtime.inspectContainer(containerId);
    if (st.paused) await this.denvd.runtime.unpauseContainer(containerId);
    await this.denvd.recordFrozen(environmentId, service, false);
  }

  private dir(verifyId: string): string {
    if (!/^[a-z0-9_]+$/.test(verifyId)) throw new DenvError("invalid_argument", `bad verify id ${verifyId}`);
    return join(this.stateDir, "verify", verifyId);
  }

  /** collect: the declared paths, from the frozen agent, into a root-owned directory. */
  async collect(environmentId: string, verifyId: string): Promise<CollectEvidence> {
    const env = this.denvd.stack(environmentId);
    const { spec, service, containerId } = this.agent(environmentId);
    const st = await this.denvd.runtime.inspectContainer(containerId);
    if (!st.paused) throw new DenvError("conflict", "collect runs only after stop has frozen the agent");
    const dest = join(this.dir(verifyId), "collect");
    await rm(this.dir(verifyId), { recursive: true, force: true });
    await mkdir(dest, { recursive: true, mode: 0o700 });
    const evidence: CollectEvidence = { refused: null, files: [], file_count: 0, missing: [], bytes: 0 };
    this.entries = 0;
    const svc = spec.services[service];
    try {
      for (const path of spec.verifier?.collect ?? []) {
        // Where the path lives on the host: in one of the service's datasets, or its root filesystem.
        const vol = (svc?.volumes ?? [])
          .filter((v) => path === v.target || path.startsWith(`${v.target.replace(/\/$/, "")}/`))
          .sort((a, b) => b.target.length - a.target.length)[0];
        let base: string;
        let rel: string;
        if (vol) {
          const ds = env.datasets[vol.dataset];
          if (!ds) throw new Refusal(`no dataset for ${vol.target}`);
          base = join(this.denvd.storage.datasetPath(ds), vol.subpath ?? "");
          rel = path.slice(vol.target.replace(/\/$/, "").length);
        } else {
          if (!st.rootfsPath)
            throw new Refusal(`cannot reach ${path}: the engine reports no root filesystem path`);
          base = st.rootfsPath;
          rel = path;
        }
        await this.copyPath(base, rel.split("/").filter(Boolean), path, dest, evidence);
      }
    } catch (err) {
      if (!(err instanceof Refusal)) throw err;
      evidence.refused = err.message;
      // Nothing of a refused collection reaches the grader.
      await rm(dest, { recursive: true, force: true });
      await mkdir(dest, { recursive: true, mode: 0o700 });
      evidence.files = [];
      evidence.file_count = 0;
    }
    return evidence;
  }

  /**
   * Walks `parts` from `base` one directory at a time (each opened relative to the last, never
   * through a link: see no-follow-dir.ts) and copies what is there.
   */
  private async copyPath(
    base: string,
    parts: string[],
    shown: string,
    dest: string,
    ev: CollectEvidence,
  ): Promise<void> {
    for (const part of parts)
      if (part === ".." || part === ".") throw new Refusal(`${shown}: path component ${part}`);
    const opened: NoFollowDir[] = [];
    try {
      let dir = await NoFollowDir.open(base);
      opened.push(dir);
      for (let i = 0; i < parts.length - 1; i++) {
        const part = parts[i] as string;
        const info = await dir.lstat(part);
        if (!info) {
          ev.missing.push(shown);
          return;
        }
        if (info.isSymbolicLink())
          throw new Refusal(`${shown}: ${parts.slice(0, i + 1).join("/")} is a symbolic link`);
        if (!info.isDirectory()) {
          ev.missing.push(shown);
          return;
        }
        dir = await dir.dir(part).catch((err: unknown) => {
          if (err instanceof NotFollowed)
            throw new Refusal(
              `${shown}: ${parts.slice(0, i + 1).join("/")} changed into a link while it was collected`,
            );
          throw err;
        });
        opened.push(dir);
      }
      const last = parts.at(-1);
      if (!last) throw new Refusal(`${shown}: nothing to collect`);
      if (!(await dir.lstat(last))) {
        ev.missing.push(shown);
        return;
      }
      await this.copyEntry(dir, last, shown, join(dest, ...shown.split("/").filter(Boolean)), ev, 0);
    } finally {
      for (const d of opened) await d.close();
    }
  }

  private async copyEntry(
    parent: NoFollowDir,
    name: string,
    shown: string,
    dst: string,
    ev: CollectEvidence,
    depth: number,
  ): Promise<void> {
    if (depth > 64) throw new Refusal(`${shown} is nested more than 64 directories deep`);
    // Files and directories both cost a walk: together they are bounded.
    if (++this.entries > this.maxFiles)
      throw new Refusal(`the collected paths hold more than ${this.maxFiles} files and directories`);
    const info = await parent.lstat(name);
    if (!info) throw new Refusal(`${shown} disappeared while it was collected`);
    if (info.isSymbolicLink()) throw new Refusal(`${shown} is a symbolic link`);
    if (info.isFIFO()) throw new Refusal(`${shown} is a FIFO`);
    if (info.isSocket()) throw new Refusal(`${shown} is a socket`);
    if (info.isCharacterDevice() || info.isBlockDevice()) throw new Refusal(`${shown} is a device`);
    if (info.isDirectory()) {
      await mkdir(dst, { recursive: true, mode: 0o755 });
      const dir = await parent.dir(name).catch((err: unknown) => {
        if (err instanceof NotFollowed)
          throw new Refusal(`${shown} changed into a link while it was collected`);
        throw err;
      });
      try {
        for (const raw of await dir.names()) {
          let child: string;
          try {
            child = decoder.decode(raw);
          } catch {
            throw new Refusal(`${shown} holds a file name that is not UTF-8`);
          }
          if (child.includes("/") || child === ".." || child === ".")
            throw new Refusal(`${shown}: bad name ${JSON.stringify(child)}`);
          await this.copyEntry(dir, child, posix.join(shown, child), join(dst, child), ev, depth + 1);
        }
      } finally {
        await dir.close();
      }
      return;
    }
    if (!info.isFile()) throw new Refusal(`${shown} is not a regular file`);
    if (info.nlink > 1) throw new Refusal(`${shown} is a hard link (${info.nlink} names for one file)`);
    if (ev.bytes + info.size > this.maxBytes)
      throw new Refusal(`collected files exceed ${this.maxBytes} bytes`);
    // O_NOFOLLOW and O_NONBLOCK, relative to the directory already open: even a name swapped after
    // the lstat neither follows a link nor blocks.
    const fh = await parent.file(name).catch(() => {
      throw new Refusal(`${shown} could not be opened as a regular file`);
    });
    try {
      const st = await fh.stat();
      if (!st.isFile() || st.ino !== info.ino || st.dev !== info.dev || st.nlink > 1)
        throw new Refusal(`${shown} changed while it was collected`);
      const data = Buffer.alloc(Math.min(st.size, this.maxBytes - ev.bytes + 1));
      const { bytesRead } = await fh.read(data, 0, data.length, 0);
      if (ev.bytes + bytesRead > this.maxBytes)
        throw new Refusal(`collected files exceed ${this.maxBytes} bytes`);
      const body = data.subarray(0, bytesRead);
      await mkdir(dirname(dst), { recursive: true, mode: 0o755 });
      await writeFile(dst, body, { mode: 0o644, flag: "wx" });
      ev.bytes += bytesRead;
      ev.file_count++;
      if (ev.files.length < EVIDENCE_FILES)
        ev.files.push({
          path: shown,
          bytes: bytesRead,
          sha256: createHash("sha256").update(body).digest("hex"),
        });
    } finally {
      await fh.close();
    }
  }

  /** grade: the verifier on the grading fork. Never throws for the verifier's own failures. */
  async grade(graderEnvironmentId: string, verifyId: string): Promise<GradeEvidence> {
    const env = this.denvd.stack(graderEnvironmentId);
    const v = env.spec.verifier;
    if (!v) throw new DenvError("invalid_argument", "no x-denv.verifier");
    const started = performance.now();
    const collectDir = join(this.dir(verifyId), "collect");
    const rewardDir = join(this.dir(verifyId), "reward");
    await mkdir(rewardDir, { recursive: true, mode: 0o700 });
    let exitCode: number | null = null;
    let timedOut = false;
    let stdout: Buffer = Buffer.alloc(0);
    let stderr: Buffer = Buffer.alloc(0);
    let mode: GradeEvidence["mode"] = "image";
    if (v.image) {
      const net = Object.keys(env.spec.networks)[0];
      const verifierEnv = { DENV_COLLECT_DIR: "/collect", DENV_REWARD_FILE: "/denv-reward/reward" };
      const clockDir = this.denvd.clockDir(env);
      const clock = clockDir ? clockMounts(clockDir, verifierEnv) : null;
      const id = await this.denvd.runtime.createContainer({
        name: `${env.network}-verifier-${randomBytes(3).toString("hex")}`,
        image: v.image_pinned ?? v.image,
        entrypoint: null,
        cmd: v.command,
        env: clock?.env ?? verifierEnv,
        user: "0",
        workingDir: null,
        hostname: "verifier",
        labels: {
          ...this.denvd.objectLabels(),
          [LABEL.stack]: env.id,
          [LABEL.service]: "verifier",
          [LABEL.operation]: verifyId,
        },
        network: net
          ? { kind: "network", networks: [{ name: env.network, aliases: ["verifier"] }] }
          : { kind: "none" },
        mounts: [
          { kind: "bind", source: collectDir, target: "/collect", readOnly: true },
          { kind: "bind", source: rewardDir, target: "/denv-reward", readOnly: false },
          // The grader reads the grading fork's clock: the time the episode ended, when frozen.
          ...(clock?.mounts ?? []),
        ],
        memoryBytes: 4 * 1024 ** 3,
        pids: 2048,
        cpus: 2,
        init: true,
        ...ONE_SHOT_CONTAINER,
      });
      try {
        await this.denvd.runtime.startContainer(id);
        const w = await this.denvd.runtime.waitContainer(id, v.timeout_ms);
        timedOut = w.timedOut;
        exitCode = w.timedOut ? null : w.exitCode;
        const logs = await this.denvd.runtime.containerLogs(id);
        stdout = logs.stdout;
        stderr = logs.stderr;
      } finally {
        await this.denvd.runtime.removeContainer(id);
      }
    } else {
      mode = "service";
      const r = await this.gradeInService(
        env,
        verifyId,
        collectDir,
        rewardDir,
        v.service as string,
        v.command ?? ["true"],
        v.timeout_ms,
      );
      timedOut = r.timedOut;
      exitCode = r.timedOut ? null : r.exitCode;
      stdout = r.stdout;
      stderr = r.stderr;
    }
    const { reward, reason } = await readReward(rewardDir, stdout, exitCode, timedOut, v.timeout_ms);
    return {
      reward,
      reason,
      exit_code: exitCode,
      timed_out: timedOut,
      stdout_tail: stdout.subarray(Math.max(0, stdout.length - TAIL)).toString("utf8"),
      stderr_tail: stderr.subarray(Math.max(0, stderr.length - TAIL)).toString("utf8"),
      ms: Math.round(performance.now() - started),
      mode,
    };
  }

  /**
   * A verifier that runs "inside a service", where the agent never wrote: as root, under `env -i`
   * with denvd's environment, from /denv-grade (grader-command.ts). For the agent's own service, in
   * a fresh container of that service's image on the fork's datasets — never the container the
   * agent's processes ran in; for another service, by exec in the fork's container of it.
   */
  private async gradeInService(
    env: StackRecord,
    verifyId: string,
    collectDir: string,
    rewardDir: string,
    service: string,
    command: string[],
    timeoutMs: number,
  ): Promise<{ exitCode: number | null; timedOut: boolean; stdout: Buffer; stderr: Buffer }> {
    const s = env.spec.services[service];
    if (!s) throw new DenvError("invalid_argument", `verifier.service ${service} is not in the environment`);
    const clockDir = this.denvd.clockDir(env);
    const clock = clockDir ? clockMounts(clockDir, {}) : null;
    if (service === env.spec.agent?.service) {
      const vars = graderEnv(s.environment, {
        ...(clock?.env ?? {}),
        DENV_COLLECT_DIR: "/denv-collect",
        DENV_REWARD_FILE: "/denv-reward/reward",
      });
      const base = containerSpecFor({
        stack: { ...env, egress: env.spec.egress },
        service,
        s,
        networkName: (n) => (n === Object.keys(env.spec.networks)[0] ? env.network : `${env.network}-${n}`),
        containerIds: env.containers,
        labels: (extra) => ({ ...this.denvd.objectLabels(), ...extra }),
        agent: null,
        clockDir,
      });
      const id = await this.denvd.runtime.createContainer({
        ...base,
        name: `${env.network}-grader-${randomBytes(3).toString("hex")}`,
        entrypoint: null,
        cmd: graderArgv(command, vars),
        user: "0",
        workingDir: GRADE_DIR,
        env: {},
        hostname: "verifier",
        labels: { ...base.labels, [LABEL.service]: "verifier", [LABEL.operation]: verifyId },
        // Reached as "verifier" on the fork's networks, not under the service's own name.
        network:
          base.network.kind === "network"
            ? {
                kind: "network",
                networks: base.network.networks.map((n) => ({ name: n.name, aliases: ["verifier"] })),
              }
            : base.network,
        mounts: [
          ...base.mounts,
          { kind: "bind", source: collectDir, target: "/denv-collect", readOnly: true },
          { kind: "bind", source: rewardDir, target: "/denv-reward", readOnly: false },
        ],
        healthcheck: null,
        readOnlyRootfs: false,
        restart: "no",
        stopTimeoutMs: 1000,
      });
      try {
        await this.denvd.runtime.startContainer(id);
        const w = await this.denvd.runtime.waitContainer(id, timeoutMs);
        const logs = await this.denvd.runtime.containerLogs(id);
        return { exitCode: w.timedOut ? null : w.exitCode, timedOut: w.timedOut, ...logs };
      } finally {
        await this.denvd.runtime.removeContainer(id);
      }
    }
    // Another service: the collected files and an empty working directory, root-owned, copied in.
    const pack = tar.pack();
    await packDir(pack, collectDir, "denv-collect");
    pack.entry({ name: GRADE_DIR.slice(1), type: "directory", mode: 0o700, uid: 0, gid: 0 });
    pack.finalize();
    const containerId = env.containers[service] as string;
    // Every command here starts from denvd's variables alone (cleanEnv): the service's own may
    // point the loader or PATH into what the agent wrote.
    const sys = { PATH: GRADER_PATH };
    await this.denvd.exec(env.id, service, {
      command: ["rm", "-rf", "/denv-collect", GRADE_DIR],
      user: "0",
      env: sys,
      cleanEnv: true,
    });
    await this.denvd.runtime.putArchive(containerId, "/", Readable.from(pack));
    const vars = graderEnv(s.environment, {
      ...(clock?.env ?? {}),
      DENV_COLLECT_DIR: "/denv-collect",
      DENV_REWARD_FILE: `${GRADE_DIR}/reward`,
    });
    const r = await this.denvd.exec(env.id, service, {
      command: isolatedCommand(command),
      user: "0",
      cwd: GRADE_DIR,
      env: vars,
      cleanEnv: true,
      timeoutMs,
    });
    const rf = await this.denvd.exec(env.id, service, {
      command: ["cat", `${GRADE_DIR}/reward`],
      user: "0",
      env: sys,
      cleanEnv: true,
    });
    if (rf.exitCode === 0) await writeFile(join(rewardDir, "reward"), rf.stdout);
    return {
      exitCode: r.timedOut ? null : r.exitCode,
      timedOut: r.timedOut,
      stdout: r.stdout,
      stderr: r.stderr,
    };
  }

  async cleanup(verifyId: string): Promise<void> {
    await rm(this.dir(verifyId), { recursive: true, force: true });
  }
}

async function readReward(
  rewardDir: string,
  stdout: Buffer,
  exitCode: number | null,
  timedOut: boolean,
  timeoutMs: number,
): Promise<{ reward: number; reason: string | null }> {
  if (timedOut)
    return { reward: 0, reason: `the verifier did not finish within ${timeoutMs} ms and was killed` };
  if (exitCode !== 0) return { reward: 0, reason: `the verifier exited with ${exitCode}` };
  const file = await import("node:fs/promises")
    .then((fs) => fs.readFile(join(rewardDir, "reward"), "utf8"))
    .catch(() => null);
  const text =
    file?.trim() ||
    stdout
      .toString("utf8")
      .trim()
      .split("\n")
      .filter((l) => l.trim())
      .at(-1)
      ?.trim() ||
    "";
  const n = Number(text);
  if (text === "" || !Number.isFinite(n))
    return { reward: 0, reason: `the verifier gave no reward (got ${JSON.stringify(text.slice(0, 80))})` };
  return { reward: n, reason: null };
}

async function packDir(pack: tar.Pack, dir: string, name: string): Promise<void> {
  pack.entry({ name, type: "directory", mode: 0o500, uid: 0, gid: 0 });
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) await packDir(pack, p, `${name}/${entry.name}`);
    else if (entry.isFile()) {
      const { readFile } = await import("node:fs/promises");
      pack.entry({ name: `${name}/${entry.name}`, mode: 0o400, uid: 0, gid: 0 }, await readFile(p));
    }
  }
}
