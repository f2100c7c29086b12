/**
 * Exec through denv-agent, the small static program denvd starts once inside each container: a
 * command costs a fork and exec in the sandbox and a unix-socket round trip, not a runc exec.
 * Containers without a running agent (or where it cannot be reached) fall back to the engine.
 */
import { readFile } from "node:fs/promises";
import { connect, type Socket } from "node:net";
import type { Readable } from "node:stream";
import {
  BoundedBuffer,
  DEFAULT_MAX_OUTPUT_BYTES,
  type ExecOptions,
  type ExecResult,
  type Executor,
} from "./executor.ts";

export interface AgentTarget {
  socketPath: string;
  /** Host path of the container's root filesystem, to resolve user names from its /etc/passwd. */
  rootfsPath: string | null;
  /** The service's own user, the default for commands (null: root). */
  defaultUser: string | null;
}

const KEEP = 0xffffffff;

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0);
  return b;
}

function str(s: string): Buffer {
  const body = Buffer.from(s);
  return Buffer.concat([u32(body.length), body]);
}

function frame(type: number, data: Buffer = Buffer.alloc(0)): Buffer {
  return Buffer.concat([Buffer.from([type]), u32(data.length), data]);
}

/** uid and gid for "name", "uid", "uid:gid" or "name:group", from the container's own files. */
export async function resolveUser(
  user: string | null,
  rootfs: string | null,
): Promise<{ uid: number; gid: number }> {
  if (!user) return { uid: 0, gid: 0 };
  const [u = "", g] = user.split(":");
  const table = async (file: string) =>
    rootfs
      ? (await readFile(`${rootfs}/etc/${file}`, "utf8").catch(() => ""))
          .split("\n")
          .map((l) => l.split(":"))
          .filter((f) => f.length >= 4)
      : [];
  let uid: number;
  let gid: number | undefined;
  if (/^\d+$/.test(u)) {
    uid = Number(u);
    gid = Number((await table("passwd")).find((f) => f[2] === u)?.[3] ?? u);
  } else {
    const row = (await table("passwd")).find((f) => f[0] === u);
    // Docker's wording, which frameworks built on `docker exec` (Inspect's self-check) look for.
    if (!row) throw new Error(`unable to find user ${u}: no matching entries in passwd file`);
    uid = Number(row[2]);
    gid = Number(row[3]);
  }
  if (g !== undefined) {
    gid = /^\d+$/.test(g)
      ? Number(g)
      : Number((await table("group")).find((f) => f[0] === g)?.[2] ?? Number.NaN);
    if (Number.isNaN(gid)) throw new Error(`unknown group ${g}`);
  }
  return { uid, gid: gid ?? uid };
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
    if (!target) return this.fallback.exec(containerId, options);
    let sock: Socket;
    try {
      sock = await new Promise<Socket>((resolve, reject) => {
        const s = connect(target.socketPath);
        s.once("connect", () => resolve(s));
        s.once("error", reject);
      });
    } catch {
      return this.fallback.exec(containerId, options); // no agent there (yet): the engine serves it
    }
    return this.run(sock, target, options);
  }

  /**
   * A byte stream to 127.0.0.1:port inside the container, relayed by its agent (port mode): the
   * container needs no address the host can route to. Rejects when nothing listens there.
   */
  async openPort(containerId: string, port: number): Promise<Socket> {
    const target = this.targets(containerId);
    if (!target) throw new Error("this container has no agent to reach its ports through");
    const sock = await new Promise<Socket>((resolve, reject) => {
      const s = connect(target.socketPath);
      s.once("connect", () => resolve(s));
      s.once("error", reject);
    });
    sock.write(Buffer.concat([u32(KEEP), u32(port)]));
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
    });
    if (status !== 0) {
      sock.destroy();
      throw new Error(`nothing accepts connections on port ${port} in the container (errno ${status})`);
    }
    sock.removeAllListeners("close");
    sock.removeAllListeners("error");
    return sock;
  }

  private async run(sock: Socket, target: AgentTarget, options: ExecOptions): Promise<ExecResult> {
    const started = performance.now();
    const limit = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    const out = new BoundedBuffer(limit);
    const err = new BoundedBuffer(limit);
    const argv = typeof options.command === "string" ? ["sh", "-c", options.command] : options.command;
    const user = options.user ?? target.defaultUser;
    let ids: { uid: number; gid: number };
    try {
      ids = await resolveUser(user, target.rootfsPath);
    } catch (e) {
      sock.destroy();
      return {
        exitCode: 126,
        stdout: Buffer.alloc(0),
        stderr: Buffer.from(`${(e as Error).message}\n`),
        stdoutTruncated: false,
        stderrTruncated: false,
        timedOut: false,
        durationMs: 0,
      };
    }
    const env = Object.entries(options.env ?? {}).map(([k, v]) => `${k}=${v}`);
    sock.write(
      Buffer.concat([
        u32(argv.length),
        ...argv.map(str),
        u32(env.length),
        ...env.map(str),
        str(options.cwd ?? ""),
        u32(user ? ids.uid : KEEP),
        u32(user ? ids.gid : KEEP),
      ]),
    );
    let timedOut = false;
    const timer = options.timeoutMs
      ? setTimeout(() => {
          timedOut = true;
          sock.write(frame(9));
        }, options.timeoutMs)
      : undefined;
    let code: number | undefined;
    const exitCode = new Promise<number>((resolve, reject) => {
      let buf: Buffer = Buffer.alloc(0);
      sock.on("data", (chunk: Buffer) => {
        buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
        while (buf.length >= 5) {
          const len = buf.readUInt32LE(1);
          if (buf.length < 5 + len) break;
          const type = buf[0];
          const data = buf.subarray(5, 5 + len);
          buf = buf.subarray(5 + len);
          if (type === 1) {
            out.push(data);
            options.onStdout?.(data);
          } else if (type === 2) {
            err.push(data);
            options.onStderr?.(data);
          } else if (type === 3) {
            code = data.readInt32LE(0);
            resolve(code);
          }
        }
      });
      sock.on("close", () => {
        if (code === undefined) reject(new Error("the agent closed the connection before the exit status"));
      });
      // A write after the command ended (stdin it did not read) may fail; the status is what counts.
      sock.on("error", (e) => {
        if (code === undefined && !/EPIPE|ECONNRESET/.test((e as NodeJS.ErrnoException).code ?? ""))
          reject(e);
      });
    });
    // stdin: streamed in frames, then its end.
    const input = options.stdin;
    if (input) {
      if (Buffer.isBuffer(input)) {
        for (let i = 0; i < input.length; i += 1 << 20)
          sock.write(frame(0, input.subarray(i, i + (1 << 20))));
      } else for await (const chunk of input as Readable) sock.write(frame(0, Buffer.from(chunk as Buffer)));
    }
    sock.write(frame(1));
    try {
      const code = await exitCode;
      return {
        exitCode: code,
        stdout: out.toBuffer(),
        stderr: err.toBuffer(),
        stdoutTruncated: out.truncated,
        stderrTruncated: err.truncated,
        timedOut,
        durationMs: Math.round(performance.now() - started),
      };
    } finally {
      if (timer) clearTimeout(timer);
      sock.destroy();
    }
  }
}
