/**
 * The control plane through HTTP, with a real denvd joined over its WebSocket and the real engine:
 * host join, the seed's deploy with its eleven phases, sandboxes from a version, exec and files,
 * snapshot and fork, a warm failure that rolls back while the previous version keeps serving, join
 * tokens that cannot be replayed, the OpenAPI document, and the auth matrix over every route.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { joinServer } from "@denv/denvd";
import { DenvClient } from "@denv/sdk";
import { ROUTES } from "@denv/server";
import tar from "tar-stream";
import { type GitHttpServer, startGitHttpServer } from "../doubles/git-http-server.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { LOCAL_REGISTRY, repoRoot } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

let lab: Lab;
let gitRoot: string;
let gitServer: GitHttpServer;
let otherTeamKey: string;
let hostId: string;

const api = (method: string, path: string, body?: unknown, key: string | null = lab.keyA) =>
  lab.api(method, path, body, key);

before(async () => {
  gitRoot = await mkdtemp(join(tmpdir(), "denv-git-"));
  gitServer = await startGitHttpServer(gitRoot);
  lab = await openLab({ fetchAllow: [...LOCAL_REGISTRY, gitServer.host] });
  hostId = lab.hostId;
  // A second team, to prove isolation.
  otherTeamKey = (await lab.asTeam("other")).key;
});

after(async () => {
  await lab?.close();
  await gitServer?.close();
  await rm(gitRoot, { recursive: true, force: true });
});

describe("hosts", () => {
  test("a joined host reports arch, storage, capacity and version", async () => {
    const { status, data } = await api("GET", "/v1/hosts");
    assert.equal(status, 200);
    const [h] = data.hosts;
    assert.equal(h.id, hostId);
    assert.equal(h.arch, "x86_64");
    assert.equal(h.storage, "btrfs");
    assert.ok(h.capacity.total_bytes > 0 && h.capacity.cpus >= 1);
    assert.equal(h.version, "0.1.0");
    assert.equal(h.connected, true);
    assert.equal((await api("GET", "/v1/hosts", undefined, otherTeamKey)).data.hosts.length, 0);
  });

  test("a join token is single-use; a bad token is refused", async () => {
    const token = (await api("POST", "/v1/hosts/join-token")).data.token as string;
    await joinServer(lab.server.url, token, "once");
    await assert.rejects(joinServer(lab.server.url, token, "twice"), /already used/);
    await assert.rejects(joinServer(lab.server.url, "djt_nonsense", "x"), /not valid/);
    const stored = await lab.server.store.selectFrom("join_tokens").select("token_hash").execute();
    assert.ok(stored.every((t) => t.token_hash.length === 64 && !t.token_hash.startsWith("djt_")));
  });
});

let alphaVersion: string;

describe("deploy", () => {
  test("project create, upload, and a deploy of alpha with all eleven phases recorded", async () => {
    const created = await api("POST", "/v1/projects", {
      name: "ops-world",
      kind: "rl-environment",
      source: "./examples/ops-world",
    });
    assert.equal(created.status, 201);
    assert.equal(created.data.source_type, "local");
    const compose = readFileSync(join(repoRoot, "examples/ops-world/docker-compose.yaml"), "utf8");
    assert.equal((await api("PUT", "/v1/projects/ops-world/source", { compose })).status, 200);
    const { status, data } = await api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
    assert.equal(status, 200);
    assert.equal(
      data.status,
      "succeeded",
      JSON.stringify(data.phases.filter((p: any) => p.status === "failed")),
    );
    assert.deepEqual(
      data.phases.map((p: any) => [p.name, p.status]),
      [
        ["resolve", "succeeded"],
        ["place", "succeeded"],
        ["provision", "skipped"],
        ["join", "skipped"],
        ["prepare", "succeeded"],
        ["start", "succeeded"],
        ["health", "succeeded"],
        ["warm", "succeeded"],
        ["snapshot", "succeeded"],
        ["ingress", "skipped"],
        ["verdict", "succeeded"],
      ],
    );
    const phase = (n: string) => data.phases.find((p: any) => p.name === n);
    assert.match(phase("resolve").evidence.images.db, /@sha256:[0-9a-f]{64}$/);
    assert.equal(phase("place").evidence.host_id, hostId);
    assert.ok(phase("provision").reason.length > 0);
    assert.equal(phase("start").evidence.containers.opsbox.caps.cgroup.pids, 512);
    assert.equal(phase("start").evidence.egress.result, "blocked");
    assert.equal(phase("health").evidence.services.db.method, "healthcheck");
    assert.equal(phase("warm").evidence.commands[0].exit_code, 0);
    assert.ok(phase("snapshot").evidence.frozen_ms > 0);
    alphaVersion = phase("verdict").evidence.version_id;
    const env = (await api("GET", "/v1/envs/alpha")).data;
    assert.equal(env.status, "running");
    assert.equal(env.current_version_id, alphaVersion);
    assert.deepEqual(env.services.sort(), ["db", "opsbox", "queue"]);
  });

  test("a deploy whose warm command fails ends rolled_back, and the previous version keeps serving", async () => {
    const compose = readFileSync(join(repoRoot, "examples/ops-world/docker-compose.yaml"), "utf8").replace(
      '"psql -h db -U postgres -f /seed/orders.sql"',
      "\"psql -h db -U postgres -c 'select no_such_column from orders'\"",
    );
    await api("PUT", "/v1/projects/ops-world/source", { compose });
    const { data } = await api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
    assert.equal(data.status, "rolled_back");
    const warm = data.phases.find((p: any) => p.name === "warm");
    assert.equal(warm.status, "failed");
    assert.match(warm.reason, /exited with/);
    assert.ok(
      data.phases
        .filter((p: any) => ["snapshot", "ingress"].includes(p.name))
        .every((p: any) => p.status === "skipped"),
    );
    assert.match(data.reason, /warm/);
    const env = (await api("GET", "/v1/envs/alpha")).data;
    assert.equal(env.current_version_id, alphaVersion);
    const r = await api("POST", "/v1/envs/alpha/exec", {
      service: "opsbox",
      command: ["psql", "-tAc", "select count(*) from orders"],
    });
    assert.equal(r.data.stdout.trim(), "100000");
    // Only alpha's stack (and nothing of the failed deploy) is on the host.
    assert.equal(lab.host.denvd.stacks().length, 1);
    await api("PUT", "/v1/projects/ops-world/source", {
      compose: compose.replace("no_such_column", "count(*)"),
    });
  });

  test("the deployment log is there to read, and its events stream ends at the verdict", async () => {
    const deps = (await api("GET", "/v1/envs/alpha/deployments")).data.deployments;
    assert.deepEqual(
      deps.map((d: any) => [d.kind, d.status]),
      [
        ["deploy", "succeeded"],
        ["deploy", "rolled_back"],
      ],
    );
    const res = await fetch(`${lab.server.url}/v1/deployments/${deps[0].id}/events`, {
      headers: { authorization: `Bearer ${lab.keyA}` },
    });
    const text = await res.text();
    assert.match(text, /event: deployment/);
    assert.match(text, /"status":"succeeded"/);
  });
});

describe("project sources and placement", () => {
  test("a deploy asking for a GPU on a host without one is rolled back at place, naming the request and the host's inventory", async () => {
    // The host reports what it has (here: no GPU, and why), in GET /v1/hosts.
    const h = (await api("GET", "/v1/hosts")).data.hosts.find((x: any) => x.id === hostId);
    assert.equal(h.gpus.mode, "none");
    assert.deepEqual(h.gpus.devices, []);
    assert.match(h.gpus.note, /no NVIDIA GPU/);
    await api("POST", "/v1/projects", { name: "gpu-job", kind: "service", source: "./gpu-job" });
    await api("PUT", "/v1/projects/gpu-job/source", {
      compose:
        "services:\n  trainer:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    command: [sleep, infinity]\n    deploy:\n      resources:\n        reservations:\n          devices:\n            - driver: nvidia\n              count: 1\n              capabilities: [gpu]\n",
    });
    const d = await api("POST", "/v1/projects/gpu-job/deploy?wait=true", { env: "alpha" });
    assert.equal(d.data.status, "rolled_back");
    const place = d.data.phases.find((p: any) => p.name === "place");
    assert.equal(place.status, "failed");
    assert.match(
      place.reason,
      /^the services ask for GPUs \(trainer: 1 GPU \(nvidia, gpu\)\) and no connected host has them free: host-a: no GPUs \(no NVIDIA GPU/,
    );
    assert.deepEqual(place.evidence.gpus.request.trainer, {
      driver: "nvidia",
      count: 1,
      device_ids: null,
      capabilities: ["gpu"],
      options: {},
    });
    // Nothing was made on the host, and nothing holds a GPU.
    assert.equal(d.data.phases.find((p: any) => p.name === "prepare").status, "skipped");
    const env = await lab.server.store
      .selectFrom("environments")
      .selectAll()
      .where("name", "=", "alpha")
      .execute();
    assert.ok(env.every((e) => (e.gpus_json ?? null) === null));
  });

  test("a git URL is cloned at deploy and its commit recorded; github: without an App is refused, a bad pin rolls back with the reason", async () => {
    const repo = join(gitRoot, "world.git");
    const git = (...args: string[]) => execFileSync("git", ["-C", repo, ...args], { encoding: "utf8" });
    execFileSync("git", ["init", "-q", "-b", "main", repo]);
    writeFileSync(
      join(repo, "compose.yaml"),
      "services:\n  box:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    command: [sleep, infinity]\n",
    );
    git("add", ".");
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init");
    const commit = git("rev-parse", "HEAD").trim();
    const source = `${gitServer.url}/world.git`;
    await api("POST", "/v1/projects", { name: "from-git", kind: "agent", source });
    const d = await api("POST", "/v1/projects/from-git/deploy?wait=true", { env: "main" });
    assert.equal(d.data.status, "succeeded", d.data.reason);
    assert.deepEqual(d.data.phases[0].evidence.source, {
      type: "git",
      url: source,
      commit,
      file: "compose.yaml",
    });
    assert.equal(
      (await api("DELETE", `/v1/envs/${encodeURIComponent("from-git/main")}`)).data.status,
      "succeeded",
    );
    // A git host the administrator did not allow is refused before anything is fetched.
    const refused = await api("POST", "/v1/projects", {
      name: "elsewhere",
      kind: "agent",
      source: "http://127.0.0.1:1/world.git",
    });
    assert.equal(refused.status, 403);
    assert.match(refused.data.error.message, /not a host this server fetches from/);

    // A GitHub repository is read through the team's App: without one the project is refused.
    const gh = await api("POST", "/v1/projects", {
      name: "from-github",
      kind: "rl-environment",
      source: "github:you/ops-world",
    });
    assert.equal(gh.status, 400);
    assert.match(gh.data.error.message, /connect a GitHub App first \(denv github connect\)/);

    await api("POST", "/v1/projects", {
      name: "pinned",
      kind: "agent",
      source: "./x",
      pinned_target: "nowhere",
    });
    await api("PUT", "/v1/projects/pinned/source", {
      compose: "services:\n  a:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n",
    });
    const pinned = await api("POST", "/v1/projects/pinned/deploy?wait=true", {});
    assert.equal(pinned.data.status, "rolled_back");
    const place = pinned.data.phases.find((p: any) => p.name === "place");
    assert.match(place.reason, /pinned to nowhere/);
  });
});

describe("sandbox API", () => {
  let sandbox: string;

  test("POST /v1/sandboxes from a version forks it, healthy, with the data", async () => {
    const { status, data } = await api("POST", "/v1/sandboxes", { from_version: alphaVersion });
    assert.equal(status, 201, JSON.stringify(data));
    assert.equal(data.status, "running");
    assert.equal(data.sandbox, true);
    assert.equal(data.parent_version_id, alphaVersion);
    sandbox = data.id;
    const r = await api("POST", `/v1/envs/${sandbox}/exec`, {
      service: "opsbox",
      command: "psql -tAc 'select count(*) from orders'",
    });
    assert.equal(r.data.exit_code, 0);
    assert.equal(r.data.stdout.trim(), "100000");
  });

  test("exec passes exit codes, stdin, env and binary output", async () => {
    const r = await api("POST", `/v1/envs/${sandbox}/exec`, {
      command: "cat; echo $X >&2; exit 7",
      stdin: Buffer.from("hello").toString("base64"),
      env: { X: "y" },
    });
    assert.deepEqual([r.data.exit_code, r.data.stdout, r.data.stderr], [7, "hello", "y\n"]);
    const bin = await api("POST", `/v1/envs/${sandbox}/exec`, {
      command: "printf '\\377\\000\\001'",
      encoding: "base64",
    });
    assert.deepEqual([...Buffer.from(bin.data.stdout, "base64")], [255, 0, 1]);
  });

  test("exec output streams as the command writes it (?stream=true, SDK execStream)", async () => {
    const client = new DenvClient({ baseUrl: lab.server.url, apiKey: lab.keyA });
    const started = performance.now();
    const arrivals: [number, string][] = [];
    const r = await client.execStream(
      sandbox,
      { command: "for i in 1 2 3; do echo line$i; sleep 0.4; done; echo err >&2; exit 4" },
      (which, data) => arrivals.push([performance.now() - started, `${which}:${data.toString()}`]),
    );
    const total = performance.now() - started;
    assert.equal(r.exit_code, 4);
    assert.equal(
      arrivals.map(([, d]) => d).join(""),
      "stdout:line1\nstdout:line2\nstdout:line3\nstderr:err\n",
    );
    assert.ok(
      (arrivals[0]?.[0] ?? total) < total - 600,
      `first output at ${arrivals[0]?.[0]} ms of ${total} ms`,
    );
  });

  test("files go in and out as tar", async () => {
    const pack = tar.pack();
    pack.entry({ name: "answer.txt" }, "9993\n");
    pack.finalize();
    const chunks: Buffer[] = [];
    for await (const c of pack) chunks.push(c as Buffer);
    const put = await api(
      "PUT",
      `/v1/envs/${sandbox}/files?service=opsbox&path=/home/ubuntu`,
      new Uint8Array(Buffer.concat(chunks)),
    );
    assert.equal(put.status, 200, JSON.stringify(put.data));
    const got = await api("GET", `/v1/envs/${sandbox}/files?service=opsbox&path=/home/ubuntu/answer.txt`);
    assert.equal(got.status, 200);
    assert.match((got.data as Buffer).toString("latin1"), /answer\.txt[\s\S]*9993/);
    const bad = await api(
      "PUT",
      `/v1/envs/${sandbox}/files?service=opsbox&path=relative`,
      new Uint8Array(Buffer.concat(chunks)),
    );
    assert.equal(bad.status, 400);
  });

  test("snapshot mid-episode, then fork from it; delete", async () => {
    await api("POST", `/v1/envs/${sandbox}/exec`, {
      service: "opsbox",
      command: "echo mid > /home/ubuntu/mid.txt",
    });
    const snap = await api("POST", `/v1/envs/${sandbox}/snapshot`);
    assert.equal(snap.data.status, "succeeded");
    const fork = await api("POST", `/v1/envs/${sandbox}/fork`, { name: "branch-b" });
    assert.equal(fork.status, 201, JSON.stringify(fork.data));
    const r = await api("POST", `/v1/envs/${fork.data.id}/exec`, {
      service: "opsbox",
      command: "cat /home/ubuntu/mid.txt",
    });
    assert.equal(r.data.stdout, "mid\n");
    for (const id of [fork.data.id, sandbox]) {
      const d = await api("DELETE", `/v1/envs/${id}`);
      assert.equal(d.data.status, "succeeded");
      assert.equal((await api("GET", `/v1/envs/${id}`)).status, 404);
    }
  });

  test("a sandbox from an image keeps /work; GET /v1/targets shows the capability row", async () => {
    const { status, data } = await api("POST", "/v1/targets/denvd/sandboxes", {
      image: "127.0.0.1:5000/denv/opsbox:bookworm",
      cmd: ["sleep", "infinity"],
      env: { A: "1" },
    });
    assert.equal(status, 201, JSON.stringify(data));
    const r = await api("POST", `/v1/envs/${data.id}/exec`, { command: "echo $A > /work/a && cat /work/a" });
    assert.equal(r.data.stdout, "1\n");
    await api("DELETE", `/v1/envs/${data.id}`);
    const t = (await api("GET", "/v1/targets")).data.targets[0];
    assert.equal(t.name, "denvd");
    assert.equal(t.available, true);
    assert.ok(t.hosts >= 1);
    assert.equal(t.capabilities.multi_service_stack, "yes");
    assert.equal(t.capabilities.consistent_snapshot, "btrfs");
    assert.ok(t.supported.includes("verify") && t.supported.includes("fork"));
    assert.ok(!t.supported.includes("gpu"), "no GPU is promised");
    assert.equal((await api("POST", "/v1/targets/e2b/sandboxes", { image: "x" })).status, 404);
  });

  test("a port URL reaches a service's port over HTTP and WebSocket, and only while it runs", async () => {
    const sb = await api("POST", "/v1/sandboxes", { image: "127.0.0.1:5000/denv/openenv-echo:0.1" });
    assert.equal(sb.status, 201, JSON.stringify(sb.data));
    const minted = await api("POST", `/v1/envs/${sb.data.id}/ports/8000`, {});
    assert.equal(minted.status, 201, JSON.stringify(minted.data));
    const url = minted.data.url as string;
    assert.match(url, /\/v1\/tunnels\/dpu[a-z2-7]{32}$/);
    // Never on the API's (and console's) origin, which does not serve the path at all.
    assert.notEqual(new URL(url).origin, new URL(lab.server.url).origin);
    assert.equal(new URL(url).origin, lab.server.portsOrigin);
    const onApi = await fetch(`${lab.server.url}${new URL(url).pathname}/health`);
    assert.equal(onApi.status, 404);
    assert.match(((await onApi.json()) as any).error.message, /own origin/);
    const stored = await lab.server.store.selectFrom("port_urls").select("token_hash").execute();
    assert.ok(stored.every((r) => /^[0-9a-f]{64}$/.test(r.token_hash) && !url.includes(r.token_hash)));
    // HTTP, with no API key: the URL is the credential. Bodies go both ways.
    const health = await waitFor("the service to answer /health through its URL", async () => {
      const h = await fetch(`${url}/health`);
      return h.status === 200 ? h : undefined;
    });
    assert.deepEqual(await health.json(), { status: "healthy" });
    const step = await fetch(`${url}/step?x=1`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ action: { message: "through the tunnel" } }),
    });
    assert.equal(step.status, 200);
    assert.equal(((await step.json()) as any).observation.echoed, "through the tunnel");
    assert.equal((await fetch(`${url}/nope`)).status, 404); // the service's own 404
    // No credential and no cookie of any kind is handed to the sandbox.
    const seen = async (auth: string) =>
      (await (
        await fetch(`${url}/debug/headers`, {
          headers: { authorization: auth, cookie: "__Host-denv_session=dss_x" },
        })
      ).json()) as any;
    assert.equal((await seen(`Bearer ${lab.keyA}`)).authorization, undefined);
    const other = await seen("Bearer service-token");
    assert.equal(other.authorization, undefined);
    assert.equal(other.cookie, undefined);
    // A WebSocket session through the same URL.
    const { default: WebSocket } = await import("ws");
    const ws = new WebSocket(`${url.replace(/^http/, "ws")}/ws`);
    const replies: any[] = [];
    ws.on("message", (m) => replies.push(JSON.parse(m.toString())));
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
    });
    ws.send(JSON.stringify({ type: "reset", data: { episode_id: "e1" } }));
    ws.send(JSON.stringify({ type: "step", data: { message: "hi" } }));
    ws.send(JSON.stringify({ type: "state" }));
    await waitFor("three replies on the WebSocket", () => replies.length >= 3);
    ws.close();
    assert.equal(replies[1].data.observation.echoed, "hi");
    assert.deepEqual(replies[2], { type: "state", data: { episode_id: "e1", step_count: 1 } });
    // Nothing listening on a port: a clear 503, not a hang.
    const closed = (await api("POST", `/v1/envs/${sb.data.id}/ports/9`, {})).data.url as string;
    const refused = await fetch(`${closed}/`);
    assert.equal(refused.status, 503);
    assert.match(((await refused.json()) as any).error.message, /port 9/);
    // A wrong token is unknown; the URL dies with the environment.
    assert.equal((await fetch(url.replace(/dpu_.{4}/, "dpu_XXXX"))).status, 404);
    assert.equal((await api("POST", `/v1/envs/${sb.data.id}/ports/0`, {})).status, 400);
    await api("DELETE", `/v1/envs/${sb.data.id}`);
    assert.notEqual((await fetch(`${url}/health`)).status, 200);
  });
});

describe("API surface", () => {
  test("the OpenAPI document lists every route with its schemas", async () => {
    const { status, data } = await api("GET", "/v1/openapi.json", undefined, null);
    assert.equal(status, 200);
    for (const r of ROUTES) assert.ok(data.paths[r.path]?.[r.method], `${r.method} ${r.path}`);
    assert.ok(
      data.paths["/v1/envs/{id}/exec"].post.requestBody.content["application/json"].schema.properties.command,
    );
  });

  test("bad input gets a 400 with a message naming the field; unknown routes 404", async () => {
    const r = await api("POST", "/v1/projects", { name: "Bad Name", kind: "rl-environment", source: "." });
    assert.equal(r.status, 400);
    assert.equal(r.data.error.code, "invalid_argument");
    assert.match(r.data.error.message, /name/);
    assert.equal((await api("POST", "/v1/projects", { name: "x", kind: "game", source: "." })).status, 400);
    assert.equal((await api("GET", "/v1/nope")).status, 404);
    const big = await api("POST", "/v1/projects", {
      name: "x",
      kind: "agent",
      source: "x".repeat(2 * 1024 * 1024),
    });
    assert.equal(big.status, 413);
  });

  test("auth matrix: every route refuses no key and a bad key (401), and another team sees 404", async () => {
    // Other projects have environments named alpha too now: the project qualifies the name.
    const ambiguous = await api("GET", "/v1/envs/alpha");
    assert.equal(ambiguous.status, 409);
    const env = (await api("GET", `/v1/envs/${encodeURIComponent("ops-world/alpha")}`)).data.id as string;
    const dep = (await api("GET", `/v1/envs/${env}/deployments`)).data.deployments[0].id as string;
    const ids: Record<string, string> = { id: env, name: "denvd" };
    for (const r of ROUTES.filter((x) => x.auth)) {
      let path = r.path.replace("{name}", ids.name as string);
      if (r.path.startsWith("/v1/deployments")) path = path.replace("{id}", dep);
      else if (r.path.startsWith("/v1/versions") || r.path.startsWith("/v1/pools"))
        path = path.replace("{id}", alphaVersion);
      else if (r.path.startsWith("/v1/projects")) path = path.replace("{id}", "ops-world");
      else path = path.replace("{id}", env);
      const body = r.method === "get" || r.method === "delete" ? undefined : {};
      for (const key of [null, "dk_wrong"]) {
        const res = await api(r.method.toUpperCase(), path, body, key);
        assert.equal(res.status, 401, `${r.method} ${path} with ${key ?? "no key"}`);
        assert.equal(res.data.error.code, "unauthenticated");
      }
      if (/\{(id|name)\}/.test(r.path) && r.path !== "/v1/targets/{name}/sandboxes") {
        // A body the route accepts: bodies are checked before the object is looked up.
        const valid: Record<string, unknown> = {
          "/v1/projects/{id}/source": { compose: "services: {}" },
          "/v1/envs/{id}/rollback": { version: alphaVersion },
          "/v1/envs/{id}/exec": { command: "true" },
          "/v1/envs/{id}/files/mkdir": { path: "/x" },
          "/v1/envs/{id}/files/rename": { from: "/x", to: "/y" },
          "/v1/versions/{id}/forks": { count: 1 },
          "/v1/pools/{id}": { size: 1 },
          "/v1/projects/{id}/promote": { from: "alpha", to: "staging" },
          "/v1/projects/{id}/branches": { branches: null },
          "/v1/members/{id}": { role: "member" },
          "post /v1/versions/{id}/replicas": { host: "host-x" },
          "put /v1/versions/{id}/replicas": { copies: 1 },
          "/v1/envs/{id}/egress": { allow: [], deny: [] },
        };
        // A query the route accepts too (the file routes need a path).
        const query = r.query ? "?path=/x" : "";
        const res = await api(
          r.method.toUpperCase(),
          path + query,
          r.method === "put" || r.method === "post" || r.method === "patch"
            ? (valid[`${r.method} ${r.path}`] ?? valid[r.path] ?? body)
            : undefined,
          otherTeamKey,
        );
        assert.equal(res.status, 404, `${r.method} ${path} with another team's key`);
      }
    }
    const keys = await lab.server.store.selectFrom("api_keys").select("key_hash").execute();
    assert.ok(keys.every((k) => /^[0-9a-f]{64}$/.test(k.key_hash)));
  });

  test("an operator's /healthz, /readyz and /metrics answer without a key, and the metrics name no team's objects", async () => {
    const health = await fetch(`${lab.server.url}/healthz`);
    assert.deepEqual([health.status, await health.json()], [200, { status: "ok" }]);
    const ready = await fetch(`${lab.server.url}/readyz`);
    assert.equal(ready.status, 200);
    assert.deepEqual(await ready.json(), { status: "ready", checks: { store: "ok", server: "ok" } });
    const scraped = await fetch(`${lab.server.url}/metrics`);
    assert.equal(scraped.status, 200);
    assert.match(scraped.headers.get("content-type") ?? "", /^text\/plain/);
    const text = await scraped.text();
    // What this file's earlier tests did, as an operator sees it.
    const value = (series: RegExp) => Number(series.exec(text)?.[1] ?? Number.NaN);
    assert.ok(
      value(/^denv_deployments_total\{kind="deploy",status="succeeded"\} (\d+)$/m) >= 1,
      text.slice(0, 2000),
    );
    assert.ok(value(/^denv_deployments_total\{kind="deploy",status="rolled_back"\} (\d+)$/m) >= 1);
    assert.ok(
      value(
        /^denv_deployment_phase_seconds_count\{kind="deploy",phase="snapshot",status="succeeded"\} (\d+)$/m,
      ) >= 1,
    );
    assert.equal(value(/^denv_hosts_connected (\d+)$/m), 1);
    assert.ok(
      value(
        /^denv_http_request_seconds_count\{method="POST",route="\/v1\/envs\/:id\/exec",status="200"\} (\d+)$/m,
      ) >= 1,
    );
    assert.match(text, /^denv_pool_ready_members \d+$/m);
    assert.match(text, /^denv_server_process_cpu_seconds_total /m);
    // Routes by their template only: no environment, version or team id is a label anywhere.
    assert.doesNotMatch(text, /env_[0-9a-f]{12}|ver_[0-9a-f]{12}|team_[0-9a-f]|dk_/);
    assert.match(text, /route="unmatched",status="404"/, "a path no route matches adds no series of its own");
    assert.doesNotMatch(text, /\/v1\/nope/);
  });
});
