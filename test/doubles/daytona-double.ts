/**
 * A local double of Daytona, written from its published API (the sandbox API's OpenAPI and the
 * toolbox daemon's, as `@daytona/api-client` and `@daytona/toolbox-api-client` 0.218 carry them)
 * as the official `@daytonaio/sdk` calls them, on loopback only:
 *
 * - the control plane (`Authorization: Bearer KEY`): sandboxes created from a build (`POST
 *   /sandbox` with `buildInfo.dockerfileContent`; the answer is `pending_build` and the SDK polls
 *   `GET /sandbox/{id}` until `started`, as Daytona's create does), listed, got and deleted;
 * - the toolbox, at the sandbox's `toolboxProxyUrl` + `/{id}`: sessions (`/process/session`, a
 *   command's exec answering with its exit code, stdout and stderr, or started in the background
 *   with `runAsync`; such a command's state at `.../command/{cmdId}`, and its output followed on a
 *   WebSocket at `.../command/{cmdId}/logs?follow=true`, each chunk after the toolbox's 3-byte
 *   marker, 0x01 thrice for stdout and 0x02 thrice for stderr, closed when the command ends),
 *   `/files/bulk-upload` (a multipart form) and `/files/bulk-download` (a multipart answer).
 *
 * Each sandbox is a container on the local engine. Its build takes the Dockerfile's FROM (pulled
 * from the local registry) and runs each RUN line in it as root, as Daytona's builder would; any
 * other instruction fails the build, which is all the driver writes. Commands run by the engine's
 * exec as the sandbox's user; a session keeps no shell state between its commands (the driver
 * uses one per command). With `networkBlockAll` the container has no network.
 * Nothing here is reached from outside the machine, and no request leaves it.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import Docker from "dockerode";
import { type WebSocket, WebSocketServer } from "ws";
import { captureIn, execIn, pullImage, readBody, removeLabelled, sendJson } from "./double-engine.ts";

interface SandboxRecord {
  id: string;
  name: string;
  user: string;
  env: Record<string, string>;
  labels: Record<string, string>;
  networkBlockAll: boolean;
  state: "pending_build" | "started" | "build_failed" | "destroyed";
  errorReason?: string;
  containerId?: string;
  dockerfile: string;
  createdAt: string;
}

export interface DaytonaDouble {
  url: string;
  apiKey: string;
  /** Every request the double saw, as "METHOD path". */
  seen: string[];
  sandboxes(): SandboxRecord[];
  /** The next request to "METHOD /path" is answered with this status and raw body instead. */
  fault(route: string, status: number, body: string): void;
  /** The next sandbox made gets this id (a hostile endpoint's answer). */
  nextSandboxId(id: string): void;
  /** Sandboxes' toolboxProxyUrl from now on (a hostile endpoint naming another host); null: its own. */
  toolboxAt(url: string | null): void;
  close(): Promise<void>;
}

const TEST_LABEL = "dev.denv.daytona-double";
/** The toolbox's markers before each chunk of a followed command's output. */
const MARKER = { stdout: Buffer.from([1, 1, 1]), stderr: Buffer.from([2, 2, 2]) };

/** A command started with runAsync: its output so far, and its exit code once it ended. */
interface AsyncCommand {
  command: string;
  output: { which: "stdout" | "stderr"; data: Buffer }[];
  exitCode: number | null;
  followers: Set<WebSocket>;
}

function error(res: ServerResponse, status: number, message: string): void {
  sendJson(res, status, { statusCode: status, message, error: message });
}

/** The parts of a multipart/form-data body: each its name, filename and bytes. */
function multipart(raw: Buffer, contentType: string): { name: string; filename?: string; data: Buffer }[] {
  const boundary = /boundary=(?:"([^"]+)"|([^;]+))/.exec(contentType);
  if (!boundary) throw new Error("no multipart boundary");
  const delimiter = Buffer.from(`--${boundary[1] ?? boundary[2]}`);
  const out: { name: string; filename?: string; data: Buffer }[] = [];
  let at = raw.indexOf(delimiter);
  while (at >= 0) {
    const start = at + delimiter.length;
    if (raw.subarray(start, start + 2).toString() === "--") break;
    const headEnd = raw.indexOf("\r\n\r\n", start);
    const next = raw.indexOf(Buffer.concat([Buffer.from("\r\n"), delimiter]), headEnd);
    if (headEnd < 0 || next < 0) throw new Error("a multipart part that does not end");
    const head = raw.subarray(start + 2, headEnd).toString();
    const name = /name="([^"]*)"/.exec(head)?.[1] ?? "";
    const filename = /filename="([^"]*)"/.exec(head)?.[1];
    out.push({
      name,
      ...(filename !== undefined ? { filename } : {}),
      data: raw.subarray(headEnd + 4, next),
    });
    at = next + 2;
  }
  return out;
}

export async function startDaytonaDouble(): Promise<DaytonaDouble> {
  const docker = new Docker();
  const apiKey = `dtn_${randomBytes(20).toString("hex")}`;
  const label = randomBytes(6).toString("hex");
  const sandboxes = new Map<string, SandboxRecord>();
  const commands = new Map<string, AsyncCommand>();
  const seen: string[] = [];
  const faults = new Map<string, { status: number; body: string }>();
  let forcedId: string | null = null;
  let toolboxBase: string | null = null;
  let url = "";

  /** Runs argv in a sandbox's container as a user, with its variables; stdin from `input` when given. */
  function run(
    s: SandboxRecord,
    argv: string[],
    o: { user: string; input?: Buffer },
    onOut: (which: "stdout" | "stderr", b: Buffer) => void,
  ): Promise<number> {
    return execIn(docker, s.containerId as string, argv, { ...o, env: s.env }, onOut);
  }

  function capture(s: SandboxRecord, argv: string[], o: { user: string; input?: Buffer }) {
    return captureIn(docker, s.containerId as string, argv, { ...o, env: s.env });
  }

  /** Daytona's builder, as far as the driver needs it: FROM, then each RUN as root. */
  async function build(s: SandboxRecord): Promise<void> {
    const lines = s.dockerfile.split("\n").filter((l) => l.trim());
    const from = /^FROM\s+(\S+)$/.exec(lines[0] ?? "");
    if (!from) throw new Error("the Dockerfile does not start with FROM");
    const image = from[1] as string;
    await pullImage(docker, image);
    const c = await docker.createContainer({
      Image: image,
      Entrypoint: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done"],
      Cmd: [],
      User: "root",
      Labels: { [TEST_LABEL]: label, "dev.denv.test": `daytona-double-${label}` },
      HostConfig: { NetworkMode: s.networkBlockAll ? "none" : "bridge", AutoRemove: false },
    });
    s.containerId = c.id;
    await c.start();
    for (const line of lines.slice(1)) {
      const step = /^RUN\s+(.+)$/.exec(line);
      if (!step) throw new Error(`the double builds FROM and RUN only, not ${line.slice(0, 40)}`);
      const r = await capture(s, ["sh", "-c", step[1] as string], { user: "root" });
      if (r.exitCode !== 0)
        throw new Error(`RUN ${step[1]} exited ${r.exitCode}: ${r.stderr.toString().slice(0, 300)}`);
    }
  }

  const dto = (s: SandboxRecord) => ({
    id: s.id,
    organizationId: "org-double",
    name: s.name,
    user: s.user,
    env: s.env,
    labels: s.labels,
    public: false,
    networkBlockAll: s.networkBlockAll,
    target: "us",
    cpu: 1,
    gpu: 0,
    memory: 1,
    disk: 3,
    state: s.state,
    ...(s.errorReason ? { errorReason: s.errorReason } : {}),
    createdAt: s.createdAt,
    toolboxProxyUrl: toolboxBase ?? `${url}/toolbox`,
  });

  async function controlPlane(req: IncomingMessage, res: ServerResponse, u: URL): Promise<void> {
    const parts = u.pathname.split("/").filter(Boolean);
    if (req.method === "GET" && parts.length === 1 && parts[0] === "sandbox") {
      const live = [...sandboxes.values()].filter((s) => s.state !== "destroyed");
      return sendJson(res, 200, { items: live.map(dto), total: live.length, nextCursor: null });
    }
    if (req.method === "POST" && parts.length === 1 && parts[0] === "sandbox") {
      const b = JSON.parse((await readBody(req)).toString() || "{}");
      const dockerfile = b.buildInfo?.dockerfileContent;
      if (typeof dockerfile !== "string")
        return error(res, 400, "buildInfo.dockerfileContent or snapshot is required");
      const id =
        forcedId ??
        randomBytes(16)
          .toString("hex")
          .replace(/^(.{8})(.{4})(.{4})(.{4})/, "$1-$2-$3-$4-");
      forcedId = null;
      const s: SandboxRecord = {
        id,
        name: b.name ?? id,
        user: b.user ?? "daytona",
        env: b.env ?? {},
        labels: b.labels ?? {},
        networkBlockAll: b.networkBlockAll === true,
        state: "pending_build",
        dockerfile,
        createdAt: new Date().toISOString(),
      };
      sandboxes.set(id, s);
      build(s).then(
        () => {
          if (s.state === "pending_build") s.state = "started";
        },
        (err: Error) => {
          s.state = "build_failed";
          s.errorReason = err.message;
        },
      );
      return sendJson(res, 200, dto(s));
    }
    if (parts[0] === "sandbox" && parts.length >= 2) {
      const s = sandboxes.get(decodeURIComponent(parts[1] as string));
      if (!s || s.state === "destroyed")
        return error(res, 404, `Sandbox with ID or name ${parts[1]} not found`);
      if (req.method === "GET" && parts.length === 2) return sendJson(res, 200, dto(s));
      if (req.method === "GET" && parts[2] === "toolbox-proxy-url")
        return sendJson(res, 200, { url: `${url}/toolbox` });
      if (req.method === "DELETE" && parts.length === 2) {
        s.state = "destroyed";
        if (s.containerId) await docker.getContainer(s.containerId).remove({ force: true });
        return sendJson(res, 200, dto(s));
      }
    }
    return error(res, 404, `no route ${req.method} ${u.pathname}`);
  }

  async function toolbox(req: IncomingMessage, res: ServerResponse, s: SandboxRecord, rest: string[]) {
    if (s.state !== "started") return error(res, 409, `sandbox ${s.id} is ${s.state}`);
    const path = rest.join("/");
    if (req.method === "POST" && path === "process/session") {
      await readBody(req);
      return res.writeHead(201).end();
    }
    if (req.method === "DELETE" && /^process\/session\/[^/]+$/.test(path)) return res.writeHead(204).end();
    const exec = /^process\/session\/[^/]+\/exec$/.exec(path);
    if (req.method === "POST" && exec) {
      const b = JSON.parse((await readBody(req)).toString() || "{}");
      const cmdId = randomBytes(8).toString("hex");
      if (b.runAsync || b.async) {
        const c: AsyncCommand = {
          command: String(b.command),
          output: [],
          exitCode: null,
          followers: new Set(),
        };
        commands.set(cmdId, c);
        const send = (ws: WebSocket, which: "stdout" | "stderr", data: Buffer) =>
          ws.send(Buffer.concat([MARKER[which], data]));
        void run(s, ["sh", "-c", c.command], { user: s.user }, (which, data) => {
          c.output.push({ which, data });
          for (const ws of c.followers) send(ws, which, data);
        })
          .catch(() => -1)
          .then((code) => {
            c.exitCode = code;
            for (const ws of c.followers) ws.close(1000);
          });
        return sendJson(res, 202, { cmdId });
      }
      const r = await capture(s, ["sh", "-c", String(b.command)], { user: s.user });
      return sendJson(res, 200, {
        cmdId,
        exitCode: r.exitCode,
        stdout: r.stdout.toString(),
        stderr: r.stderr.toString(),
        output: r.stdout.toString() + r.stderr.toString(),
      });
    }
    const state = /^process\/session\/[^/]+\/command\/([^/]+)$/.exec(path);
    if (req.method === "GET" && state) {
      const c = commands.get(state[1] as string);
      if (!c) return error(res, 404, `command ${state[1]} not found`);
      return sendJson(res, 200, {
        id: state[1],
        command: c.command,
        ...(c.exitCode === null ? {} : { exitCode: c.exitCode }),
      });
    }
    if (req.method === "POST" && path === "files/bulk-upload") {
      const parts = multipart(await readBody(req), String(req.headers["content-type"] ?? ""));
      for (let i = 0; parts.some((p) => p.name === `files[${i}].path`); i++) {
        const dest = parts.find((p) => p.name === `files[${i}].path`)?.data.toString() ?? "";
        const file = parts.find((p) => p.name === `files[${i}].file`);
        if (!file) return error(res, 400, `files[${i}].file is missing`);
        const r = await capture(s, ["sh", "-c", 'cat > "$1"', "sh", dest], {
          user: s.user,
          input: file.data,
        });
        if (r.exitCode !== 0) return error(res, 400, r.stderr.toString().trim());
      }
      return res.writeHead(200).end();
    }
    if (req.method === "POST" && path === "files/bulk-download") {
      const b = JSON.parse((await readBody(req)).toString() || "{}");
      const boundary = `double${randomBytes(8).toString("hex")}`;
      const chunks: Buffer[] = [];
      for (const p of (b.paths ?? []) as string[]) {
        const r = await capture(s, ["cat", "--", p], { user: s.user });
        const ok = r.exitCode === 0;
        const content = ok
          ? r.stdout
          : Buffer.from(JSON.stringify({ message: r.stderr.toString().trim(), statusCode: 404 }));
        chunks.push(
          Buffer.from(
            `--${boundary}\r\nContent-Disposition: form-data; name="${ok ? "file" : "error"}"; filename="${p}"\r\nContent-Type: ${ok ? "application/octet-stream" : "application/json"}\r\nContent-Length: ${content.length}\r\n\r\n`,
          ),
          content,
          Buffer.from("\r\n"),
        );
      }
      chunks.push(Buffer.from(`--${boundary}--\r\n`));
      res.writeHead(200, { "content-type": `multipart/form-data; boundary=${boundary}` });
      return res.end(Buffer.concat(chunks));
    }
    return error(res, 404, `no toolbox route ${req.method} ${path}`);
  }

  const server: Server = createServer((req, res) => {
    const handle = async () => {
      const u = new URL(req.url ?? "/", "http://double");
      seen.push(`${req.method} ${u.pathname}`);
      const fault = faults.get(`${req.method} ${u.pathname}`);
      if (fault) {
        faults.delete(`${req.method} ${u.pathname}`);
        return res.writeHead(fault.status, { "content-type": "application/json" }).end(fault.body);
      }
      if (req.headers.authorization !== `Bearer ${apiKey}`) return error(res, 401, "Invalid credentials");
      const parts = u.pathname.split("/").filter(Boolean);
      if (parts[0] === "toolbox") {
        const s = sandboxes.get(decodeURIComponent(parts[1] ?? ""));
        if (!s || s.state === "destroyed") return error(res, 404, `sandbox ${parts[1]} not found`);
        return toolbox(req, res, s, parts.slice(2));
      }
      return controlPlane(req, res, u);
    };
    handle().catch((err: Error) => {
      if (!res.headersSent) error(res, 500, err.message);
      else res.destroy();
    });
  });
  // A followed command's output: what it wrote so far, then each chunk as it comes, then a close.
  const wss = new WebSocketServer({ noServer: true });
  server.on("upgrade", (req, socket, head) => {
    const u = new URL(req.url ?? "/", "http://double");
    seen.push(`WS ${u.pathname}`);
    const m = /^\/toolbox\/([^/]+)\/process\/session\/[^/]+\/command\/([^/]+)\/logs$/.exec(u.pathname);
    const c = m ? commands.get(m[2] as string) : undefined;
    const s = m ? sandboxes.get(decodeURIComponent(m[1] as string)) : undefined;
    if (
      req.headers.authorization !== `Bearer ${apiKey}` ||
      !c ||
      !s ||
      u.searchParams.get("follow") !== "true"
    ) {
      socket.end("HTTP/1.1 404 Not Found\r\n\r\n");
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      for (const o of c.output) ws.send(Buffer.concat([MARKER[o.which], o.data]));
      if (c.exitCode !== null) ws.close(1000);
      else {
        c.followers.add(ws);
        ws.on("close", () => c.followers.delete(ws));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    apiKey,
    seen,
    sandboxes: () => [...sandboxes.values()],
    fault: (route, status, faultBody) => faults.set(route, { status, body: faultBody }),
    nextSandboxId: (id) => {
      forcedId = id;
    },
    toolboxAt: (at) => {
      toolboxBase = at;
    },
    close: async () => {
      for (const ws of wss.clients) ws.terminate();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await removeLabelled(docker, TEST_LABEL, label);
    },
  };
}
