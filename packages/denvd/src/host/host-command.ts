/**
 * denvd's own commands on the host (btrfs, du, nsenter, ip): run through a denv-agent in host mode
 * when one is started, else started here.
 *
 * Why: Node starts a process by forking itself, and a fork copies the parent's page tables: on
 * this machine a spawn costs denvd 4.7 ms of CPU at 45 MiB resident and 14 ms at 450, all of it
 * on the event loop's thread (bench/README.md). A create runs about nine such commands and a fork
 * fifteen. The agent is a small static C process: its fork costs a fraction of a millisecond, and
 * denvd only accepts a connection and reads frames. It runs as root with denvd's environment,
 * exactly what denvd itself would start, and dies with denvd (PDEATHSIG). Its socket is in a
 * directory of this process's own, mode 0700: only root reaches it.
 *
 * One per process (the commands are the host's, whichever denvd asks); every failure to start or
 * reach it falls back to starting the command here, so a host without the agent works as before.
 */
import { type ChildProcess, type ExecFileException, execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { constants, tmpdir } from "node:os";
import { join } from "node:path";
import { AGENT_SOCKET_NAME, AgentChannel } from "../exec/agent-channel.ts";
import { AgentExecutor } from "../exec/agent-executor.ts";
import type { Executor } from "../exec/executor.ts";

export interface HostCommandOptions {
  /** Killed (its whole process group) past this; the result says timedOut. */
  timeoutMs: number;
  /** The command's whole environment (default: denvd's). */
  env?: Record<string, string>;
  /** Output per stream past which the command fails (default 16 MiB). */
  maxOutputBytes?: number;
}

export interface HostCommandResult {
  /** The exit status; 128+N for a death by signal N. 127: the program was not found. */
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  /** Where it ran: "agent" (the host agent) or "spawn" (started by this process). */
  via: "agent" | "spawn";
}

const DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024;
const HOST_KEY = "host";
/** How long the agent has to dial in after it starts. */
const CONNECT_TIMEOUT_MS = 5000;
/**
 * How long a request's connection may take to arrive before the command is started here instead
 * (then never run by the agent: a connection that comes later finds its request gone). Wide: an
 * agent that exits is noticed at once; this is for a machine too busy to fork in time.
 */
const DIAL_TIMEOUT_MS = 30_000;

interface HostAgent {
  channel: AgentChannel;
  executor: AgentExecutor;
  child: ChildProcess;
  dir: string;
}

let agent: HostAgent | null = null;
let starting: Promise<boolean> | null = null;

/**
 * Starts this process's host agent from the denv-agent binary, once; true when it is connected.
 * Later calls return the first one's answer (or start a new agent when the last one exited).
 */
export function startHostAgent(binary: string): Promise<boolean> {
  // DENVD_HOST_COMMANDS=spawn: every command started by denvd itself (to compare the two).
  if (process.env.DENVD_HOST_COMMANDS === "spawn") return Promise.resolve(false);
  if (agent) return Promise.resolve(true);
  if (!starting) starting = start(binary).finally(() => (starting = null));
  return starting;
}

async function start(binary: string): Promise<boolean> {
  // A directory of this process's own (mkdtemp: 0700): nothing else can put a socket there. Named
  // with its pid, so what a killed process left is known as such (scripts/clean-leftovers.sh).
  const dir = mkdtempSync(join(tmpdir(), `denvd-host-${process.pid}-`));
  // Every command denvd has under way may be connecting at once (a fan-out's forks): no container
  // can reach this socket, so the bound on connections not yet identified is wide.
  const channel = new AgentChannel(dir, { maxUnidentified: 4096 });
  let child: ChildProcess | null = null;
  try {
    const socketDir = await channel.listen(HOST_KEY);
    child = spawn(binary, ["host", join(socketDir, AGENT_SOCKET_NAME), String(process.pid)], {
      stdio: "ignore",
    });
    // An agent that exits at once (one built before host mode answers with its usage) is not
    // waited for.
    const exited = new Promise<boolean>((resolve) => {
      child?.once("exit", () => resolve(false));
      child?.once("error", () => resolve(false));
    });
    // The agent never keeps denvd alive: it dies with denvd, not the other way round.
    child.unref();
    if (!(await Promise.race([channel.waitConnected(HOST_KEY, CONNECT_TIMEOUT_MS), exited])))
      throw new Error("not connected");
    const a: HostAgent = {
      channel,
      dir,
      child,
      // Asked only for exec; a request whose connection does not come is started here instead.
      executor: new AgentExecutor(localExecutor, (id) =>
        id === HOST_KEY && agent === a
          ? {
              dial: () => channel.dial(HOST_KEY, DIAL_TIMEOUT_MS),
              defaultUser: null,
              homeSet: true,
              version: () => channel.version(HOST_KEY),
            }
          : null,
      ),
    };
    child.once("exit", () => {
      if (agent === a) agent = null;
      void channel.closeAll().finally(() => rmSync(dir, { recursive: true, force: true }));
    });
    agent = a;
    return true;
  } catch {
    child?.kill("SIGKILL");
    await channel.closeAll();
    rmSync(dir, { recursive: true, force: true });
    return false;
  }
}

/** Stops the host agent (tests; a process exiting takes it along by itself). */
export async function stopHostAgent(): Promise<void> {
  const a = agent;
  agent = null;
  if (!a) return;
  a.child.kill("SIGKILL");
  await a.channel.closeAll();
  rmSync(a.dir, { recursive: true, force: true });
}

/** The host agent's process id, or null when commands are started here. */
export function hostAgentPid(): number | null {
  return agent?.child.pid ?? null;
}

process.once("exit", () => {
  if (agent) rmSync(agent.dir, { recursive: true, force: true });
});

/** Runs a host command to its end and returns its status and output (never rejects on a status). */
export async function runHostCommand(
  file: string,
  args: string[],
  options: HostCommandOptions,
): Promise<HostCommandResult> {
  const limit = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
  const a = agent;
  // The agent did not answer (none, gone, or no connection came): started here instead.
  const r = a ? await onAgent(a, [file, ...args], options.env, options.timeoutMs, limit) : null;
  return r ?? spawnHere(file, args, options, limit);
}

/**
 * Runs one of the host agent's built-in operations: an exec request whose program is `builtin`
 * (BTRFS_BUILTIN), done in the agent's handler instead of by a program. Null when the host agent
 * did not do it (none is running, it went away, or it is one built before the operation existed
 * and answered that it found no such program): the caller then runs its command instead.
 */
export async function runHostBuiltin(
  builtin: string,
  args: string[],
  options: HostCommandOptions,
): Promise<HostCommandResult | null> {
  const a = agent;
  const limit = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
  const r = a ? await onAgent(a, [builtin, ...args], {}, options.timeoutMs, limit) : null;
  // A built-in answers 0, 1 or 2; 127 is an agent that looked for a program of that name.
  return r && r.exitCode !== 127 ? r : null;
}

/** A command run by the host agent; null when it did not answer (the caller starts it instead). */
async function onAgent(
  a: HostAgent,
  command: string[],
  env: Record<string, string> | undefined,
  timeoutMs: number,
  limit: number,
): Promise<HostCommandResult | null> {
  const r = await a.executor.exec(HOST_KEY, {
    command,
    // The request's variables alone: the agent's own (denvd's at its start) are not added.
    ...(env ? { env, cleanEnv: true } : {}),
    timeoutMs,
    maxOutputBytes: limit,
    stdin: null,
  });
  if (r === FELL_BACK) return null;
  if (r.stdoutTruncated || r.stderrTruncated)
    throw new Error(`${command[0]} wrote more than ${limit} bytes of output`);
  return {
    exitCode: r.exitCode,
    stdout: r.stdout.toString("utf8"),
    stderr: r.stderr.toString("utf8"),
    timedOut: r.timedOut,
    via: "agent",
  };
}

/** What the agent executor's fallback answers: the command has not run; the caller starts it. */
const FELL_BACK = {
  exitCode: -1,
  stdout: Buffer.alloc(0),
  stderr: Buffer.alloc(0),
  stdoutTruncated: false,
  stderrTruncated: false,
  stdoutDroppedBytes: 0,
  stderrDroppedBytes: 0,
  timedOut: false,
  durationMs: 0,
};

const localExecutor: Executor = {
  exec: async () => FELL_BACK,
};

function spawnHere(
  file: string,
  args: string[],
  options: HostCommandOptions,
  limit: number,
): Promise<HostCommandResult> {
  return new Promise((resolve, reject) => {
    execFile(
      file,
      args,
      {
        encoding: "utf8",
        timeout: options.timeoutMs,
        maxBuffer: limit,
        ...(options.env ? { env: options.env } : {}),
      },
      (err: ExecFileException | null, stdout, stderr) => {
        if (!err) {
          resolve({ exitCode: 0, stdout, stderr, timedOut: false, via: "spawn" });
          return;
        }
        if (typeof err.code === "number") {
          resolve({ exitCode: err.code, stdout, stderr, timedOut: false, via: "spawn" });
          return;
        }
        if (err.code === "ENOENT") {
          // As the agent answers a program it cannot find.
          resolve({
            exitCode: 127,
            stdout,
            stderr: `${file}: No such file or directory\n`,
            timedOut: false,
            via: "spawn",
          });
          return;
        }
        if (err.signal) {
          resolve({
            exitCode: 128 + (constants.signals[err.signal] ?? 0),
            stdout,
            stderr,
            timedOut: Boolean(err.killed),
            via: "spawn",
          });
          return;
        }
        reject(err);
      },
    );
  });
}
