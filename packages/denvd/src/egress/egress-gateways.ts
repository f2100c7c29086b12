/**
 * The egress gateways of this host's stacks whose x-denv.egress is a policy. A stack's networks
 * stay internal (no route out, no host address); one gateway container joins them under the name
 * denv-egress and runs `denv-agent relay` (agent/agent-relay.c), which hands each connection to a
 * unix socket denvd listens on in a host directory the gateway mounts read-only. Behind that
 * socket, here on the host, the stack's EgressProxy decides every connection by the policy and
 * makes the allowed ones itself. The services are pointed at it by the variables every HTTP
 * client reads (HTTP_PROXY, HTTPS_PROXY, their lower-case forms, NO_PROXY for the stack's own
 * names). Nothing in the gateway decides anything: a gateway the agent somehow stopped leaves no
 * way out at all.
 *
 * Every connection is one line of the stack's egress log (egress.jsonl beside the socket's
 * directory), kept up to MAX_LOG_BYTES; past that, lines are counted, not kept.
 */
import { appendFileSync, mkdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { networkInterfaces } from "node:os";
import { join } from "node:path";
import { DenvError, type ResolvedSpec } from "@denv/protocol";
import { type ParsedEgressPolicy, parseEgressPolicy } from "@denv/spec";
import { decodeRecord, RELAY_MAGIC } from "../exec/agent-protocol.ts";
import type { StackRecord } from "../host/state-store.ts";
import type { ContainerRuntime, ContainerSpec, Labels } from "../runtime/container-runtime.ts";
import { EgressProxy, type EgressRecord } from "./egress-proxy.ts";

/** The gateway's name on each of the stack's networks. */
export const GATEWAY_ALIAS = "denv-egress";
/** The service label the gateway container carries (it is no service of the stack's). */
export const EGRESS_GATEWAY_SERVICE = GATEWAY_ALIAS;
/** Where the gateway listens (a forward proxy's usual port). */
export const GATEWAY_PORT = 3128;
/** The socket's directory inside the gateway. */
const RELAY_DIR = "/.denv/egress";
const RELAY_SOCKET = "relay.sock";
/** Where the agent binary is inside the gateway. */
const RELAY_BIN = "/.denv/bin/denv-agent";
/** The relay's hello: three u32s. */
const HELLO_BYTES = 12;
const MAX_LOG_BYTES = 16 * 1024 * 1024;

export interface EgressGatewayOptions {
  stateDir: string;
  runtime: ContainerRuntime;
  /** A stack's containers now (service → id): the log names each caller's service. */
  containersOf: (stackId: string) => Record<string, string>;
  /** Names answered before the host's resolver (a test's own internet; a site's internal mirror). */
  hosts?: Record<string, string[]>;
  /** Networks of this host that no policy reaches besides its own addresses (denvd's subnet pool). */
  neverReach?: readonly string[];
  idleTimeoutMs?: number;
  maxUploadBytes?: number;
  log?: (message: string, context?: Record<string, unknown>) => void;
}

interface Gateway {
  server: Server;
  proxy: EgressProxy;
  policy: ParsedEgressPolicy;
  /** Caller address → service, read from the engine as callers appear. */
  services: Map<string, string>;
  logBytes: number;
  dropped: number;
}

/** The stack's egress policy now: the one set while it runs, else its spec's; null: none. */
export function egressPolicyOf(
  stack: Pick<StackRecord, "spec" | "egressPolicy">,
): NonNullable<ResolvedSpec["egress_policy"]> | null {
  return stack.egressPolicy ?? stack.spec.egress_policy ?? null;
}

/** A policy as the resolved spec (or a change) keeps it, parsed; bad_request naming the rule if one is bad. */
export function parsedPolicy(policy: NonNullable<ResolvedSpec["egress_policy"]>): ParsedEgressPolicy {
  const parsed = parseEgressPolicy(policy);
  if ("errors" in parsed)
    throw new DenvError("invalid_argument", `egress policy: ${parsed.errors.join("; ")}`);
  return parsed;
}

/** The variables that point a service's HTTP clients at its gateway; its own names go direct. */
export function proxyEnvironment(spec: ResolvedSpec): Record<string, string> {
  const url = `http://${GATEWAY_ALIAS}:${GATEWAY_PORT}`;
  const own = new Set(["localhost", "127.0.0.1", "::1"]);
  for (const [name, s] of Object.entries(spec.services)) {
    own.add(name);
    if (s.hostname) own.add(s.hostname);
    for (const n of Object.values(s.networks)) for (const a of n.aliases) own.add(a);
  }
  const noProxy = [...own].join(",");
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    NO_PROXY: noProxy,
    no_proxy: noProxy,
  };
}

/** This host's own IPv4 addresses, as /32s: a name that resolves to one is never reached. */
function ownAddresses(): string[] {
  return Object.values(networkInterfaces())
    .flat()
    .filter((a) => a && a.family === "IPv4")
    .map((a) => `${a?.address}/32`);
}

export class EgressGateways {
  private readonly opts: EgressGatewayOptions;
  private readonly gateways = new Map<string, Gateway>();

  constructor(opts: EgressGatewayOptions) {
    this.opts = opts;
  }

  private dirOf(stackId: string): string {
    return join(this.opts.stateDir, "egress", stackId);
  }

  /** The stack's egress log file. */
  logPath(stackId: string): string {
    return join(this.dirOf(stackId), "egress.jsonl");
  }

  /**
   * Listens for the stack's gateway (again, after a restart) with this policy; returns the host
   * directory the gateway mounts. The socket's directory is root's alone on the host.
   */
  async open(stack: Pick<StackRecord, "id">, policy: ParsedEgressPolicy): Promise<string> {
    const existing = this.gateways.get(stack.id);
    const relayDir = join(this.dirOf(stack.id), "relay");
    if (existing) {
      existing.policy = policy;
      return relayDir;
    }
    mkdirSync(relayDir, { recursive: true, mode: 0o700 });
    rmSync(join(relayDir, RELAY_SOCKET), { force: true });
    const logFile = this.logPath(stack.id);
    const gw: Gateway = {
      server: createServer({ allowHalfOpen: true }),
      policy,
      services: new Map(),
      logBytes: (() => {
        try {
          return statSync(logFile).size;
        } catch {
          return 0;
        }
      })(),
      dropped: 0,
      proxy: null as unknown as EgressProxy,
    };
    const neverReach = [...(this.opts.neverReach ?? [])];
    gw.proxy = new EgressProxy({
      policy: () => gw.policy,
      resolve: this.opts.hosts ? this.hostsFirst(this.opts.hosts) : undefined,
      neverReach: () => [...neverReach, ...ownAddresses()],
      serviceOf: (address) => gw.services.get(address) ?? null,
      record: (r) => this.append(gw, logFile, r),
      idleTimeoutMs: this.opts.idleTimeoutMs,
      maxUploadBytes: this.opts.maxUploadBytes,
    });
    gw.server.on("connection", (socket) => {
      this.handOver(stack, gw, socket).catch(() => socket.destroy());
    });
    gw.server.on("error", () => {});
    await new Promise<void>((resolve, reject) => {
      gw.server.once("error", reject);
      gw.server.listen(join(relayDir, RELAY_SOCKET), () => resolve());
    });
    gw.server.unref();
    this.gateways.set(stack.id, gw);
    return relayDir;
  }

  /** Whether the stack has a gateway listened for. */
  has(stackId: string): boolean {
    return this.gateways.has(stackId);
  }

  /** A new policy for a running stack: applies to the next connection, and closes open ones it no longer allows. */
  setPolicy(stackId: string, policy: ParsedEgressPolicy): { closed: number } {
    const gw = this.gateways.get(stackId);
    if (!gw) throw new DenvError("conflict", `stack ${stackId} has no egress gateway`);
    gw.policy = policy;
    return { closed: gw.proxy.recheck() };
  }

  /** Stops listening; the log stays unless `removeLog`. */
  async close(stackId: string, removeLog = true): Promise<void> {
    const gw = this.gateways.get(stackId);
    this.gateways.delete(stackId);
    if (gw) {
      gw.proxy.close();
      await new Promise<void>((r) => gw.server.close(() => r()));
    }
    rmSync(removeLog ? this.dirOf(stackId) : join(this.dirOf(stackId), "relay"), {
      recursive: true,
      force: true,
    });
  }

  /**
   * The stack's egress log: its last `limit` records, oldest first, how many earlier ones there
   * are, and how many were never kept. A line that is not a record (a write a crash cut short) is
   * skipped.
   */
  readLog(stackId: string, limit = 10_000): { records: EgressRecord[]; earlier: number; dropped: number } {
    let text = "";
    try {
      text = readFileSync(this.logPath(stackId), "utf8");
    } catch {}
    const lines = text.split("\n").filter(Boolean);
    const records: EgressRecord[] = [];
    for (const l of lines.slice(-limit)) {
      try {
        records.push(JSON.parse(l) as EgressRecord);
      } catch {}
    }
    return {
      records,
      earlier: Math.max(0, lines.length - limit),
      dropped: this.gateways.get(stackId)?.dropped ?? 0,
    };
  }

  /** The gateway container of a stack: the relay alone, root with no capability, read-only, small. */
  containerSpec(i: {
    stack: Pick<StackRecord, "id" | "network" | "operationId">;
    image: string;
    agentBinary: string;
    relayDir: string;
    networks: string[];
    labels: Labels;
  }): ContainerSpec {
    return {
      name: `${i.stack.network}-${GATEWAY_ALIAS}`,
      image: i.image,
      entrypoint: [RELAY_BIN, "relay", String(GATEWAY_PORT), `${RELAY_DIR}/${RELAY_SOCKET}`],
      cmd: null,
      env: {},
      user: "0:0",
      workingDir: "/",
      hostname: GATEWAY_ALIAS,
      labels: i.labels,
      network: { kind: "network", networks: i.networks.map((name) => ({ name, aliases: [GATEWAY_ALIAS] })) },
      mounts: [
        { kind: "bind", source: i.agentBinary, target: RELAY_BIN, readOnly: true },
        { kind: "bind", source: i.relayDir, target: RELAY_DIR, readOnly: true },
      ],
      memoryBytes: 64 * 1024 * 1024,
      pids: 512,
      cpus: 1,
      healthcheck: { test: ["NONE"], intervalMs: 0, timeoutMs: 0, startPeriodMs: 0, retries: 0 },
      init: false,
      readOnlyRootfs: true,
      tty: false,
      openStdin: false,
      capDrop: ["ALL"],
      noNewPrivileges: true,
      extraHosts: [],
      ulimits: {},
      shmSizeBytes: null,
      sysctls: { "net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1" },
      stopSignal: null,
      stopTimeoutMs: 1000,
      restart: "unless-stopped",
    };
  }

  /** Reads the relay's hello, then hands the caller's bytes to the proxy. */
  private async handOver(stack: Pick<StackRecord, "id">, gw: Gateway, socket: Socket): Promise<void> {
    const head = await new Promise<Buffer>((resolve, reject) => {
      let got = Buffer.alloc(0);
      const onData = (c: Buffer) => {
        got = Buffer.concat([got, c]);
        if (got.length < HELLO_BYTES) return;
        socket.off("data", onData);
        socket.pause();
        resolve(got);
      };
      socket.on("data", onData);
      socket.once("end", () => reject(new Error("the relay left before its hello")));
      socket.once("error", reject);
    });
    const hello = decodeRecord("relay_hello", head.subarray(0, HELLO_BYTES));
    if (!hello || hello.magic !== RELAY_MAGIC) {
      socket.destroy();
      return;
    }
    const a = hello.addr;
    const address = [24, 16, 8, 0].map((s) => Math.floor(a / 2 ** s) % 256).join(".");
    if (!gw.services.has(address)) await this.learnServices(stack, gw);
    const rest = head.subarray(HELLO_BYTES);
    if (rest.length) socket.unshift(rest);
    gw.proxy.accept(socket, { address, port: hello.port });
    socket.resume();
  }

  /** Which service holds which address, read from the engine. */
  private async learnServices(stack: Pick<StackRecord, "id">, gw: Gateway): Promise<void> {
    for (const [svc, id] of Object.entries(this.opts.containersOf(stack.id))) {
      const st = await this.opts.runtime.inspectContainer(id).catch(() => null);
      for (const a of Object.values(st?.addresses ?? {})) if (a.ip) gw.services.set(a.ip, svc);
    }
  }

  private append(gw: Gateway, file: string, r: EgressRecord): void {
    const line = `${JSON.stringify(r)}\n`;
    if (gw.logBytes + line.length > MAX_LOG_BYTES) {
      gw.dropped++;
      return;
    }
    gw.logBytes += line.length;
    try {
      appendFileSync(file, line, { mode: 0o600 });
    } catch (err) {
      this.opts.log?.("Egress log not written", { file, error: (err as Error).message });
    }
  }

  private hostsFirst(hosts: Record<string, string[]>): (name: string) => Promise<string[]> {
    const map = new Map(Object.entries(hosts).map(([k, v]) => [k.toLowerCase().replace(/\.$/, ""), v]));
    return async (name) => {
      const known = map.get(name);
      if (known) return known;
      const { lookup } = await import("node:dns/promises");
      return (await lookup(name, { all: true, family: 4 })).map((x) => x.address);
    };
  }
}
