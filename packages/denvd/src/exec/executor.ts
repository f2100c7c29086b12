/**
 * The exec port. Frameworks run thousands of commands per episode, so exec sits behind its own
 * interface: the engine path (engine-executor.ts) pays a runc exec per command; a faster path (an
 * agent inside the sandbox) can serve the same interface.
 */
import type { Socket } from "node:net";
import type { Readable } from "node:stream";

export interface ExecOptions {
  /** argv, or a shell string run with `sh -c`. */
  command: string[] | string;
  user?: string | null;
  cwd?: string | null;
  env?: Record<string, string>;
  /**
   * Start from `env` alone, none of the container's variables (graders: an LD_PRELOAD or PATH the
   * service declares must not reach them, not even the first program). PATH is then env's.
   */
  cleanEnv?: boolean;
  stdin?: Buffer | Readable | null;
  /** Kills the whole process tree when exceeded; the result says timedOut. */
  timeoutMs?: number | null;
  /** Per stream; output beyond it is dropped and flagged truncated. Default 16 MiB (Infinity: none). */
  maxOutputBytes?: number;
  /**
   * Output as it comes (only what is within maxOutputBytes). A promise returned holds the command's
   * output until it settles, so a slow reader slows the command instead of filling memory; a
   * rejected one ends the command.
   */
  onStdout?: (chunk: Buffer) => void | Promise<void>;
  onStderr?: (chunk: Buffer) => void | Promise<void>;
  /** false: output goes only to onStdout/onStderr, and the result's stdout and stderr are empty. */
  keepOutput?: boolean;
  /** On a terminal of this size: output comes as stdout alone (a terminal has one). */
  tty?: { rows: number; cols: number } | null;
}

export interface ExecResult {
  /** The exit status; 128+N for a death by signal N (a timeout kill gives 137). */
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
  stdoutTruncated: boolean;
  /** Bytes of output past maxOutputBytes, dropped (0 when nothing was). */
  stdoutDroppedBytes: number;
  stderrDroppedBytes: number;
  stderrTruncated: boolean;
  timedOut: boolean;
  durationMs: number;
}

/**
 * Where bytes read from a container go, as they come. A promise returned holds the reading back
 * until it settles (a slow reader slows the read instead of filling memory); a rejected one ends it.
 */
export type FileSink = (chunk: Buffer) => void | Promise<void>;

/** A file operation in a container, as a user (stat, list, mkdir, remove, rename). */
export type FsRequest =
  | { op: "stat"; path: string }
  | { op: "list"; path: string; depth: number }
  | { op: "mkdir"; path: string; parents: boolean }
  | { op: "remove"; path: string; recursive: boolean }
  | { op: "rename"; path: string; to: string };

/** A path as the agent saw it (lstat: a link is reported as a link). */
export interface FsEntryRaw {
  /** The path (stat), or the name relative to the listed directory (list). */
  name: string;
  type: "file" | "directory" | "symlink" | "other";
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtimeMs: number;
  linkTarget: string | null;
  owner: string | null;
  group: string | null;
}

export interface Executor {
  exec(containerId: string, options: ExecOptions): Promise<ExecResult>;
  /** A byte stream to a TCP port inside the container (loopback), where the executor can reach it. */
  openPort?(containerId: string, port: number): Promise<Socket>;
  /**
   * A tar of a path in the container, walked inside it without following any link, to a sink;
   * null when this executor cannot reach the container that way right now.
   */
  readFiles?(
    containerId: string,
    path: string,
    options: { user?: string | null; sink: FileSink },
  ): Promise<{ bytes: number } | null>;
  /**
   * Extracts a checked tar at a path in the container as a user (the container's own by default),
   * creating missing parents and replacing nothing of another kind; null when this executor cannot
   * reach the container that way right now.
   */
  writeFiles?(
    containerId: string,
    path: string,
    tar: Readable,
    options: { user?: string | null },
  ): Promise<{ entries: number; bytes: number } | null>;
  /** A file operation as a user; null when this executor cannot reach the container that way now. */
  fsOp?(
    containerId: string,
    request: FsRequest,
    options: { user?: string | null },
  ): Promise<{ entries: FsEntryRaw[]; created: boolean } | null>;
}

export const DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024;

/** Collects a stream's bytes up to a limit, flagging what was dropped. */
export class BoundedBuffer {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  /** How many bytes went past the limit (they are counted, not kept). */
  dropped = 0;
  private readonly limit: number;
  /** false: bytes are counted against the limit but not kept (they were streamed elsewhere). */
  private readonly keep: boolean;

  constructor(limit: number, keep = true) {
    this.limit = limit;
    this.keep = keep;
  }

  /** Takes a chunk; returns the part of it within the limit. */
  push(chunk: Buffer): Buffer {
    const room = this.limit - this.size;
    if (room <= 0) {
      this.truncated = this.truncated || chunk.length > 0;
      this.dropped += chunk.length;
      return chunk.subarray(0, 0);
    }
    const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
    if (part.length < chunk.length) {
      this.truncated = true;
      this.dropped += chunk.length - part.length;
    }
    if (this.keep) this.chunks.push(part);
    this.size += part.length;
    return part;
  }

  toBuffer(): Buffer {
    return Buffer.concat(this.chunks, this.size);
  }
}
