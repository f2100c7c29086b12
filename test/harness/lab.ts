/**
 * The one way a test gets a control plane: `openLab()` starts a server (SQLite, or the options'
 * store) with an admin team (A) and, unless `hosts: 0`, team A's real denvd on the real engine and a
 * btrfs pool, joined through the API as a user joins one. Then `lab.asTeam(name)` makes another team
 * (its key, the generated SDK's typed client, and the raw API for statuses and headers),
 * `lab.addHost()` joins another real host, and `lab.close()` removes everything the lab made. The
 * security tests' attacker is team B (`keyB`) and a host that speaks the protocol by hand
 * (`joinRawHost`).
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { joinServer, Sidecar } from "@denv/denvd";
import { encodeStreamFrame, type HostMessage, PROTOCOL_VERSION, type ServerMessage } from "@denv/protocol";
import { DenvClient } from "@denv/sdk";
import { type RunningServer, type ServerOptions, startServer } from "@denv/server";
import WebSocket from "ws";
import { LOCAL_REGISTRY, openTestHost, type TestHost } from "./test-host.ts";

export interface ApiAnswer {
  status: number;
  data: any;
  headers: Headers;
}

export type Api = (method: string, path: string, body?: unknown, key?: string | null) => Promise<ApiAnswer>;

/** A team of the lab's: its key, the SDK's typed client, and the raw API (statuses, headers) as it. */
export interface Team {
  name: string;
  teamId: string;
  key: string;
  client: DenvClient;
  api(method: string, path: string, body?: unknown): Promise<ApiAnswer>;
}

/** A real host joined to a team: its denvd on the engine and btrfs, connected by its sidecar. */
export interface LabHost {
  name: string;
  hostId: string;
  secret: string;
  host: TestHost;
  readonly sidecar: Sidecar;
  /** Stops the sidecar (the host goes away) and starts a new one with the same identity. */
  reconnect(): Promise<void>;
  /** The sidecar stopped: the host is away until `reconnect()`. */
  disconnect(): Promise<void>;
  close(): Promise<void>;
}

export interface LabOptions extends Partial<ServerOptions> {
  /** Hosts of team A's to start (default 1; 0 for a test of the control plane alone). */
  hosts?: 0 | 1;
  /** Options of team A's host. */
  teamHost?: Parameters<typeof openTestHost>[0];
}

export interface Lab {
  server: RunningServer;
  /** Team A's host (absent with `hosts: 0`). */
  host: TestHost;
  sidecar: Sidecar;
  hostId: string;
  hostSecret: string;
  /** Team A's (admin) key. */
  keyA: string;
  /** Team B's key: the attacker's. */
  keyB: string;
  /** Team A's typed client. */
  client: DenvClient;
  api: Api;
  /** A new team, made by team A's admin key. */
  asTeam(name: string): Promise<Team>;
  /** Another real host, joined to team A (or the team whose key is given). Closed with the lab. */
  addHost(options?: {
    name?: string;
    key?: string;
    host?: Parameters<typeof openTestHost>[0];
  }): Promise<LabHost>;
  /** Stops team A's sidecar (its host goes away) and starts a new one with the same identity. */
  restartSidecar(): Promise<void>;
  stopSidecar(): Promise<void>;
  close(): Promise<void>;
}

/** Joins a host to the team of `key` through the API, as `denvd join` does, and connects it. */
async function joinHost(
  serverUrl: string,
  api: Api,
  key: string,
  name: string,
  hostOptions: Parameters<typeof openTestHost>[0],
): Promise<LabHost> {
  const made = await api("POST", "/v1/hosts/join-token", undefined, key);
  if (made.status !== 201) throw new Error(`join token: ${made.status} ${JSON.stringify(made.data)}`);
  const joined = await joinServer(serverUrl, made.data.token as string, name);
  const host = await openTestHost(hostOptions);
  const connect = async () => {
    const s = new Sidecar({ serverUrl, secret: joined.secret, denvd: host.denvd });
    s.start();
    await s.ready;
    return s;
  };
  let sidecar = await connect();
  let closed = false;
  return {
    name,
    hostId: joined.host_id,
    secret: joined.secret,
    host,
    get sidecar() {
      return sidecar;
    },
    async reconnect() {
      await sidecar.stop();
      sidecar = await connect();
    },
    async disconnect() {
      await sidecar.stop();
    },
    async close() {
      if (closed) return;
      closed = true;
      await sidecar.stop().catch(() => {});
      await host.close();
    },
  };
}

export async function openLab(options: LabOptions = {}): Promise<Lab> {
  const { hosts = 1, teamHost: hostOptions = {}, ...serverOptions } = options;
  const dataDir = await mkdtemp(join(tmpdir(), "denv-sec-"));
  const keyA = `dk_sec_${randomBytes(12).toString("hex")}`;
  const server = await startServer({ dataDir, adminKey: keyA, fetchAllow: LOCAL_REGISTRY, ...serverOptions });
  const api: Api = async (method, path, body, key = keyA) => {
    const res = await fetch(`${server.url}${path}`, {
      method,
      // A deploy waited for on a busy machine takes minutes; the server answers by its own deadline.
      signal: AbortSignal.timeout(600_000),
      headers: {
        ...(key ? { authorization: `Bearer ${key}` } : {}),
        ...(body !== undefined && !(body instanceof Uint8Array)
          ? { "content-type": "application/json" }
          : {}),
      },
      body: body === undefined ? undefined : body instanceof Uint8Array ? body : JSON.stringify(body),
    });
    const type = res.headers.get("content-type") ?? "";
    const data = type.includes("json") ? await res.json() : Buffer.from(await res.arrayBuffer());
    return { status: res.status, data, headers: res.headers };
  };
  const added: LabHost[] = [];
  const first = hosts === 1 ? await joinHost(server.url, api, keyA, "host-a", hostOptions) : undefined;
  const asTeam = async (name: string): Promise<Team> => {
    const made = await api("POST", "/v1/teams", { name });
    if (made.status !== 201) throw new Error(`team ${name}: ${made.status} ${JSON.stringify(made.data)}`);
    const key = made.data.api_key as string;
    return {
      name,
      teamId: made.data.team_id as string,
      key,
      client: new DenvClient({ baseUrl: server.url, apiKey: key }),
      api: (method, path, body) => api(method, path, body, key),
    };
  };
  const attacker = await asTeam("attacker");
  const lab: Lab = {
    server,
    get host() {
      if (!first) throw new Error("this lab has no host (hosts: 0)");
      return first.host;
    },
    get sidecar() {
      if (!first) throw new Error("this lab has no host (hosts: 0)");
      return first.sidecar;
    },
    hostId: first?.hostId ?? "",
    hostSecret: first?.secret ?? "",
    keyA,
    keyB: attacker.key,
    client: new DenvClient({ baseUrl: server.url, apiKey: keyA }),
    api,
    asTeam,
    async addHost(o = {}) {
      const h = await joinHost(
        server.url,
        api,
        o.key ?? keyA,
        o.name ?? `host-${randomBytes(3).toString("hex")}`,
        o.host ?? {},
      );
      added.push(h);
      return h;
    },
    async stopSidecar() {
      await first?.disconnect();
    },
    async restartSidecar() {
      await first?.reconnect();
    },
    async close() {
      for (const h of added) await h.sidecar.stop().catch(() => {});
      await first?.sidecar.stop().catch(() => {});
      await server.close().catch(() => {});
      for (const h of [...added, ...(first ? [first] : [])]) await h.close().catch(() => {});
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  return lab;
}

/** A host joined to a team by its key, driven by hand: it says and sends whatever the test wants. */
export interface RawHost {
  hostId: string;
  secret: string;
  ws: WebSocket;
  /** Operations the server sent to this host. */
  ops: Extract<ServerMessage, { type: "op" }>[];
  send(msg: unknown): void;
  sendFrame(kind: number, streamId: number, payload?: Buffer): void;
  close(): Promise<void>;
}

export async function joinRawHost(
  lab: Lab,
  key: string,
  options: { hello?: boolean; secret?: { hostId: string; secret: string } } = {},
): Promise<RawHost> {
  let joined = options.secret;
  if (!joined) {
    const token = (await lab.api("POST", "/v1/hosts/join-token", undefined, key)).data.token as string;
    const j = await joinServer(lab.server.url, token, `raw-${randomBytes(3).toString("hex")}`);
    joined = { hostId: j.host_id, secret: j.secret };
  }
  const ws = new WebSocket(`${lab.server.url.replace(/^http/, "ws")}/v1/hosts/connect`, {
    headers: { authorization: `Bearer ${joined.secret}` },
  });
  const ops: RawHost["ops"] = [];
  const welcomed = new Promise<void>((resolve, reject) => {
    ws.on("message", (data, binary) => {
      if (binary) return;
      const msg = JSON.parse(data.toString()) as ServerMessage;
      if (msg.type === "welcome") resolve();
      else ops.push(msg);
    });
    ws.once("error", reject);
  });
  await new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
  });
  const raw: RawHost = {
    hostId: joined.hostId,
    secret: joined.secret,
    ws,
    ops,
    send: (msg) => ws.readyState === ws.OPEN && ws.send(JSON.stringify(msg)),
    sendFrame: (kind, streamId, payload) =>
      ws.readyState === ws.OPEN && ws.send(encodeStreamFrame(kind, streamId, payload), { binary: true }),
    close: () =>
      new Promise<void>((resolve) => {
        if (ws.readyState === ws.CLOSED) return resolve();
        ws.once("close", () => resolve());
        ws.close();
      }),
  };
  if (options.hello !== false) {
    raw.send({
      type: "hello",
      protocol: PROTOCOL_VERSION,
      arch: "x86_64",
      storage: "dir",
      capacity: { total_bytes: 1e12, free_bytes: 1e12, cpus: 2, memory_bytes: 1e10 },
      version: "hostile",
      known_ops: [],
    } satisfies HostMessage);
    await welcomed;
  }
  return raw;
}

/** ops-world as the seed deploys it: the project, its compose file, alpha deployed; its version. */
export async function deployOpsWorld(lab: Lab): Promise<string> {
  const compose = readFileSync(
    join(import.meta.dirname, "../../examples/ops-world/docker-compose.yaml"),
    "utf8",
  );
  await lab.api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
  await lab.api("PUT", "/v1/projects/ops-world/source", { compose });
  const d = await lab.api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
  if (d.data.status !== "succeeded") throw new Error(`deploying ops-world failed: ${d.data.reason}`);
  return d.data.version_id as string;
}

/**
 * A key of team A with a role below admin, made as a person gets one: invited with the role, signed
 * up through the invitation, then a key made from the console session (it carries the person's
 * role). `format: "e2b"` makes it in E2B's form.
 */
export async function keyWithRole(
  lab: Lab,
  role: "member" | "read-only",
  format: "denv" | "e2b" = "e2b",
): Promise<string> {
  const email = `${role}-${randomBytes(4).toString("hex")}@example.com`;
  const inv = await lab.api("POST", "/v1/invitations", { email, role });
  if (inv.status !== 201) throw new Error(`invitation: ${inv.status} ${JSON.stringify(inv.data)}`);
  const signed = await fetch(`${lab.server.url}/v1/auth/signup`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email, password: "a long enough password", invitation: inv.data.token }),
  });
  const session = (await signed.json()) as { csrf_token: string; role: string };
  if (session.role !== role) throw new Error(`signed up as ${session.role}, not ${role}`);
  const cookie = (signed.headers.get("set-cookie") ?? "").split(";")[0] as string;
  const made = await fetch(`${lab.server.url}/v1/keys`, {
    method: "POST",
    headers: { "content-type": "application/json", cookie, "x-csrf-token": session.csrf_token },
    body: JSON.stringify({ name: role, ...(format === "e2b" ? { format } : {}) }),
  });
  const key = (await made.json()) as { key: string; role: string };
  if (key.role !== role) throw new Error(`the key's role is ${key.role}, not ${role}`);
  return key.key;
}
