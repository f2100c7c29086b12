/** Exec through the engine's exec API: a runc exec per command (about 90 ms on these machines). */
import { DenvError } from "@denv/protocol";
import type { ContainerRuntime } from "../runtime/container-runtime.ts";
import {
  BoundedBuffer,
  DEFAULT_MAX_OUTPUT_BYTES,
  type ExecOptions,
  type ExecResult,
  type Executor,
} from "./executor.ts";
import { killProcessTree } from "./kill-process-tree.ts";

export class EngineExecutor implements Executor {
  private readonly runtime: ContainerRuntime;

  constructor(runtime: ContainerRuntime) {
    this.runtime = runtime;
  }

  async exec(containerId: string, options: ExecOptions): Promise<ExecResult> {
    // A terminal is the agent's to make (a pseudo-terminal in the container): none is made here.
    if (options.tty)
      throw new DenvError(
        "unavailable",
        "a command on a terminal needs the service's agent, which is not connected yet: try again in a moment",
      );
    const started = performance.now();
    const limit = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    const out = new BoundedBuffer(limit, options.keepOutput ?? true);
    const err = new BoundedBuffer(limit, options.keepOutput ?? true);
    const argv = typeof options.command === "string" ? ["sh", "-c", options.command] : options.command;
    // The engine always starts from the container's variables: env -i drops them for the command
    // (the env program itself still starts with them; the agent's path has no such gap).
    const cmd = options.cleanEnv
      ? ["/usr/bin/env", "-i", ...Object.entries(options.env ?? {}).map(([k, v]) => `${k}=${v}`), ...argv]
      : argv;
    let pid = 0;
    let timedOut = false;
    let timer: NodeJS.Timeout | undefined;
    let pidResolved!: () => void;
    const pidKnown = new Promise<void>((resolve) => {
      pidResolved = resolve;
    });
    const running = this.runtime.exec(containerId, {
      cmd,
      user: options.user ?? null,
      workingDir: options.cwd ?? null,
      env: options.env ?? {},
      stdin: options.stdin ?? null,
      // The engine's stream gives no way to hold the command back: a slow reader buffers here.
      onStdout: (c) => {
        const part = out.push(c);
        if (part.length) void options.onStdout?.(part)?.catch(() => {});
      },
      onStderr: (c) => {
        const part = err.push(c);
        if (part.length) void options.onStderr?.(part)?.catch(() => {});
      },
      onPid: (p) => {
        pid = p;
        pidResolved();
      },
    });
    if (options.timeoutMs) {
      const timeoutMs = options.timeoutMs;
      timer = setTimeout(async () => {
        timedOut = true;
        await Promise.race([pidKnown, new Promise((r) => setTimeout(r, 1000))]);
        if (pid) await killProcessTree(pid);
      }, timeoutMs);
    }
    try {
      const { exitCode } = await running;
      return {
        exitCode,
        stdout: out.toBuffer(),
        stderr: err.toBuffer(),
        stdoutTruncated: out.truncated,
        stdoutDroppedBytes: out.dropped,
        stderrDroppedBytes: err.dropped,
        stderrTruncated: err.truncated,
        timedOut,
        durationMs: Math.round(performance.now() - started),
      };
    } finally {
      if (timer) clearTimeout(timer);
    }
  }
}
