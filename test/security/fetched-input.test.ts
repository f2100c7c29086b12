/**
 * Anything the control plane fetches for a team is hostile: git repositories, registries, cloud
 * APIs. Local HTTP servers stand in for an internal service the server can reach (which must never
 * be fetched, nor its answers reflected), for a hostile registry and for a hostile git repository.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { type RunningServer, startServer } from "@denv/server";
import { type GitHttpServer, startGitHttpServer } from "../doubles/git-http-server.ts";

const KEY = `dk_fetch_${randomBytes(8).toString("hex")}`;
const CANARY = `canary-${randomBytes(12).toString("hex")}`;

/** A local HTTP server that records what it was asked and answers with a handler. */
async function listener(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ server: Server; host: string; url: string; hits: string[] }> {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    handler(req, res);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return { server, host: `127.0.0.1:${port}`, url: `http://127.0.0.1:${port}`, hits };
}

let server: RunningServer;
let dataDir: string;
let gitRoot: string;
let git: GitHttpServer;
let internal: Awaited<ReturnType<typeof listener>>;
let registry: Awaited<ReturnType<typeof listener>>;
let hetzner: Awaited<ReturnType<typeof listener>>;
/** Bytes the hostile registry managed to send of its endless manifest. */
let endlessSent = 0;

async function api(method: string, path: string, body?: unknown) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${KEY}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, data: (await res.json()) as any };
}

/** Uploads a compose file to a fresh local project and deploys it; returns the deployment. */
async function deployCompose(compose: string): Promise<any> {
  const name = `p-${randomBytes(4).toString("hex")}`;
  assert.equal((await api("POST", "/v1/projects", { name, kind: "agent", source: "./x" })).status, 201);
  assert.equal((await api("PUT", `/v1/projects/${name}/source`, { compose })).status, 200);
  return (await api("POST", `/v1/projects/${name}/deploy?wait=true`, {})).data;
}

/** `POST /v1/clouds` for Hetzner with a token and an endpoint of the test's choosing. */
const connectCloud = (name: string, apiUrl: string) =>
  api("POST", "/v1/clouds", {
    provider: "hetzner",
    name,
    token: "t",
    server_type: "cx22",
    location: "fsn1",
    api_url: apiUrl,
  });

const manifest = JSON.stringify({
  schemaVersion: 2,
  mediaType: "application/vnd.oci.image.manifest.v1+json",
});

before(async () => {
  internal = await listener((_req, res) => res.end(`internal secret ${CANARY}`));
  registry = await listener((req, res) => {
    const path = req.url ?? "";
    if (path.includes("/realm-elsewhere/")) {
      res.writeHead(401, { "www-authenticate": `Bearer realm="${internal.url}/token",service="x"` });
      return res.end();
    }
    if (path.includes("/redirect-elsewhere/")) {
      res.writeHead(307, { location: `${internal.url}/v2/x/manifests/1` });
      return res.end();
    }
    if (path.includes("/bad-digest/")) {
      res.writeHead(200, { "docker-content-digest": "sha256:garbage", "content-type": "application/json" });
      return res.end(manifest);
    }
    if (path.includes("/not-a-manifest/")) {
      res.writeHead(200, { "content-type": "text/plain" });
      return res.end(`<html>${CANARY}</html>`);
    }
    if (path.includes("/endless/")) {
      // 400 MB, streamed without a length, as fast as it is read.
      res.writeHead(200, { "content-type": "application/json" });
      const chunk = Buffer.alloc(1024 * 1024, 0x20);
      const pump = () => {
        while (endlessSent < 400 * 1024 * 1024) {
          endlessSent += chunk.length;
          if (!res.write(chunk)) return void res.once("drain", pump);
        }
        res.end();
      };
      res.on("close", () => {});
      return pump();
    }
    res.writeHead(404);
    res.end();
  });
  hetzner = await listener((req, res) => {
    if ((req.url ?? "").startsWith("/redirect")) {
      res.writeHead(302, { location: `${internal.url}/servers` });
      return res.end();
    }
    res.writeHead(401, { "content-type": "text/plain" });
    res.end(`not json ${CANARY}`);
  });
  gitRoot = await mkdtemp(join(tmpdir(), "denv-sec-git-"));
  git = await startGitHttpServer(gitRoot);
  dataDir = await mkdtemp(join(tmpdir(), "denv-sec-fetch-"));
  server = await startServer({
    dataDir,
    adminKey: KEY,
    // The hostile registry, git server and cloud endpoint are allowed; the internal service is not.
    fetchAllow: [registry.host, git.host, hetzner.host],
  });
});

after(async () => {
  await server?.close();
  await git?.close();
  for (const l of [internal, registry, hetzner]) l?.server.close();
  await rm(gitRoot, { recursive: true, force: true });
  await rm(dataDir, { recursive: true, force: true });
});

/** A repository whose files the test writes, served over HTTP by the git server. */
async function repo(name: string, files: (dir: string) => Promise<void>): Promise<string> {
  const dir = join(gitRoot, `${name}.git`);
  execFileSync("git", ["init", "-q", "-b", "main", dir]);
  await files(dir);
  execFileSync("git", ["-C", dir, "add", "-A"]);
  execFileSync("git", ["-C", dir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]);
  return `${git.url}/${name}.git`;
}

describe("a hostile git repository", () => {
  test("a .env linking to a server file is refused, and nothing of the file reaches the deployment", async () => {
    const secretFile = join(dataDir, "canary.txt");
    await writeFile(secretFile, `SECRET=${CANARY}\n`);
    const source = await repo("env-link", async (dir) => {
      await writeFile(join(dir, "compose.yaml"), 'services:\n  a:\n    image: "leak/${SECRET}"\n');
      await symlink(secretFile, join(dir, ".env"));
    });
    await api("POST", "/v1/projects", { name: "env-link", kind: "agent", source });
    const d = (await api("POST", "/v1/projects/env-link/deploy?wait=true", {})).data;
    assert.equal(d.status, "rolled_back");
    assert.match(d.phases[0].reason, /\.env is a symbolic link/);
    assert.ok(!JSON.stringify(d).includes(CANARY));
  });

  test("a compose file linking to /proc/self/environ is refused, and the server's environment stays in", async () => {
    const source = await repo("environ-link", async (dir) => {
      await symlink("/proc/self/environ", join(dir, "compose.yaml"));
    });
    await api("POST", "/v1/projects", { name: "environ-link", kind: "agent", source });
    const d = (await api("POST", "/v1/projects/environ-link/deploy?wait=true", {})).data;
    assert.equal(d.status, "rolled_back");
    assert.match(d.phases[0].reason, /compose\.yaml is a symbolic link/);
    assert.ok(!JSON.stringify(d).includes(KEY));
    assert.ok(!JSON.stringify(d).includes("PATH="));
  });

  test("file://, ssh and local-path git sources, and URLs with credentials, are refused at create", async () => {
    for (const source of [
      `file://${gitRoot}/env-link.git`,
      "ssh://git@github.com/you/world.git",
      "git@github.com:you/world.git",
      "git://github.com/you/world.git",
      "ext::sh -c touch% /tmp/pwned",
      `http://user:token@${git.host}/env-link.git`,
    ]) {
      const r = await api("POST", "/v1/projects", {
        name: `s${randomBytes(3).toString("hex")}`,
        kind: "agent",
        source,
      });
      assert.ok(r.status === 400 || r.status === 403, `${source}: ${r.status}`);
      assert.ok(r.data.error.message.length > 20);
    }
  });
});

describe("server-side request forgery", () => {
  test("a cloud endpoint on a host the administrator did not allow is never called", async () => {
    const r = await connectCloud("ssrf", `${internal.url}/v1`);
    assert.equal(r.status, 403);
    assert.match(r.data.error.message, /not a host this server fetches from/);
    assert.deepEqual(internal.hits, []);
  });

  test("a # or ? in the endpoint cannot cut off the path, and an answer that is not the API's is not reflected", async () => {
    const cut = await connectCloud("cut", `${hetzner.url}/anything#`);
    assert.equal(cut.status, 400);
    const answer = await connectCloud("reflect", `${hetzner.url}/v1`);
    assert.equal(answer.status, 400);
    assert.ok(!JSON.stringify(answer.data).includes(CANARY), JSON.stringify(answer.data));
    const redirected = await connectCloud("redirect", `${hetzner.url}/redirect`);
    assert.equal(redirected.status, 400);
    assert.deepEqual(internal.hits, []);
  });

  test("an image on a registry the administrator did not allow is refused at resolve, with no request made", async () => {
    const d = await deployCompose(`services:\n  a:\n    image: ${internal.host}/x:1\n`);
    assert.equal(d.status, "rolled_back");
    assert.match(d.phases[0].reason, /not a host this server fetches from/);
    assert.deepEqual(internal.hits, []);
  });
});

describe("a hostile registry", () => {
  test("an auth realm on another host is not followed", async () => {
    const d = await deployCompose(`services:\n  a:\n    image: ${registry.host}/realm-elsewhere/x:1\n`);
    assert.equal(d.status, "rolled_back");
    assert.match(d.phases[0].reason, /auth realm on .*which this server does not fetch from/);
    assert.deepEqual(internal.hits, []);
  });

  test("a redirect to another host is not followed", async () => {
    const d = await deployCompose(`services:\n  a:\n    image: ${registry.host}/redirect-elsewhere/x:1\n`);
    assert.equal(d.status, "rolled_back");
    assert.match(d.phases[0].reason, /redirected to another host/);
    assert.deepEqual(internal.hits, []);
  });

  test("a digest that does not match the manifest, or an answer that is no manifest, is refused", async () => {
    const bad = await deployCompose(`services:\n  a:\n    image: ${registry.host}/bad-digest/x:1\n`);
    assert.equal(bad.status, "rolled_back");
    assert.match(bad.phases[0].reason, /does not match the manifest/);
    const html = await deployCompose(`services:\n  a:\n    image: ${registry.host}/not-a-manifest/x:1\n`);
    assert.equal(html.status, "rolled_back");
    assert.match(html.phases[0].reason, /no manifest/);
    assert.ok(!JSON.stringify(html).includes(CANARY));
  });

  test("an endless manifest is read only up to its bound", async () => {
    const d = await deployCompose(`services:\n  a:\n    image: ${registry.host}/endless/x:1\n`);
    assert.equal(d.status, "rolled_back");
    assert.match(d.phases[0].reason, /over the 4194304 bytes denv reads/);
    // The server stopped reading long before the 400 MB the registry had to give.
    assert.ok(endlessSent < 64 * 1024 * 1024, `${endlessSent} bytes sent`);
  });
});

describe("a hostile compose file", () => {
  test("aliases that expand without bound are refused, and the API answers meanwhile", async () => {
    let compose = `x-big: &big "${"$a".repeat(225_000)}"\nservices:\n  s:\n    image: ${registry.host}/x:1\n    environment:\n`;
    for (let i = 0; i < 150; i++) compose += `      V${i}: *big\n`;
    const name = "bomb";
    await api("POST", "/v1/projects", { name, kind: "agent", source: "./x" });
    assert.equal((await api("PUT", `/v1/projects/${name}/source`, { compose })).status, 200);
    const deploying = api("POST", `/v1/projects/${name}/deploy?wait=true`, {});
    // Answered while the file is being checked: the check is not on the event loop.
    const listed = await api("GET", "/v1/projects");
    assert.equal(listed.status, 200);
    const d = (await deploying).data;
    assert.equal(d.status, "rolled_back");
    assert.match(d.phases[0].reason, /expands to more than/);
    assert.equal((await api("GET", "/v1/projects")).status, 200);
  });
});
