/**
 * A local double of Prime Intellect Sandboxes, written from its published API (the sandbox
 * OpenAPI at `/api/v1/sandbox/openapi.json` and the `prime-sandboxes` SDK's models), on loopback
 * only:
 *
 * - the control plane (`Authorization: Bearer KEY`): `POST /api/v1/sandbox` answers PENDING and
 *   the sandbox goes PROVISIONING then RUNNING as its container starts; `GET` one or the list,
 *   `DELETE`, and `POST /{id}/auth`, which names the sandbox's gateway and a token for it;
 * - the gateway, at `{gateway_url}/{user_ns}/{job_id}`: `/exec` (answering stdout, stderr and the
 *   exit code when the command ends, or 408 past its timeout, having ended it), `/upload` (a
 *   multipart form) and `/download`, each with the sandbox's token and id.
 *
 * Each sandbox is a container on the local engine from `docker_image` (pulled from the local
 * registry), running `start_command` by a shell; with `network_access: false` it has no network.
 * Uploads are written as root, as the gateway's own process would. Nothing here is reached from
 * outside the machine, and no request leaves it.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import Docker from "dockerode";
import { captureIn, pullImage, readBody, removeLabelled, sendJson } from "./double-engine.ts";

interface SandboxRecord {
  id: string;
  name: string;
  image: string;
  status: "PENDING" | "PROVISIONING" | "RUNNING" | "ERROR" | "TERMINATED";
  errorMessage?: string;
  networkAccess: boolean;
  env: Record<string, string>;
  labels: string[];
  token: string;
  containerId?: string;
  createdAt: string;
}

export interface PrimeDouble {
  url: string;
  apiKey: string;
  /** Every request the double saw, as "METHOD path". */
  seen: string[];
  sandboxes(): SandboxRecord[];
  /** The next request to "METHOD /path" is answered with this status and raw body instead. */
  fault(route: string, status: number, body: string): void;
  /** The next auth call answers with these fields in place of its own (a hostile provider). */
  nextAuth(fields: Record<string, unknown>): void;
  close(): Promise<void>;
}

const TEST_LABEL = "dev.denv.prime-double";

/** The first file part of a multipart/form-data body. */
function filePart(raw: Buffer, contentType: string): Buffer | null {
  const boundary = /boundary=(?:"([^"]+)"|([^;]+))/.exec(contentType);
  if (!boundary) return null;
  const delimiter = Buffer.from(`--${boundary[1] ?? boundary[2]}`);
  const start = raw.indexOf(delimiter);
  const headEnd = raw.indexOf("\r\n\r\n", start);
  const end = raw.indexOf(Buffer.concat([Buffer.from("\r\n"), delimiter]), headEnd);
  if (start < 0 || headEnd < 0 || end < 0) return null;
  return raw.subarray(headEnd + 4, end);
}

export async function startPrimeDouble(): Promise<PrimeDouble> {
  const docker = new Docker();
  const apiKey = `pit_${randomBytes(20).toString("hex")}`;
  const label = randomBytes(6).toString("hex");
  const sandboxes = new Map<string, SandboxRecord>();
  const seen: string[] = [];
  const faults = new Map<string, { status: number; body: string }>();
  let authOverride: Record<string, unknown> | null = null;
  let url = "";

  function run(
    s: SandboxRecord,
    argv: string[],
    o: { user: string; env?: Record<string, string>; cwd?: string; input?: Buffer },
  ): Promise<{ exitCode: number; stdout: Buffer; stderr: Buffer }> {
    return captureIn(docker, s.containerId as string, argv, { ...o, env: { ...s.env, ...(o.env ?? {}) } });
  }

  async function provision(s: SandboxRecord, startCommand: string): Promise<void> {
    s.status = "PROVISIONING";
    await pullImage(docker, s.image);
    const c = await docker.createContainer({
      Image: s.image,
      Entrypoint: ["/bin/sh", "-c", startCommand],
      Cmd: [],
      User: "root",
      Env: Object.entries(s.env).map(([k, v]) => `${k}=${v}`),
      Labels: { [TEST_LABEL]: label, "dev.denv.test": `prime-double-${label}` },
      HostConfig: { NetworkMode: s.networkAccess ? "bridge" : "none", AutoRemove: false },
    });
    s.containerId = c.id;
    await c.start();
  }

  const dto = (s: SandboxRecord) => ({
    id: s.id,
    name: s.name,
    dockerImage: s.image,
    startCommand: "tail -f /dev/null",
    cpuCores: 1,
    memoryGB: 2,
    diskSizeGB: 10,
    gpuCount: 0,
    networkAccess: s.networkAccess,
    status: s.status,
    timeoutMinutes: 60,
    environmentVars: s.env,
    labels: s.labels,
    createdAt: s.createdAt,
    ...(s.errorMessage ? { errorMessage: s.errorMessage } : {}),
  });

  async function controlPlane(req: IncomingMessage, res: ServerResponse, parts: string[]): Promise<void> {
    if (req.headers.authorization !== `Bearer ${apiKey}`)
      return sendJson(res, 401, { detail: "Invalid API key" });
    const [, , , id, action] = parts;
    if (!id) {
      if (req.method === "GET") {
        const live = [...sandboxes.values()].filter((s) => s.status !== "TERMINATED");
        return sendJson(res, 200, {
          sandboxes: live.map(dto),
          total: live.length,
          page: 1,
          per_page: 50,
          has_next: false,
        });
      }
      if (req.method === "POST") {
        const b = JSON.parse((await readBody(req)).toString() || "{}");
        if (typeof b.name !== "string" || typeof b.docker_image !== "string")
          return sendJson(res, 422, { detail: "name and docker_image are required" });
        const s: SandboxRecord = {
          id: randomBytes(12).toString("hex"),
          name: b.name,
          image: b.docker_image,
          status: "PENDING",
          networkAccess: b.network_access !== false,
          env: b.environment_vars ?? {},
          labels: b.labels ?? [],
          token: randomBytes(16).toString("hex"),
          createdAt: new Date().toISOString(),
        };
        sandboxes.set(s.id, s);
        provision(s, String(b.start_command ?? "tail -f /dev/null")).then(
          () => {
            if (s.status === "PROVISIONING") s.status = "RUNNING";
          },
          (err: Error) => {
            s.status = "ERROR";
            s.errorMessage = err.message;
          },
        );
        return sendJson(res, 201, dto(s));
      }
    }
    const s = sandboxes.get(decodeURIComponent(id ?? ""));
    if (!s || s.status === "TERMINATED") return sendJson(res, 404, { detail: "Sandbox not found" });
    if (req.method === "GET" && !action) return sendJson(res, 200, dto(s));
    if (req.method === "DELETE" && !action) {
      s.status = "TERMINATED";
      if (s.containerId) await docker.getContainer(s.containerId).remove({ force: true });
      return sendJson(res, 200, { success: true });
    }
    if (req.method === "POST" && action === "auth") {
      const given = authOverride;
      authOverride = null;
      return sendJson(res, 200, {
        gateway_url: `${url}/gateway`,
        user_ns: "ns-double",
        job_id: `job-${s.id}`,
        token: s.token,
        is_vm: false,
        ...(given ?? {}),
      });
    }
    return sendJson(res, 404, { detail: `no route ${req.method} ${parts.join("/")}` });
  }

  async function gateway(req: IncomingMessage, res: ServerResponse, parts: string[], u: URL) {
    const [, , job, op] = parts;
    const s = [...sandboxes.values()].find((x) => `job-${x.id}` === job);
    if (s?.status !== "RUNNING") return sendJson(res, 502, { detail: "sandbox_not_found" });
    if (req.headers.authorization !== `Bearer ${s.token}`)
      return sendJson(res, 401, { detail: "Invalid token" });
    if (req.method === "POST" && op === "exec") {
      const b = JSON.parse((await readBody(req)).toString() || "{}");
      if (b.sandbox_id !== s.id) return sendJson(res, 400, { detail: "sandbox_id does not match" });
      const seconds = Number(b.timeout ?? 300);
      const started = Date.now();
      // The gateway ends a command at its timeout and answers 408.
      const r = await run(s, ["timeout", "-s", "KILL", String(seconds), "sh", "-c", String(b.command)], {
        user: String(b.user ?? "root"),
        env: b.env ?? {},
        ...(b.working_dir ? { cwd: b.working_dir } : {}),
      });
      if (r.exitCode === 137 && Date.now() - started >= seconds * 1000)
        return sendJson(res, 408, { detail: `command timed out after ${seconds} s` });
      return sendJson(res, 200, {
        stdout: r.stdout.toString(),
        stderr: r.stderr.toString(),
        exit_code: r.exitCode,
      });
    }
    if (u.searchParams.get("sandbox_id") !== s.id)
      return sendJson(res, 400, { detail: "sandbox_id does not match" });
    const path = u.searchParams.get("path") ?? "";
    if (req.method === "POST" && op === "upload") {
      const file = filePart(await readBody(req), String(req.headers["content-type"] ?? ""));
      if (!file) return sendJson(res, 400, { detail: "no file part" });
      const r = await run(s, ["sh", "-c", 'cat > "$1"', "sh", path], { user: "root", input: file });
      if (r.exitCode !== 0) return sendJson(res, 400, { detail: r.stderr.toString().trim() });
      return sendJson(res, 200, { success: true, path, size: file.length });
    }
    if (req.method === "GET" && op === "download") {
      const r = await run(s, ["cat", "--", path], { user: "root" });
      if (r.exitCode !== 0) return sendJson(res, 404, { detail: r.stderr.toString().trim() });
      return res.writeHead(200, { "content-type": "application/octet-stream" }).end(r.stdout);
    }
    return sendJson(res, 404, { detail: `no gateway route ${op}` });
  }

  const server: Server = createServer((req, res) => {
    const handle = async () => {
      const u = new URL(req.url ?? "/", "http://double");
      seen.push(`${req.method} ${u.pathname}`);
      const fault = faults.get(`${req.method} ${u.pathname}`);
      if (fault) {
        faults.delete(`${req.method} ${u.pathname}`);
        return res.writeHead(fault.status, { "content-type": "text/html" }).end(fault.body);
      }
      const parts = u.pathname.split("/").filter(Boolean);
      if (parts[0] === "gateway") return gateway(req, res, parts, u);
      if (parts[0] === "api" && parts[1] === "v1" && parts[2] === "sandbox")
        return controlPlane(req, res, parts);
      return sendJson(res, 404, { detail: "Not Found" });
    };
    handle().catch((err: Error) => {
      if (!res.headersSent) sendJson(res, 500, { detail: err.message });
      else res.destroy();
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
    nextAuth: (fields) => {
      authOverride = fields;
    },
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await removeLabelled(docker, TEST_LABEL, label);
    },
  };
}
