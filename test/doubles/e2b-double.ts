/**
 * A local double of E2B, written from its published API (e2b-dev/infra `spec/openapi.yml`, envd's
 * `envd.yaml` and `process.proto`) as the official `e2b` SDK (2.51) calls it, on loopback only:
 *
 * - the control plane (`X-API-Key`): templates built from an image (`POST /v3/templates`,
 *   `POST /v2/templates/{id}/builds/{build}`, the build's status, aliases), sandboxes created,
 *   listed, connected to and killed; snapshots of a sandbox (`POST /sandboxes/{id}/snapshots`:
 *   its container committed as an image), sandboxes made from one, and snapshots deleted
 *   (`DELETE /templates/{id}`);
 * - envd, at the same origin (the SDK's `sandboxUrl`; a request names its sandbox in the
 *   `E2b-Sandbox-Id` header and carries the sandbox's `X-Access-Token`): `/health`, `/files` down
 *   and up (octet-stream), and `process.Process/Start` over Connect's JSON streaming protocol.
 *
 * Each sandbox is a container on the local engine, from the template's image, kept alive as a VM
 * is; a command runs in it by the engine's exec as the user envd was asked for (Basic auth's user
 * name; E2B's templates have a `user` account, made here at the sandbox's start). With
 * `allow_internet_access: false` the container has no network, as E2B's setting cuts the VM off.
 * Nothing here is reached from outside the machine, and no request leaves it.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import Docker from "dockerode";
import { execIn, pullImage, readBody, removeLabelled, sendJson } from "./double-engine.ts";

interface Build {
  templateID: string;
  buildID: string;
  name: string;
  status: "waiting" | "building" | "ready" | "error";
  reason?: string;
  image?: string;
}

interface SandboxRecord {
  sandboxID: string;
  templateID: string;
  containerId: string;
  accessToken: string;
  envs: Record<string, string>;
  internet: boolean;
  metadata: Record<string, string>;
  startedAt: string;
}

export interface E2bDouble {
  url: string;
  apiKey: string;
  /** Every request the double saw, as "METHOD path" (the sandbox id for envd's). */
  seen: string[];
  sandboxes(): SandboxRecord[];
  /**
   * The next request to "METHOD /path" is answered with this status and raw body instead (a
   * provider answering wrongly: a 500, a body that is not JSON).
   */
  fault(route: string, status: number, body: string): void;
  /** The next sandbox made gets this id (a hostile endpoint answering another account's id). */
  nextSandboxId(id: string): void;
  /** The next snapshot is answered with this id (a hostile endpoint's path, say). */
  nextSnapshotId(id: string): void;
  /** The snapshots held, by their ids as answered. */
  snapshots(): string[];
  close(): Promise<void>;
}

const ENVD_VERSION = "0.5.8";
const TEST_LABEL = "dev.denv.e2b-double";
/** Where a snapshot's committed image is kept on the local engine. */
const SNAPSHOT_REPO = "denv-e2b-double-snapshot";

/** A Connect envelope: flags, u32 length (big-endian), the message. */
function envelope(flags: number, message: unknown): Buffer {
  const payload = Buffer.from(JSON.stringify(message));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

/** The user Basic auth names (envd's way of saying who runs a command), or null. */
function basicUser(req: IncomingMessage): string | null {
  const h = req.headers.authorization;
  if (!h?.startsWith("Basic ")) return null;
  const decoded = Buffer.from(h.slice(6), "base64").toString();
  return decoded.split(":")[0] || null;
}

export async function startE2bDouble(options: { registry: string }): Promise<E2bDouble> {
  const docker = new Docker();
  const apiKey = `e2b_${randomBytes(20).toString("hex")}`;
  const label = randomBytes(6).toString("hex");
  const builds = new Map<string, Build>();
  const aliases = new Map<string, string>();
  const sandboxes = new Map<string, SandboxRecord>();
  const seen: string[] = [];
  const faults = new Map<string, { status: number; body: string }>();
  let forcedId: string | null = null;
  let forcedSnapshotId: string | null = null;
  /** Images committed for snapshots, removed at the close. */
  const snapshotImages = new Set<string>();
  /** A template's id as the SDK names it: without a team's namespace or a tag. */
  const bareTemplate = (id: string) => id.replace(/^[^/]*\//, "").replace(/:[^:]*$/, "");

  /** Runs argv in a sandbox's container, as a user; stdin from `input` when given. */
  function run(
    s: SandboxRecord,
    argv: string[],
    o: { user: string; envs?: Record<string, string>; cwd?: string; input?: Buffer },
    onOut: (which: "stdout" | "stderr", b: Buffer) => void,
  ): Promise<number> {
    const { envs, ...rest } = o;
    return execIn(docker, s.containerId, argv, { ...rest, env: { ...s.envs, ...(envs ?? {}) } }, onOut);
  }

  async function createSandbox(templateID: string, b: Record<string, unknown>): Promise<SandboxRecord> {
    const bare = bareTemplate(templateID);
    const build = [...builds.values()].find((x) => x.templateID === bare && x.status === "ready");
    if (!build?.image) throw Object.assign(new Error(`template ${templateID} not found`), { status: 404 });
    const internet = b.allow_internet_access !== false;
    const c = await docker.createContainer({
      Image: build.image,
      Entrypoint: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done"],
      Cmd: [],
      Labels: { [TEST_LABEL]: label, "dev.denv.test": `e2b-double-${label}` },
      HostConfig: { NetworkMode: internet ? "bridge" : "none", AutoRemove: false },
    });
    await c.start();
    const sandboxID = forcedId ?? randomBytes(10).toString("hex").slice(0, 20);
    forcedId = null;
    const s: SandboxRecord = {
      sandboxID,
      templateID,
      containerId: c.id,
      accessToken: randomBytes(16).toString("hex"),
      envs: (b.envVars as Record<string, string>) ?? {},
      internet,
      metadata: (b.metadata as Record<string, string>) ?? {},
      startedAt: new Date().toISOString(),
    };
    // E2B's templates carry a `user` account, the default for commands.
    await run(
      s,
      ["sh", "-c", "id user >/dev/null 2>&1 || useradd -m user 2>/dev/null || adduser -D user"],
      { user: "root" },
      () => {},
    );
    sandboxes.set(s.sandboxID, s);
    return s;
  }

  const created = (s: SandboxRecord) => ({
    sandboxID: s.sandboxID,
    templateID: s.templateID,
    clientID: "double",
    envdVersion: ENVD_VERSION,
    envdAccessToken: s.accessToken,
    domain: null,
  });

  async function controlPlane(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    if (req.headers["x-api-key"] !== apiKey)
      return sendJson(res, 401, { code: 401, message: "Invalid API key" });
    const parts = url.pathname.split("/").filter(Boolean);
    const m = req.method ?? "GET";
    if (m === "GET" && parts[0] === "templates" && parts[1] === "aliases" && parts[2]) {
      const id = aliases.get(parts[2]);
      return id
        ? sendJson(res, 200, { templateID: id, public: false })
        : sendJson(res, 404, { code: 404, message: "not found" });
    }
    if (m === "POST" && url.pathname === "/v3/templates") {
      const b = JSON.parse((await readBody(req)).toString() || "{}");
      const name = String(b.name ?? "");
      const templateID = aliases.get(name) ?? randomBytes(10).toString("hex").slice(0, 20);
      const buildID = crypto.randomUUID();
      builds.set(buildID, { templateID, buildID, name, status: "waiting" });
      return sendJson(res, 202, {
        templateID,
        buildID,
        public: false,
        aliases: [name],
        names: [name],
        tags: [],
      });
    }
    if (m === "POST" && parts[0] === "v2" && parts[1] === "templates" && parts[3] === "builds" && parts[4]) {
      const build = builds.get(parts[4]);
      if (!build) return sendJson(res, 404, { code: 404, message: "build not found" });
      const b = JSON.parse((await readBody(req)).toString() || "{}");
      build.status = "building";
      build.image = String(b.fromImage ?? "");
      // Only images of the local registry: the double fetches nothing from outside the machine.
      const pull = build.image.startsWith(`${options.registry}/`)
        ? pullImage(docker, build.image as string)
        : Promise.reject(new Error(`image ${build.image} is not in the local registry`));
      pull.then(
        () => {
          build.status = "ready";
          aliases.set(build.name, build.templateID);
        },
        (err: Error) => {
          build.status = "error";
          build.reason = err.message;
        },
      );
      res.writeHead(202, { "content-length": "0" }).end();
      return;
    }
    if (m === "GET" && parts[0] === "templates" && parts[2] === "builds" && parts[4] === "status") {
      const build = builds.get(parts[3] ?? "");
      if (!build) return sendJson(res, 404, { code: 404, message: "build not found" });
      return sendJson(res, 200, {
        templateID: build.templateID,
        buildID: build.buildID,
        status: build.status,
        logEntries: [],
        logs: [],
        ...(build.reason ? { reason: { message: build.reason } } : {}),
      });
    }
    if (m === "GET" && (url.pathname === "/v2/sandboxes" || url.pathname === "/sandboxes")) {
      return sendJson(
        res,
        200,
        [...sandboxes.values()].map((s) => ({
          sandboxID: s.sandboxID,
          templateID: s.templateID,
          clientID: "double",
          startedAt: s.startedAt,
          endAt: new Date(Date.now() + 3600_000).toISOString(),
          cpuCount: 2,
          memoryMB: 512,
          diskSizeMB: 1024,
          metadata: s.metadata,
          state: "running",
          envdVersion: ENVD_VERSION,
        })),
      );
    }
    if (m === "POST" && (url.pathname === "/v2/sandboxes" || url.pathname === "/sandboxes")) {
      const b = JSON.parse((await readBody(req)).toString() || "{}");
      const templateID = aliases.get(String(b.templateID)) ?? String(b.templateID);
      try {
        return sendJson(res, 201, created(await createSandbox(templateID, b)));
      } catch (err) {
        const status = (err as { status?: number }).status ?? 500;
        return sendJson(res, status, { code: status, message: (err as Error).message });
      }
    }
    if (m === "DELETE" && parts[0] === "templates" && parts[1]) {
      const id = bareTemplate(decodeURIComponent(parts.slice(1).join("/")));
      const entry = [...builds.entries()].find(([, b]) => b.templateID === id);
      if (!entry) return sendJson(res, 404, { code: 404, message: `template ${id} not found` });
      builds.delete(entry[0]);
      if (entry[1].image && snapshotImages.delete(entry[1].image))
        await docker
          .getImage(entry[1].image)
          .remove({ force: true })
          .catch(() => {});
      res.writeHead(204).end();
      return;
    }
    // A sandbox's own routes, under /sandboxes and (newer SDKs) /v2/sandboxes.
    const sb = parts[0] === "v2" && parts[1] === "sandboxes" ? parts.slice(1) : parts;
    if (sb[0] === "sandboxes" && sb[1]) {
      const s = sandboxes.get(sb[1]);
      if (!s) return sendJson(res, 404, { code: 404, message: `sandbox ${sb[1]} not found` });
      if (m === "POST" && sb[2] === "connect") return sendJson(res, 200, created(s));
      if (m === "POST" && sb[2] === "snapshots") {
        // E2B pauses the VM and keeps its memory and files; here the container's files are committed.
        // Not paused: with a command attached by exec (a sandbox's `cmd`), this engine's (20.10,
        // cgroup v1) commit left the container frozen and never answered.
        const snapId = randomBytes(10).toString("hex").slice(0, 20);
        const tag = `${label}-${snapId}`;
        await docker.getContainer(s.containerId).commit({ repo: SNAPSHOT_REPO, tag, pause: false });
        snapshotImages.add(`${SNAPSHOT_REPO}:${tag}`);
        builds.set(`snap-${snapId}`, {
          templateID: snapId,
          buildID: `snap-${snapId}`,
          name: snapId,
          status: "ready",
          image: `${SNAPSHOT_REPO}:${tag}`,
        });
        const answered = forcedSnapshotId ?? `${snapId}:default`;
        forcedSnapshotId = null;
        return sendJson(res, 201, { snapshotID: answered, names: [`double/${snapId}:default`] });
      }
      if (m === "DELETE" && !sb[2]) {
        sandboxes.delete(s.sandboxID);
        await docker.getContainer(s.containerId).remove({ force: true });
        res.writeHead(204).end();
        return;
      }
      if (m === "GET" && !sb[2])
        return sendJson(res, 200, { ...created(s), state: "running", metadata: s.metadata });
    }
    sendJson(res, 404, { code: 404, message: `no route ${m} ${url.pathname}` });
  }

  async function envd(req: IncomingMessage, res: ServerResponse, url: URL, s: SandboxRecord): Promise<void> {
    if (url.pathname === "/health") {
      res.writeHead(204).end();
      return;
    }
    if (req.headers["x-access-token"] !== s.accessToken)
      return sendJson(res, 401, { code: 401, message: "invalid access token" });
    const user = basicUser(req) ?? url.searchParams.get("username") ?? "user";
    if (url.pathname === "/files") {
      const path = url.searchParams.get("path") ?? "";
      if (!path) return sendJson(res, 400, { code: 400, message: "path is required" });
      if (req.method === "GET") {
        const out: Buffer[] = [];
        const errs: Buffer[] = [];
        const code = await run(s, ["cat", "--", path], { user }, (w, b) =>
          (w === "stdout" ? out : errs).push(b),
        );
        if (code !== 0) {
          const msg = Buffer.concat(errs).toString();
          return sendJson(res, /denied/i.test(msg) ? 403 : 404, { code: 404, message: msg.trim() });
        }
        res.writeHead(200, { "content-type": "application/octet-stream" }).end(Buffer.concat(out));
        return;
      }
      if (req.method === "POST") {
        const data = await readBody(req);
        const errs: Buffer[] = [];
        const code = await run(
          s,
          ["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path],
          { user, input: data },
          (_w, b) => errs.push(b),
        );
        if (code !== 0)
          return sendJson(res, 403, { code: 403, message: Buffer.concat(errs).toString().trim() });
        return sendJson(res, 200, [{ name: path.split("/").pop(), type: "file", path }]);
      }
    }
    if (req.method === "POST" && url.pathname === "/process.Process/Start") {
      const raw = await readBody(req);
      // A server-streaming call's request is one envelope.
      const len = raw.readUInt32BE(1);
      const start = JSON.parse(raw.subarray(5, 5 + len).toString()) as {
        process: { cmd: string; args?: string[]; envs?: Record<string, string>; cwd?: string };
      };
      res.writeHead(200, { "content-type": "application/connect+json" });
      res.write(envelope(0, { event: { start: { pid: 1000 + seen.length } } }));
      try {
        const code = await run(
          s,
          [start.process.cmd, ...(start.process.args ?? [])],
          { user, envs: start.process.envs, cwd: start.process.cwd },
          (which, b) => res.write(envelope(0, { event: { data: { [which]: b.toString("base64") } } })),
        );
        res.write(
          envelope(0, { event: { end: { exitCode: code, exited: true, status: `exit status ${code}` } } }),
        );
        res.end(envelope(2, {}));
      } catch (err) {
        res.end(envelope(2, { error: { code: "internal", message: (err as Error).message } }));
      }
      return;
    }
    sendJson(res, 404, { code: 404, message: `envd has no ${req.method} ${url.pathname}` });
  }

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://double");
    const sandboxId = req.headers["e2b-sandbox-id"];
    seen.push(`${req.method} ${url.pathname}${typeof sandboxId === "string" ? ` @${sandboxId}` : ""}`);
    const fault = faults.get(`${req.method} ${url.pathname}`);
    if (fault) {
      faults.delete(`${req.method} ${url.pathname}`);
      res.writeHead(fault.status, { "content-type": "application/json" }).end(fault.body);
      return;
    }
    const handle = async () => {
      if (typeof sandboxId === "string") {
        const s = sandboxes.get(sandboxId);
        if (!s) return sendJson(res, 502, { code: 502, message: `sandbox ${sandboxId} is not running` });
        return envd(req, res, url, s);
      }
      return controlPlane(req, res, url);
    };
    handle().catch((err: Error) => {
      if (!res.headersSent) sendJson(res, 500, { code: 500, message: err.message });
      else res.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    apiKey,
    seen,
    sandboxes: () => [...sandboxes.values()],
    fault: (route, status, faultBody) => faults.set(route, { status, body: faultBody }),
    nextSandboxId: (id) => {
      forcedId = id;
    },
    nextSnapshotId: (id) => {
      forcedSnapshotId = id;
    },
    snapshots: () =>
      [...builds.values()].filter((b) => b.buildID.startsWith("snap-")).map((b) => b.templateID),
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await removeLabelled(docker, TEST_LABEL, label);
      await Promise.all(
        [...snapshotImages].map((i) =>
          docker
            .getImage(i)
            .remove({ force: true })
            .catch(() => {}),
        ),
      );
    },
  };
}
