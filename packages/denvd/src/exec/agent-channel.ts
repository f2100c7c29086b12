/**
 * The channel between denvd and the denv-agent in each container. denvd listens, the agent dials:
 * per container, a unix socket in a host directory only root can enter, mounted read-only into the
 * container at /.denv/run. The agent keeps a control connection open; for each request denvd
 * writes a random nonce on it and the agent opens a fresh connection that starts with that nonce.
 *
 * Invariant (DESIGN, trust boundaries): denvd never opens, connects to or resolves a path a
 * container can change. The socket and its directory are denvd's and read-only in the container;
 * nothing the container writes appears there, and the worst a process in the container can do
 * is connect and speak for its own container. Whatever arrives is bounded (see AgentExecutor).
 */
import { createHash, randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";

/** Where the socket is inside the container (the directory is a read-only bind of agentDir). */
export const AGENT_RUN_DIR = "/.denv/run";
export const AGENT_SOCKET_NAME = "d.sock";

/** Connections that have not said who they are within this long are closed. */
const HELLO_TIMEOUT_MS = 2000;
/** Connections per container that have not said who they are: more are refused. */
const MAX_UNIDENTIFIED = 32;
/** Longest unix socket path the kernel takes (sun_path, 108 bytes with its NUL). */
const MAX_SOCKET_PATH = 107;

interface Listener {
  server: Server;
  control: Socket | null;
  /** The protocol version the connected agent said in its hello. */
  version: number | null;
  unidentified: number;
  waiting: ((control: Socket) => void)[];
}

export class AgentChannel {
  private readonly baseDir: string;
  private readonly listeners = new Map<string, Listener>();
  private readonly dials = new Map<string, (sock: Socket) => void>();
  private readonly maxUnidentified: number;

  /**
   * maxUnidentified: connections per listener not yet identified (default 32, against a container
   * flooding its socket; denvd's own host agent, on a socket only root reaches, takes more).
   */
  constructor(stateDir: string, options: { maxUnidentified?: number } = {}) {
    this.maxUnidentified = options.maxUnidentified ?? MAX_UNIDENTIFIED;
    this.baseDir = join(stateDir, "agents");
    const probe = this.socketPath("0123456789abcdef");
    if (Buffer.byteLength(probe) > MAX_SOCKET_PATH) {
      throw new Error(
        `the state directory ${stateDir} is too long a path for the agents' sockets (${probe} is over ${MAX_SOCKET_PATH} bytes); use a shorter --state-dir`,
      );
    }
  }

  /** A short, fixed key per container (its socket path must stay under the kernel's limit). */
  static keyOf(environmentId: string, service: string): string {
    return createHash("sha256").update(`${environmentId}/${service}`).digest("hex").slice(0, 16);
  }

  /** The host directory mounted read-only at /.denv/run. */
  dirOf(key: string): string {
    return join(this.baseDir, key);
  }

  private socketPath(key: string): string {
    return join(this.dirOf(key), AGENT_SOCKET_NAME);
  }

  /** Listens for a container's agent (before the container starts, or again after a restart). */
  async listen(key: string): Promise<string> {
    const existing = this.listeners.get(key);
    if (existing) return this.dirOf(key);
    const dir = this.dirOf(key);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chmodSync(dir, 0o700);
    rmSync(this.socketPath(key), { force: true });
    const l: Listener = {
      server: createServer(),
      control: null,
      version: null,
      unidentified: 0,
      waiting: [],
    };
    l.server.on("connection", (sock) => this.accept(l, sock));
    l.server.on("error", () => {});
    await new Promise<void>((resolve, reject) => {
      l.server.once("error", reject);
      l.server.listen(this.socketPath(key), () => resolve());
    });
    // Listening for agents never keeps the process alive by itself (work in flight does).
    l.server.unref();
    this.listeners.set(key, l);
    return dir;
  }

  /** Stops listening for a container and removes its directory. */
  async close(key: string): Promise<void> {
    const l = this.listeners.get(key);
    this.listeners.delete(key);
    if (l) {
      l.control?.destroy();
      await new Promise<void>((r) => l.server.close(() => r()));
    }
    rmSync(this.dirOf(key), { recursive: true, force: true });
  }

  /**
   * Lets go of a container's agent for a moment in which its processes must hold no connection to
   * denvd (a process checkpoint): stops listening and removes the socket (the agent's redials then
   * fail and it backs off, at most 160 ms apart), ends the control connection and waits until the
   * agent has closed its end. listen() takes it back. False when the agent did not close in time.
   */
  async detach(key: string, timeoutMs = 2000): Promise<boolean> {
    const l = this.listeners.get(key);
    if (!l) return true;
    this.listeners.delete(key);
    l.server.close();
    rmSync(this.socketPath(key), { force: true });
    const control = l.control;
    if (!control || control.closed) return true;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        control.destroy();
        resolve(false);
      }, timeoutMs);
      control.once("close", () => {
        clearTimeout(timer);
        resolve(true);
      });
      control.end();
    });
  }

  async closeAll(): Promise<void> {
    for (const key of [...this.listeners.keys()]) {
      const l = this.listeners.get(key) as Listener;
      this.listeners.delete(key);
      l.control?.destroy();
      await new Promise<void>((r) => l.server.close(() => r()));
    }
  }

  /** Whether the container's agent is connected. */
  connected(key: string): boolean {
    return Boolean(this.listeners.get(key)?.control);
  }

  /** Waits up to timeoutMs for the agent's control connection; false when it does not come. */
  async waitConnected(key: string, timeoutMs: number): Promise<boolean> {
    const l = this.listeners.get(key);
    if (!l) return false;
    if (l.control) return true;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        l.waiting = l.waiting.filter((w) => w !== done);
        resolve(false);
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        resolve(true);
      };
      l.waiting.push(done);
    });
  }

  /** The protocol version of the agent connected for `key` (null: none is). */
  version(key: string): number | null {
    const l = this.listeners.get(key);
    return l?.control ? l.version : null;
  }

  /**
   * A fresh connection to the container's agent for one request, or null when the agent is not
   * connected or does not answer within timeoutMs (callers then use the engine).
   */
  async dial(key: string, timeoutMs = 5000): Promise<Socket | null> {
    const control = this.listeners.get(key)?.control;
    if (!control) return null;
    const nonce = randomBytes(16).toString("hex");
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.dials.delete(nonce);
        resolve(null);
      }, timeoutMs);
      this.dials.set(nonce, (sock) => {
        clearTimeout(timer);
        resolve(sock);
      });
      control.write(Buffer.from(nonce, "hex"));
    });
  }

  private accept(l: Listener, sock: Socket): void {
    if (l.unidentified >= this.maxUnidentified) {
      sock.destroy();
      return;
    }
    l.unidentified++;
    let identified = false;
    const identify = () => {
      if (identified) return;
      identified = true;
      l.unidentified--;
      clearTimeout(timer);
    };
    const timer = setTimeout(() => {
      identify();
      sock.destroy();
    }, HELLO_TIMEOUT_MS);
    sock.on("error", () => {});
    sock.on("close", identify);
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      if (head.length < 8) return;
      const magic = head.subarray(0, 4).toString("latin1");
      if (magic === "DNVA") {
        sock.off("data", onData);
        identify();
        // The newest control connection wins: the agent reconnects after a denvd restart.
        l.control?.destroy();
        l.control = sock;
        l.version = head.readUInt32LE(4);
        sock.unref();
        sock.on("data", () => {}); // the agent sends nothing more on it
        sock.on("close", () => {
          if (l.control === sock) l.control = null;
        });
        for (const w of l.waiting.splice(0)) w(sock);
        return;
      }
      if (magic === "DNVC") {
        if (head.length < 20) return;
        sock.off("data", onData);
        identify();
        const nonce = head.subarray(4, 20).toString("hex");
        const done = this.dials.get(nonce);
        this.dials.delete(nonce);
        if (!done) {
          sock.destroy();
          return;
        }
        sock.pause();
        if (head.length > 20) sock.unshift(head.subarray(20));
        done(sock);
        return;
      }
      identify();
      sock.destroy();
    };
    sock.on("data", onData);
  }
}
