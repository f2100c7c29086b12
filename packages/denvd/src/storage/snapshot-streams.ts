/**
 * Snapshots as byte streams, for replicas on other hosts: a host command's stdout (`btrfs send`,
 * `zfs send`, `tar -c`) read as a stream, and a stream fed to a host command's stdin (`btrfs
 * receive`, `zfs receive`, `tar -x`). A command that fails says why (its stderr's last lines); a
 * stream that fails or is cut kills the command, so no receive is left waiting on bytes that will
 * never come.
 */
import { spawn } from "node:child_process";
import { PassThrough, type Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenvError } from "@denv/protocol";
import { sanitizeTar } from "../stack/tar-sanitizer.ts";

/** A snapshot leaving the host: its bytes, and whether the command that makes them succeeded. */
export interface SnapshotSend {
  stream: Readable;
  /** Resolves once the command exited 0; rejects with its error otherwise. */
  done: Promise<void>;
  /** Stops the command (the reader went away). */
  cancel(): void;
}

function failure(file: string, args: string[], code: number | null, stderr: string): DenvError {
  const detail = stderr.trim().split("\n").slice(-3).join(" | ");
  return new DenvError(
    "storage_error",
    `${file} ${args.join(" ")} failed (${code === null ? "killed" : `exit ${code}`}): ${detail}`,
  );
}

/** A command's stdout as a stream. */
export function commandOutput(file: string, args: string[]): SnapshotSend {
  const child = spawn(file, args, { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (d: string) => {
    stderr = (stderr + d).slice(-4096);
  });
  const done = new Promise<void>((resolve, reject) => {
    child.once("error", (err) => reject(new DenvError("storage_error", `${file}: ${err.message}`)));
    child.once("close", (code) => (code === 0 ? resolve() : reject(failure(file, args, code, stderr))));
  });
  done.catch(() => {});
  // Read from the start, into a stream of its own: a pipe left unread until its reader is ready
  // lost a short stream's bytes when the command had already exited (seen with an empty snapshot's
  // 207-byte `btrfs send`). Backpressure still holds the command when nobody reads.
  const out = new PassThrough({ highWaterMark: 1024 * 1024 });
  child.stdout.pipe(out);
  child.stdout.once("error", (err) => out.destroy(err));
  return { stream: out, done, cancel: () => child.kill("SIGKILL") };
}

/** Feeds a stream to a command's stdin; resolves once the command took all of it and exited 0. */
export async function commandInput(file: string, args: string[], input: Readable): Promise<void> {
  const child = spawn(file, args, { stdio: ["pipe", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (d: string) => {
    stderr = (stderr + d).slice(-4096);
  });
  const exited = new Promise<number | null>((resolve, reject) => {
    child.once("error", (err) => reject(new DenvError("storage_error", `${file}: ${err.message}`)));
    child.once("close", (code) => resolve(code));
  });
  exited.catch(() => {});
  try {
    await pipeline(input, child.stdin);
  } catch (err) {
    // A cut stream must not end as a clean EOF: the command is killed, not left to finish.
    child.kill("SIGKILL");
    await exited.catch(() => {});
    throw new DenvError("storage_error", `the stream into ${file} failed: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const code = await exited;
  if (code !== 0) throw failure(file, args, code, stderr);
}

/** A directory's tree as a tar (owners as numbers, so they mean the same on the host that reads it). */
export function tarOf(path: string): SnapshotSend {
  return commandOutput("tar", ["--numeric-owner", "-C", path, "-cf", "-", "."]);
}

/**
 * A tar from another host, checked (tar-sanitizer.ts: nothing lands outside `dir`, no entry passes
 * through a link, no device or FIFO) and extracted into `dir` as the owners it names.
 */
export async function extractTarInto(input: Readable, dir: string): Promise<void> {
  const checked = new PassThrough({ highWaterMark: 1024 * 1024 });
  const checking = sanitizeTar(input, checked, { linksAreData: true });
  checking.catch(() => checked.destroy(new Error("the tar was refused")));
  const [check, extract] = await Promise.allSettled([
    checking,
    commandInput("tar", ["--numeric-owner", "--same-owner", "-p", "-x", "-C", dir, "-f", "-"], checked),
  ]);
  if (check.status === "rejected") throw check.reason;
  if (extract.status === "rejected") throw extract.reason;
}
