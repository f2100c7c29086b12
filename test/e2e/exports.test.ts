/**
 * `denv export` on the real engine: ops-world's version written as a Harbor task runs under a
 * Harbor-format runner with no denv in its path (the seeded database rebuilt by the warm job, the
 * image verifier in Harbor's separate verifier environment): reward 1 for the right answer, 0 for
 * none. Written as an OpenEnv environment, its image passes the six criteria of `openenv validate
 * --url`, and a WebSocket session's reset forks the version, a step runs in the fork, and submit
 * grades it.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { parse as parseToml } from "smol-toml";
import WebSocket from "ws";
import { parse as parseYaml } from "yaml";
import { cliRunner } from "../harness/cli-runner.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";
import { runHarborTrial } from "./harbor-runner.ts";

let lab: Lab;
let version: string;
const out = mkdtempSync(join(tmpdir(), "denv-export-"));
const opsWorld = join(import.meta.dirname, "../../examples/ops-world");
const ANSWER_SQL =
  "psql -Atc \"select count(*) from orders where status = 'failed' and total_cents > 50000\"";

const denv = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));

before(async () => {
  lab = await openLab();
  assert.equal(
    (await denv("project", "create", "--kind", "rl-environment", "--source", opsWorld, "ops-world")).code,
    0,
  );
  const d = await denv("deploy", "--project", "ops-world", "--wait", "--json");
  const dep = JSON.parse(d.stdout);
  assert.equal(dep.status, "succeeded", dep.reason);
  version = dep.version_id;
});

after(async () => {
  await lab?.close();
  rmSync(out, { recursive: true, force: true });
});

test("export --harbor: a task directory in Harbor's layout, every image by digest", async () => {
  const r = await denv("export", "--harbor", `ops-world@${version}`, out, "--json");
  assert.equal(r.code, 0, r.stderr);
  const written = JSON.parse(r.stdout) as { dir: string; notExported: string[] };
  const dir = written.dir;
  for (const f of [
    "task.toml",
    "instruction.md",
    "tests/test.sh",
    "tests/Dockerfile",
    "environment/docker-compose.yaml",
  ])
    assert.ok(existsSync(join(dir, f)), f);
  assert.equal(
    readFileSync(join(dir, "instruction.md"), "utf8"),
    readFileSync(join(opsWorld, "instruction.md"), "utf8"),
  );
  const task = parseToml(readFileSync(join(dir, "task.toml"), "utf8")) as any;
  assert.equal(task.schema_version, "1.3");
  assert.match(task.environment.docker_image, /^127\.0\.0\.1:5000\/denv\/opsbox@sha256:[0-9a-f]{64}$/);
  assert.equal(task.agent.user, "1000:1000");
  assert.equal(task.verifier.environment_mode, "separate");
  assert.deepEqual(task.artifacts, ["/home/ubuntu/answer.txt"]);
  assert.equal(task.metadata.denv_version, version);
  const compose = parseYaml(readFileSync(join(dir, "environment/docker-compose.yaml"), "utf8"));
  assert.match(compose.services.db.image, /@sha256:[0-9a-f]{64}$/);
  assert.match(compose.services.queue.image, /@sha256:[0-9a-f]{64}$/);
  // main names its image (the same as docker_image): environments other than Harbor's docker one
  // read main's image from the compose file.
  assert.equal(compose.services.main.image, task.environment.docker_image);
  assert.equal(
    readFileSync(join(dir, "solution/solve.sh"), "utf8"),
    readFileSync(join(opsWorld, "solution/solve.sh"), "utf8"),
  );
  assert.equal(compose.networks.default.internal, true);
  assert.match(
    readFileSync(join(dir, "tests/Dockerfile"), "utf8"),
    /^FROM 127\.0\.0\.1:5000\/denv\/ops-verifier@sha256:/m,
  );
  assert.ok(written.notExported.some((n) => n.startsWith("x-denv.clock frozen")));
  assert.ok(written.notExported.some((n) => n.startsWith("volume contents")));
});

test("the exported task runs under a Harbor-format runner without denv: 1 with its oracle and with the answer, 0 without", async () => {
  const dir = join(out, "ops-world");
  const oracle = await runHarborTrial(dir, "oracle");
  assert.equal(oracle.rewards.reward, 1, `${oracle.agentOutputs.join("\n")}\n${oracle.testStdout}`);
  const solved = await runHarborTrial(dir, [
    `${ANSWER_SQL} > /home/ubuntu/answer.txt && cat /home/ubuntu/answer.txt`,
  ]);
  assert.equal(solved.agentOutputs[0]?.trim(), "9993", "the warm job rebuilt the seeded orders");
  assert.equal(solved.rewards.reward, 1, solved.testStdout);
  const unsolved = await runHarborTrial(dir, []);
  assert.equal(unsolved.rewards.reward, 0, unsolved.testStdout);
});

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

test("export --openenv: the image passes openenv validate's six criteria; a WS session forks, steps and grades", async () => {
  const r = await denv("export", "--openenv", `ops-world@${version}`, out, "--json");
  assert.equal(r.code, 0, r.stderr);
  const dir = JSON.parse(r.stdout).dir as string;
  assert.match(readFileSync(join(dir, "openenv.yaml"), "utf8"), /^app: server\.app:main$/m);
  assert.doesNotMatch(readFileSync(join(dir, "server/denv.json"), "utf8"), new RegExp(lab.keyA));
  assert.match(
    readFileSync(join(dir, "Dockerfile"), "utf8"),
    /^ARG BASE_IMAGE=127\.0\.0\.1:5000\/denv\/opsbox@sha256:[0-9a-f]{64}$/m,
  );
  const tag = `denv-test/ops-world-openenv:${Date.now()}`;
  await promisify(execFile)(
    "docker",
    // No --build-arg: the default base is the version's own agent image, by digest.
    ["build", "-q", "-t", tag, dir],
    { env: { ...process.env, DOCKER_BUILDKIT: "0" } },
  );
  // The exported image is the user's OpenEnv provider, not a denv environment: it reaches the
  // denv server (here on this machine's loopback) the way a provider would. On the host's network
  // the port it was given may be taken by another process before it binds (a CI run met a server
  // that never answered): a server that exits is seen at once, with its last words, and started
  // again on another port.
  let port = 0;
  let name = "";
  for (let attempt = 1; ; attempt++) {
    port = await freePort();
    name = `openenv-${port}`;
    await promisify(execFile)("docker", [
      "run",
      "-d",
      "--name",
      name,
      "--network",
      "host",
      "-e",
      `DENV_SERVER=${lab.server.url}`,
      "-e",
      `DENV_API_KEY=${lab.keyA}`,
      "-e",
      `PORT=${port}`,
      tag,
    ]);
    const state = await waitFor("the server to answer /health, or to exit", async () => {
      const health = await fetch(`http://127.0.0.1:${port}/health`).then(
        (x) => x.ok,
        () => false,
      );
      if (health) return "up";
      const { stdout } = await promisify(execFile)("docker", ["inspect", "-f", "{{.State.Running}}", name]);
      return stdout.trim() === "false" ? "exited" : null;
    });
    if (state === "up") break;
    const logs = await promisify(execFile)("docker", ["logs", "--tail", "20", name]).then(
      (l) => l.stdout + l.stderr,
      () => "",
    );
    await promisify(execFile)("docker", ["rm", "-f", name]).catch(() => {});
    if (attempt >= 3 || !/address already in use|Errno 98/i.test(logs))
      assert.fail(`the exported server exited before it answered /health:\n${logs}`);
  }
  try {
    const base = `http://127.0.0.1:${port}`;
    // openenv validate --url's six criteria.
    const openapi = (await (await fetch(`${base}/openapi.json`)).json()) as any;
    assert.equal(typeof openapi.info.version, "string");
    assert.equal(((await (await fetch(`${base}/health`)).json()) as any).status, "healthy");
    const meta = (await (await fetch(`${base}/metadata`)).json()) as any;
    assert.equal(typeof meta.name, "string");
    assert.equal(typeof meta.description, "string");
    const schema = (await (await fetch(`${base}/schema`)).json()) as any;
    for (const k of ["action", "observation", "state"]) assert.equal(typeof schema[k], "object", k);
    const mcp = await fetch(`${base}/mcp`, {
      method: "POST",
      body: "{}",
      headers: { "content-type": "application/json" },
    });
    assert.equal(mcp.status, 200);
    assert.equal(((await mcp.json()) as any).jsonrpc, "2.0");
    const sim = ["/reset", "/step", "/state"].map((p) => p in openapi.paths);
    assert.ok(sim.every(Boolean) || sim.every((x) => !x), "mode_endpoint_consistency");

    // A session: reset forks the version, a step answers from the fork's database, submit grades.
    const ws = new WebSocket(`ws://127.0.0.1:${port}/ws`);
    await new Promise((res, rej) => ws.once("open", res).once("error", rej));
    const ask = (msg: unknown) =>
      new Promise<any>((res) => {
        ws.once("message", (data) => res(JSON.parse(String(data))));
        ws.send(JSON.stringify(msg));
      });
    const reset = await ask({ type: "reset", data: {} });
    assert.equal(reset.type, "observation", JSON.stringify(reset));
    const forkId = reset.data.observation.environment as string;
    assert.match(forkId, /^env_/);
    assert.match(reset.data.observation.instruction, /failed payments/);
    const step = await ask({
      type: "step",
      data: { command: `${ANSWER_SQL} | tee /home/ubuntu/answer.txt` },
    });
    assert.equal(step.data.observation.stdout.trim(), "9993");
    assert.equal(step.data.done, false);
    const graded = await ask({ type: "step", data: { submit: true } });
    assert.equal(graded.data.reward, 1);
    assert.equal(graded.data.done, true);
    const state = await ask({ type: "state" });
    assert.equal(state.data.step_count, 2);
    assert.equal(state.data.version, version);
    const bad = await ask({ type: "step", data: { command: "true" } });
    assert.equal(bad.type, "error");
    assert.equal(bad.data.code, "VALIDATION_ERROR");
    // OpenEnv's MCPToolClient over the same session: list_tools needs no reset; call_tool starts a
    // new episode (the last one is done); {"type": "mcp"} carries JSON-RPC.
    const listed = await ask({ type: "step", data: { type: "list_tools" } });
    assert.deepEqual(
      listed.data.observation.tools.map((t: { name: string }) => t.name),
      ["run", "submit"],
    );
    const called = await ask({
      type: "step",
      data: {
        type: "call_tool",
        tool_name: "run",
        arguments: { command: `${ANSWER_SQL} > /home/ubuntu/answer.txt; cat /home/ubuntu/answer.txt` },
      },
    });
    assert.equal(called.data.observation.error, null, JSON.stringify(called));
    assert.equal(called.data.observation.result.data.stdout.trim(), "9993");
    const secondFork = called.data.observation.result.data.environment as string;
    assert.notEqual(secondFork, forkId);
    const unknown = await ask({
      type: "step",
      data: { type: "call_tool", tool_name: "rm-rf", arguments: {} },
    });
    assert.equal(unknown.data.observation.error.error_type, "tool_not_found");
    const viaMcp = await ask({
      type: "mcp",
      data: { jsonrpc: "2.0", id: 7, method: "tools/call", params: { name: "submit", arguments: {} } },
    });
    assert.equal(viaMcp.data.id, 7);
    assert.equal(viaMcp.data.result.structuredContent.reward, 1, JSON.stringify(viaMcp));
    ws.close();
    // MCP over HTTP as OpenEnv's production client speaks it: initialize, the initialized
    // notification (202, no body), tools/list, a session whose episode lasts across calls.
    const rpc = async (method: string, params: unknown = {}, id: number | null = 1) => {
      const res = await fetch(`${base}/mcp`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", method, params, ...(id === null ? {} : { id }) }),
      });
      return { status: res.status, body: res.status === 202 ? null : ((await res.json()) as any) };
    };
    const init = await rpc("initialize", {
      protocolVersion: "2025-06-18",
      capabilities: {},
      clientInfo: { name: "t", version: "1" },
    });
    assert.equal(init.body.result.protocolVersion, "2025-06-18");
    assert.equal(init.body.result.serverInfo.name, "ops_world_env");
    assert.ok(init.body.result.capabilities.tools);
    assert.equal((await rpc("notifications/initialized", {}, null)).status, 202);
    assert.equal((await rpc("tools/list")).body.result.tools.length, 2);
    assert.equal((await rpc("no/such")).body.error.code, -32601);
    const sid = (await rpc("openenv/session/create")).body.result.session_id as string;
    const wrote = await rpc("tools/call", {
      name: "run",
      arguments: { command: `${ANSWER_SQL} > /home/ubuntu/answer.txt` },
      session_id: sid,
    });
    assert.equal(wrote.body.result.isError, false, JSON.stringify(wrote.body));
    const failing = await rpc("tools/call", {
      name: "run",
      arguments: { command: "exit 3" },
      session_id: sid,
    });
    assert.equal(failing.body.result.isError, true);
    assert.equal(failing.body.result.structuredContent.exit_code, 3);
    const graded2 = await rpc("tools/call", { name: "submit", arguments: {}, session_id: sid });
    assert.equal(graded2.body.result.structuredContent.reward, 1, JSON.stringify(graded2.body));
    const httpFork = graded2.body.result.structuredContent.environment as string;
    assert.equal((await rpc("openenv/session/close", { session_id: sid })).body.result.closed, true);
    assert.equal(
      (await rpc("tools/call", { name: "run", arguments: { command: "true" }, session_id: sid })).body.error
        .code,
      -32602,
    );
    // The session's fork is destroyed when it closes.
    for (const id of [forkId, secondFork, httpFork]) {
      const gone = await waitFor(`the episode's fork ${id} to be destroyed`, async () => {
        const e = await lab.api("GET", `/v1/envs/${id}`);
        return e.status === 404 || e.data.status === "destroyed";
      });
      assert.ok(gone, `the episode's fork ${id} was left behind`);
    }
  } finally {
    await promisify(execFile)("docker", ["rm", "-f", name]).catch(() => {});
    await promisify(execFile)("docker", ["rmi", "-f", tag]).catch(() => {});
  }
});
