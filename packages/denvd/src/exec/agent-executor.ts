/**
 * Exec, ports and file reads through denv-agent, the small static program denvd starts once inside
 * each container: a command costs a fork and exec in the sandbox and a unix-socket round trip, not
 * a runc exec. Containers whose agent is not connected fall back to the engine.
 *
 * What the agent sends is untrusted (root in an image sandbox can replace it): frames are bounded
 * in size and output in total, and nothing it says is used as a path or an address on the host.
 */

import type { Socket } from "node:net";
import type { Readable } from "node:stream";
import { DenvError, type ErrorCode } from "@denv/protocol";
import {
  AGENT_PROTOCOL_VERSION,
  decodeRecord,
  ENTRY_TYPES,
  encodeRequest,
  FLAGS,
  FRAME_IN,
  FRAME_OUT,
  FS_OP,
  FS_STATUS,
} from "./agent-protocol.ts";
import {
  BoundedBuffer,
  DEFAULT_MAX_OUTPUT_BYTES,
  type ExecOptions,
  type ExecResult,
  type Executor,
  type FileSink,
  type FsEntryRaw,
  type FsRequest,
} from "./executor.ts";

export interface AgentTarget {
  /** A fresh connection to the container's agent, or null when it is not connected. */
  dial: () => Promise<Socket | null>;
  /** The service's own user, the default for commands (null: root). */
  defaultUser: string | null;
  /** The container's configuration sets HOME: commands keep it instead of their user's home. */
  homeSet: boolean;
  /** The protocol version its agent said (an older denvd's agent, in a container it started), if known. */
  version?: () => number | null;
}

/** The agent protocol that brought terminals (FLAG_EXEC_TTY with rows and cols). */
const TTY_SINCE = 3;

const FS_OPS = {
  stat: FS_OP.STAT,
  list: FS_OP.LIST,
  mkdir: FS_OP.MKDIR,
  remove: FS_OP.REMOVE,
  rename: FS_OP.RENAME,
} as const;
/** One entry record of the agent's (agent-fsops.c); null when it is not one. */
function parseEntry(b: Buffer): FsEntryRaw | null {
  const e = decodeRecord("entry", b);
  if (!e) return null;
  const type = ENTRY_TYPES[e.type] ?? "other";
  return {
    name: e.name,
    type,
    mode: e.mode,
    uid: e.uid,
    gid: e.gid,
    size: Number(e.size),
    mtimeMs: Number(e.mtime) * 1000 + Math.floor(e.nsec / 1e6),
    linkTarget: type === "symlink" ? e.link : null,
    owner: e.owner || null,
    group: e.group || null,
  };
}

/** What a files request ended with (FS_STATUS, agent-protocol.ts), as denv's error codes. */
const FS_ERRORS: Record<number, ErrorCode> = {
  [FS_STATUS.NOT_FOUND]: "not_found",
  [FS_STATUS.PERMISSION]: "permission_denied",
  [FS_STATUS.IS_DIR]: "is_directory",
  [FS_STATUS.NOT_DIR]: "not_a_directory",
  [FS_STATUS.EXISTS]: "conflict",
  [FS_STATUS.NO_SPACE]: "insufficient_storage",
  [FS_STATUS.INVALID]: "invalid_argument",
  [FS_STATUS.NOT_EMPTY]: "conflict",
  [FS_STATUS.NO_USER]: "invalid_argument",
  [FS_STATUS.LINK]: "invalid_path",
};

/** The agent's message for a failed files request, in denv's words (its text names container paths only). */
function fsError(status: number, message: string, fallback: string): DenvError {
  const code = FS_ERRORS[status] ?? "internal";
  const text = message.replace(/\s+$/, "").slice(0, 1000) || fallback;
  return new DenvError(code, code === "internal" ? `${fallback}: ${text}` : text);
}
/** The agent sends at most 256 KiB a frame; anything larger is not the agent speaking. */
const MAX_FRAME_BYTES = 1024 * 1024;

/** A frame's head: its type byte and its payload's length. */
function frameHead(type: number, length: number): Buffer {
  const b = Buffer.alloc(5);
  b[0] = type;
  b.writeUInt32LE(length, 1);
  return b;
}

/** Resolves when the socket can take more, or has closed: one that closes while full never drains. */
function drainedOrClosed(sock: Socket): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      sock.off("drain", done);
      sock.off("close", done);
      resolve();
    };
    sock.on("drain", done);
    sock.on("close", done);
  });
}

function frame(type: number, data: Buffer = Buffer.alloc(0)): Buffer {
  return Buffer.concat([frameHead(type, data.length), data]);
}

/**
 * Reads the agent's frames off a socket: type, then payload, each bounded. Chunks are queued and
 * a frame is copied out once, when whole (a frame in one chunk is not copied at all).
 */
function readFrames(
  sock: Socket,
  onFrame: (type: number, data: Buffer) => void,
  onBad: (err: Error) => void,
): void {
  const queue: Buffer[] = [];
  let queued = 0;
  /** The first n queued bytes, removed from the queue. */
  const take = (n: number): Buffer => {
    const head = queue[0] as Buffer;
    if (head.length >= n) {
      const out = head.subarray(0, n);
      if (head.length === n) queue.shift();
      else queue[0] = head.subarray(n);
      queued -= n;
      return out;
    }
    const out = Buffer.allocUnsafe(n);
    let off = 0;
    while (off < n) {
      const b = queue[0] as Buffer;
      const k = Math.min(b.length, n - off);
      b.copy(out, off, 0, k);
      off += k;
      if (k === b.length) queue.shift();
      else queue[0] = b.subarray(k);
    }
    queued -= n;
    return out;
  };
  /** The 5-byte header of the next frame, without removing it. */
  const peekHeader = (): Buffer => {
    const head = queue[0] as Buffer;
    if (head.length >= 5) return head;
    const h = take(5);
    queue.unshift(h);
    queued += 5;
    return h;
  };
  sock.on("data", (chunk: Buffer) => {
    queue.push(chunk);
    queued += chunk.length;
    while (queued >= 5) {
      const h = peekHeader();
      const len = h.readUInt32LE(1);
      if (len > MAX_FRAME_BYTES) {
        sock.destroy();
        onBad(
          new DenvError(
            "unavailable",
            "the service's agent broke the protocol (a frame larger than any it writes)",
          ),
        );
        return;
      }
      if (queued < 5 + len) break;
      const type = h[0] as number;
      take(5);
      onFrame(type, len ? take(len) : Buffer.alloc(0));
      if (sock.destroyed) return;
    }
  });
  sock.resume();
}

export class AgentExecutor implements Executor {
  private readonly fallback: Executor;
  private readonly targets: (containerId: string) => AgentTarget | null;

  constructor(fallback: Executor, targets: (containerId: string) => AgentTarget | null) {
    this.fallback = fallback;
    this.targets = targets;
  }

  async exec(containerId: string, options: ExecOptions): Promise<ExecResult> {
    const target = this.targets(containerId);
    const sock = target ? await target.dial() : null;
    if (!target || !sock) return this.fallback.exec(containerId, options); // no agent (yet): the engine
    return this.run(sock, target, options);
  }

  /**
   * A byte stream to 127.0.0.1:port inside the container, relayed by its agent (port mode): the
   * container needs no address the host can route to. Rejects when nothing listens there.
   */
  async openPort(containerId: string, port: number): Promise<Socket> {
    const sock = await this.targets(containerId)?.dial();
    if (!sock) throw new Error("the service's agent is not running");
    sock.write(encodeRequest("port", { port }));
    const status = await new Promise<number>((resolve, reject) => {
      const onData = (chunk: Buffer) => {
        sock.off("data", onData);
        sock.pause();
        // Anything after the status byte is the service's first bytes: put it back.
        if (chunk.length > 1) sock.unshift(chunk.subarray(1));
        resolve(chunk[0] ?? 255);
      };
      sock.on("data", onData);
      sock.once("close", () => reject(new Error("the agent closed the connection")));
      sock.once("error", reject);
      sock.resume();
    });
    if (status !== 0) {
      sock.destroy();
      throw new Error(`nothing accepts connections on port ${port} in the container (errno ${status})`);
    }
    sock.removeAllListeners("close");
    sock.removeAllListeners("error");
    return sock;
  }

  /**
   * A tar of `path` in the container, made by the agent, to `sink` as it comes: every component
   * walked without following a link, links inside archived as links. A promise the sink returns
   * holds the agent back until it settles (a rejected one ends the read). Null when the agent is
   * not connected.
   */
  async readFiles(
    containerId: string,
    path: string,
    options: { user?: string | null; sink: FileSink },
  ): Promise<{ bytes: number } | null> {
    const sock = await this.targets(containerId)?.dial();
    if (!sock) return null;
    sock.write(encodeRequest("files", { path, user: options.user ?? "" }));
    const message: Buffer[] = [];
    let bytes = 0;
    const status = await new Promise<number>((resolve, reject) => {
      let done = false;
      readFrames(
        sock,
        (type, data) => {
          if (done) return;
          if (type === FRAME_OUT.STDOUT) {
            bytes += data.length;
            const held = options.sink(data);
            if (held) {
              sock.pause();
              held.then(
                () => sock.resume(),
                (e: Error) => {
                  done = true;
                  sock.destroy();
                  reject(e);
                },
              );
            }
          } else if (type === FRAME_OUT.STDERR) {
            if (message.length < 8) message.push(data);
          } else if (type === FRAME_OUT.STATUS) {
            const r = decodeRecord("status", data);
            if (!r) return;
            done = true;
            resolve(r.status);
            sock.destroy();
          }
        },
        reject,
      );
      sock.on("close", () => {
        if (!done)
          reject(
            new DenvError("unavailable", "the service's agent closed the connection before it finished"),
          );
      });
      sock.on("error", () => {});
    });
    if (status !== 0) {
      const text = Buffer.concat(message).toString("utf8");
      if (status === FS_STATUS.NOT_FOUND)
        throw new DenvError("not_found", `${path} does not exist in the service`);
      throw fsError(status, text, `reading ${path} failed`);
    }
    return { bytes };
  }

  /**
   * Extracts a tar (checked by tar-sanitizer.ts) at `path` in the container, by its agent, as
   * `user`: files owned by that user, missing parents made, and nothing replaced by something of
   * another kind (is_directory / not_a_directory). As root the tar's owners are kept. Null when
   * the agent is not connected.
   */
  async writeFiles(
    containerId: string,
    path: string,
    tar: Readable,
    options: { user?: string | null },
  ): Promise<{ entries: number; bytes: number } | null> {
    const target = this.targets(containerId);
    const sock = target ? await target.dial() : null;
    if (!target || !sock) return null;
    const user = options.user ?? target.defaultUser ?? "";
    const asRoot = /^(|0|root)(:.*)?$/.test(user);
    sock.write(encodeRequest("put", { path, user, flags: asRoot ? FLAGS.PUT_KEEP_OWNERS : 0 }));
    const message: Buffer[] = [];
    const result = new Promise<{ status: number; entries: number; bytes: number }>((resolve, reject) => {
      let done = false;
      readFrames(
        sock,
        (type, data) => {
          if (type === FRAME_OUT.STDERR) {
            if (message.length < 8) message.push(data);
          } else if (type === FRAME_OUT.STATUS) {
            const r = decodeRecord("put_status", data);
            if (!r) return;
            done = true;
            resolve({ status: r.status, entries: r.entries, bytes: Number(r.bytes) });
            sock.destroy();
          }
        },
        reject,
      );
      sock.on("close", () => {
        if (!done)
          reject(
            new DenvError("unavailable", "the service's agent closed the connection before it finished"),
          );
      });
      sock.on("error", () => {});
    });
    result.catch(() => {});
    // The tar goes in frames of at most 1 MiB, waiting for the socket to drain: memory stays flat.
    // A frame's head and its bytes are written together (corked: one writev), the bytes in the
    // memory they arrived in, not copied into a frame.
    for await (const chunk of tar) {
      const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
      for (let i = 0; i < b.length && !sock.destroyed; i += 1 << 20) {
        const piece = b.subarray(i, i + (1 << 20));
        sock.cork();
        sock.write(frameHead(FRAME_IN.DATA, piece.length));
        const room = sock.write(piece);
        sock.uncork();
        if (!room) await drainedOrClosed(sock);
      }
      if (sock.destroyed) break;
    }
    if (!sock.destroyed) sock.write(frame(FRAME_IN.END));
    const r = await result;
    if (r.status !== 0)
      throw fsError(r.status, Buffer.concat(message).toString("utf8"), `writing to ${path} failed`);
    return { entries: r.entries, bytes: r.bytes };
  }

  /** A file operation by the container's agent, as `user` (the container's own by default). */
  async fsOp(
    containerId: string,
    request: FsRequest,
    options: { user?: string | null },
  ): Promise<{ entries: FsEntryRaw[]; created: boolean } | null> {
    const target = this.targets(containerId);
    const sock = target ? await target.dial() : null;
    if (!target || !sock) return null;
    const user = options.user ?? target.defaultUser ?? "";
    const deep =
      (request.op === "mkdir" && request.parents) || (request.op === "remove" && request.recursive);
    sock.write(
      encodeRequest("fsop", {
        op: FS_OPS[request.op],
        path: request.path,
        to: request.op === "rename" ? request.to : "",
        user,
        flags: deep ? FLAGS.FSOP_DEEP : 0,
        depth: request.op === "list" ? request.depth : 0,
      }),
    );
    const entries: FsEntryRaw[] = [];
    const message: Buffer[] = [];
    let created = false;
    const status = await new Promise<number>((resolve, reject) => {
      let done = false;
      readFrames(
        sock,
        (type, data) => {
          if (type === FRAME_OUT.ENTRIES) {
            const e = parseEntry(data);
            if (!e) {
              sock.destroy();
              reject(
                new DenvError("unavailable", "the service's agent broke the protocol (a malformed entry)"),
              );
            } else entries.push(e);
          } else if (type === FRAME_OUT.CREATED) created = data[0] === 1;
          else if (type === FRAME_OUT.STDERR) {
            if (message.length < 8) message.push(data);
          } else if (type === FRAME_OUT.STATUS) {
            const r = decodeRecord("status", data);
            if (!r) return;
            done = true;
            resolve(r.status);
            sock.destroy();
          }
        },
        reject,
      );
      sock.on("close", () => {
        if (!done)
          reject(
            new DenvError("unavailable", "the service's agent closed the connection before it finished"),
          );
      });
      sock.on("error", () => {});
    });
    if (status !== 0)
      throw fsError(status, Buffer.concat(message).toString("utf8"), `${request.op} ${request.path} failed`);
    return { entries, created };
  }

  private async run(sock: Socket, target: AgentTarget, options: ExecOptions): Promise<ExecResult> {
    const started = performance.now();
    const limit = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    const keep = options.keepOutput ?? true;
    const out = new BoundedBuffer(limit, keep);
    const err = new BoundedBuffer(limit, keep);
    const argv = typeof options.command === "string" ? ["sh", "-c", options.command] : options.command;
    // The user is resolved by the agent, inside the container, from the container's own files.
    const user = options.user ?? target.defaultUser ?? "";
    const env = Object.entries(options.env ?? {}).map(([k, v]) => `${k}=${v}`);
    // HOME from the user's passwd entry: when the container sets none, and whenever the command
    // runs as another user than the service's (the container's HOME is its own user's).
    const home = !target.homeSet || (options.user != null && options.user !== target.defaultUser);
    // A container an older denvd started runs that denvd's agent: it is spoken to as it speaks.
    const agentVersion = target.version?.() ?? AGENT_PROTOCOL_VERSION;
    if (options.tty && agentVersion < TTY_SINCE) {
      sock.destroy();
      throw new DenvError(
        "unavailable",
        "this service's agent predates terminals (its container was started by an older denvd): fork or redeploy the environment for a terminal",
      );
    }
    sock.write(
      encodeRequest(
        "exec",
        {
          argv,
          env,
          cwd: options.cwd ?? "",
          user,
          flags:
            (home ? FLAGS.EXEC_HOME : 0) |
            (options.cleanEnv ? FLAGS.EXEC_CLEAN_ENV : 0) |
            (options.tty ? FLAGS.EXEC_TTY : 0),
          rows: options.tty?.rows ?? 0,
          cols: options.tty?.cols ?? 0,
        },
        agentVersion,
      ),
    );
    let timedOut = false;
    let hangUp: NodeJS.Timeout | undefined;
    const timer = options.timeoutMs
      ? setTimeout(() => {
          timedOut = true;
          sock.write(frame(FRAME_IN.KILL));
          // The kill frame may wait behind stdin the command never reads: hanging up kills too.
          hangUp = setTimeout(() => sock.destroy(), 1000);
        }, options.timeoutMs)
      : undefined;
    let code: number | undefined;
    let readerGone: Error | null = null;
    /** Output to its reader; while the reader is slow the agent's socket is not read. */
    const deliver = (chunk: Buffer, into: BoundedBuffer, to: ExecOptions["onStdout"]) => {
      const part = into.push(chunk);
      if (!to || part.length === 0) return;
      const held = to(part);
      if (held) {
        sock.pause();
        held.then(
          () => sock.resume(),
          (e: Error) => {
            // The reader went away: the agent kills the command when its connection closes.
            readerGone = e;
            sock.destroy();
          },
        );
      }
    };
    const exitCode = new Promise<number>((resolve, reject) => {
      readFrames(
        sock,
        (type, data) => {
          if (type === FRAME_OUT.STDOUT) deliver(data, out, options.onStdout);
          else if (type === FRAME_OUT.STDERR) deliver(data, err, options.onStderr);
          else if (type === FRAME_OUT.STATUS) {
            const r = decodeRecord("status", data);
            if (r) {
              code = r.status;
              resolve(code);
            }
          }
        },
        reject,
      );
      sock.on("close", () => {
        if (code !== undefined) return;
        if (timedOut) resolve(137);
        else if (readerGone)
          reject(new DenvError("unavailable", "the command's output had no reader any more; it was killed"));
        else
          reject(
            new DenvError(
              "unavailable",
              "the service's agent closed the connection before the command's exit status",
            ),
          );
      });
      // A write after the command ended (stdin it did not read) may fail; the status is what counts.
      sock.on("error", (e) => {
        if (code === undefined && !/EPIPE|ECONNRESET/.test((e as NodeJS.ErrnoException).code ?? ""))
          reject(e);
      });
    });
    exitCode.catch(() => {});
    // stdin: streamed in frames of at most 1 MiB as the socket drains, then its end; beside the
    // output, so a command that answers before it has read all its input is not held up.
    const pumpStdin = async () => {
      const send = async (b: Buffer) => {
        for (let i = 0; i < b.length && !sock.destroyed && code === undefined; i += 1 << 20)
          if (!sock.write(frame(FRAME_IN.DATA, b.subarray(i, i + (1 << 20))))) await drainedOrClosed(sock);
      };
      const input = options.stdin;
      if (Buffer.isBuffer(input)) await send(input);
      else if (input)
        for await (const chunk of input as Readable) {
          if (sock.destroyed || code !== undefined) break;
          await send(Buffer.from(chunk as Buffer));
        }
      if (!sock.destroyed && code === undefined) sock.write(frame(FRAME_IN.END));
    };
    pumpStdin().catch(() => {
      // The input failed (its sender went away): the command gets the end of its stdin.
      if (!sock.destroyed && code === undefined) sock.write(frame(FRAME_IN.END));
    });
    try {
      const code = await exitCode;
      return {
        exitCode: code,
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
      if (hangUp) clearTimeout(hangUp);
      sock.destroy();
    }
  }
}
