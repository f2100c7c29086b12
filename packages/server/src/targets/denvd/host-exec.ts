/**
 * A command run on a host over its byte streams: stdin fed as the host asks for it, stdout and
 * stderr handed on as the host sends them, each side waiting for the other's reader, so 1 GiB of
 * output costs a window of memory. Used by the API's exec and by the deployment kinds that run
 * commands (promote, replay), which is why it lives in the denvd target beside the hub, not in api/.
 */
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { commandDeadlineMs, DenvError, type OpParams, type OpResult } from "@denv/protocol";
import type { StackRef } from "../stack-lifecycle.ts";
import type { ExecOutcome, ExecRequest, OutputSink } from "../target.ts";
import type { HostOperations } from "./host-operations.ts";

export type ExecOnHost = Omit<OpParams<"exec">, "stdout_stream" | "stderr_stream" | "stdin_stream">;

/**
 * Runs a command on a host over its byte streams. `stdin` is sent as the host asks for it;
 * `onOutput` gets each chunk of output, and the host waits while the promise it returns is
 * pending. Resolves with the host's result once every byte of output was handed on.
 */
export async function execOverStreams(
  hosts: Pick<HostOperations, "streamCall">,
  hostId: string,
  params: ExecOnHost,
  stdin: Readable | Buffer | null,
  onOutput: (which: "stdout" | "stderr", chunk: Buffer) => void | Promise<void>,
): Promise<OpResult<"exec">> {
  // The command's own deadline, plus the round trip's margin: never a limit of the server's own.
  const timeoutMs = commandDeadlineMs(params.timeout_ms);
  const { streams, result } = await hosts.streamCall(
    hostId,
    "exec",
    stdin ? 3 : 2,
    ([out, err, input]) => ({
      ...params,
      stdout_stream: out as number,
      stderr_stream: err as number,
      ...(input ? { stdin_stream: input } : {}),
    }),
    { timeoutMs },
  );
  const [out, err, input] = streams;
  if (input && stdin) {
    // The command may finish before it read all of its stdin: what it did not take is dropped.
    input.on("error", () => {});
    void pipeline(Buffer.isBuffer(stdin) ? Readable.from([stdin]) : stdin, input).catch(() => {});
  }
  const drain = async (which: "stdout" | "stderr", s: Readable | undefined) => {
    if (!s) return;
    for await (const chunk of s) await onOutput(which, chunk as Buffer);
  };
  const reading = Promise.all([drain("stdout", out), drain("stderr", err)]);
  reading.catch(() => {});
  const r = await result;
  try {
    await reading;
  } catch {
    throw new DenvError("unavailable", "the host cut the command's output short; run it again");
  }
  return r;
}

/** A command in a service of a stack, asked for and answered in the port's own types. */
export async function execOnStack(
  hosts: Pick<HostOperations, "streamCall">,
  at: StackRef,
  req: ExecRequest,
  stdin: Readable | Buffer | null,
  onOutput: OutputSink,
): Promise<ExecOutcome> {
  const r = await execOverStreams(
    hosts,
    at.hostId,
    {
      stack_id: at.stackId,
      service: req.service,
      command: req.command,
      user: req.user,
      cwd: req.cwd,
      env: req.env,
      timeout_ms: req.timeoutMs,
      max_output_bytes: req.maxOutputBytes,
      ...(req.episodeClock ? { episode_clock: true } : {}),
      ...(req.tty ? { tty: req.tty } : {}),
    },
    stdin,
    onOutput,
  );
  return {
    exitCode: r.exit_code,
    stdoutTruncated: r.stdout_truncated,
    stderrTruncated: r.stderr_truncated,
    stdoutDroppedBytes: r.stdout_dropped_bytes,
    stderrDroppedBytes: r.stderr_dropped_bytes,
    timedOut: r.timed_out,
    durationMs: r.duration_ms,
  };
}
