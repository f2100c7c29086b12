/**
 * denv over the Model Context Protocol, driven by the official SDK's own client against a live
 * denv (a real server, denvd and engine): the seed's episode on ops-world over stdio (`denv mcp`)
 * and over Streamable HTTP (/v1/mcp) — a sandbox from alpha's version, psql through exec, the
 * answer written, verify → 1, a wrong answer → 0 — then errors as tool errors with denv's codes,
 * the read-only mode, another team's key seeing nothing, and a fork cancelled mid-way leaving
 * nothing behind.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { getDefaultEnvironment, StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import Docker from "dockerode";
import { deployOpsWorld, type Lab, openLab } from "../harness/lab.ts";

let lab: Lab;
let version: string;
const docker = new Docker();
const DENV = join(import.meta.dirname, "../../packages/cli/bin/denv.js");
/** Every text any tool or resource answered, to look for a key in. */
const seen: string[] = [];

before(async () => {
  lab = await openLab();
  version = await deployOpsWorld(lab);
});

after(async () => {
  await lab?.close();
});

async function overHttp(key: string, query = ""): Promise<Client> {
  const client = new Client({ name: "denv-test", version: "1" });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${lab.server.url}/v1/mcp${query}`), {
      requestInit: { headers: { authorization: `Bearer ${key}` } },
    }),
  );
  return client;
}

async function overStdio(key: string, ...flags: string[]): Promise<Client> {
  const client = new Client({ name: "denv-test", version: "1" });
  await client.connect(
    new StdioClientTransport({
      command: process.execPath,
      args: [DENV, "mcp", ...flags],
      env: {
        ...getDefaultEnvironment(),
        DENV_SERVER: lab.server.url,
        DENV_API_KEY: key,
        DENV_CONFIG: "/nonexistent/denv-config.json",
      },
      stderr: "inherit",
    }),
  );
  return client;
}

type Structured = Record<string, unknown>;

async function tool(
  client: Client,
  name: string,
  args: Record<string, unknown>,
  options: { onprogress?: (p: { progress: number; message?: string }) => void } = {},
): Promise<CallToolResult & { structuredContent?: Structured }> {
  const r = (await client.callTool({ name, arguments: args }, undefined, {
    timeout: 240_000,
    ...(options.onprogress ? { onprogress: options.onprogress, resetTimeoutOnProgress: true } : {}),
  })) as CallToolResult & { structuredContent?: Structured };
  seen.push(JSON.stringify(r));
  return r;
}

async function ok(client: Client, name: string, args: Record<string, unknown>): Promise<Structured> {
  const r = await tool(client, name, args);
  assert.ok(!r.isError, `${name} failed: ${JSON.stringify(r.content)}`);
  return r.structuredContent as Structured;
}

function errorCode(r: { _meta?: Structured }): string | undefined {
  return (r._meta?.["dev.denv/error"] as { code?: string } | undefined)?.code;
}

const QUESTION = "select count(*) from orders where status = 'failed' and total_cents > 50000";

/** The seed's episode through MCP tools alone: the right answer earns 1, a wrong one 0. */
async function episode(client: Client): Promise<void> {
  const tools = (await client.listTools()).tools;
  const names = tools.map((t) => t.name);
  for (const t of [
    "list_versions",
    "create_sandbox",
    "fork",
    "exec",
    "read_file",
    "write_file",
    "list_files",
  ])
    assert.ok(names.includes(t), `the ${t} tool is offered (${names.join(", ")})`);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, "object", `${t.name} has a JSON Schema`);
    assert.ok((t.description ?? "").length > 20, `${t.name} is described`);
  }
  const destructive = tools.filter((t) => t.annotations?.destructiveHint === true).map((t) => t.name);
  assert.ok(destructive.includes("destroy") && destructive.includes("rollback"), destructive.join(","));
  assert.equal(tools.find((t) => t.name === "list_versions")?.annotations?.readOnlyHint, true);

  const versions = (await ok(client, "list_versions", { project: "ops-world" })).versions as { id: string }[];
  assert.ok(
    versions.some((v) => v.id === version),
    "alpha's version is listed",
  );

  const progress: string[] = [];
  const made = await tool(
    client,
    "create_sandbox",
    { from_version: version },
    { onprogress: (p) => progress.push(p.message ?? "") },
  );
  assert.ok(!made.isError, JSON.stringify(made.content));
  const sb = made.structuredContent as { id: string; status: string; services: string[] };
  assert.equal(sb.status, "running");
  assert.ok(sb.services.includes("opsbox"));
  assert.ok(progress.length >= 1, "progress was reported while the sandbox was made");

  const count = await ok(client, "exec", { environment: sb.id, command: ["psql", "-tAc", QUESTION] });
  assert.equal(count.exit_code, 0, String(count.stderr));
  assert.match(String(count.stdout), /^\d+\n$/);
  assert.equal(count.output_limit_bytes, 64 * 1024, "the output limit is stated");
  const answer = String(count.stdout).trim();

  await ok(client, "write_file", {
    environment: sb.id,
    path: "/home/ubuntu/answer.txt",
    content: `${answer}\n`,
  });
  const back = await ok(client, "read_file", { environment: sb.id, path: "/home/ubuntu/answer.txt" });
  assert.equal(back.content, `${answer}\n`);
  assert.equal(back.encoding, "utf8");
  const listed = (await ok(client, "list_files", { environment: sb.id, path: "/home/ubuntu" })).entries as {
    name: string;
    owner?: string;
  }[];
  assert.equal(listed.find((e) => e.name === "answer.txt")?.owner, "ubuntu", "written as the agent's user");
  // What the episode changed so far: the answer, and nothing else of the files.
  const changed = await ok(client, "diff_environment", { environment: sb.id });
  assert.equal(changed.against, version);
  assert.deepEqual(
    (changed.entries as { volume: string; path: string; change: string }[]).map(
      (e) => `${e.change} ${e.volume}/${e.path}`,
    ),
    ["created home/answer.txt"],
  );

  // The agent's permissions hold: /etc/passwd is not the agent's to write.
  const denied = await tool(client, "write_file", { environment: sb.id, path: "/etc/passwd", content: "x" });
  assert.equal(errorCode(denied), "permission_denied", JSON.stringify(denied.content));

  const phases: string[] = [];
  const gradedResult = await tool(
    client,
    "verify",
    { environment: sb.id },
    { onprogress: (p) => phases.push(p.message ?? "") },
  );
  assert.ok(!gradedResult.isError, JSON.stringify(gradedResult.content));
  const graded = gradedResult.structuredContent as Structured;
  assert.ok(
    phases.some((m) => /^verify: \w+/.test(m)),
    `verify reported its phases as progress (${phases.join(" | ")})`,
  );
  assert.equal(graded.reward, 1, JSON.stringify(graded));
  assert.equal(graded.status, "succeeded");

  const wrong = await ok(client, "create_sandbox", { from_version: version });
  await ok(client, "write_file", { environment: wrong.id, path: "/home/ubuntu/answer.txt", content: "42\n" });
  const zero = await ok(client, "verify", { environment: wrong.id });
  assert.equal(zero.reward, 0, JSON.stringify(zero));
  assert.ok(Array.isArray(zero.reasons), `a verdict carries its reasons: ${JSON.stringify(zero)}`);

  // Errors are tool errors carrying denv's code.
  // Verify leaves the graded sandbox frozen for inspection, and says so.
  const frozen = await tool(client, "write_file", {
    environment: sb.id,
    path: "/home/ubuntu/x",
    content: "x",
  });
  assert.equal(errorCode(frozen), "conflict");
  assert.match(String((frozen.content[0] as { text: string }).text), /frozen by verify/);
  const missing = await tool(client, "exec", { environment: "env_nope", command: "true" });
  assert.equal(missing.isError, true);
  assert.equal(errorCode(missing), "not_found");
  assert.match(String((missing.content[0] as { text: string }).text), /^not_found: /);

  // Resources: the phase log of the verify, the compose spec, the data sheet.
  const log = await client.readResource({ uri: `denv://deployments/${graded.deployment_id}/log` });
  const logText = (log.contents[0] as { text: string }).text;
  assert.match(logText, /^deployment dep_\S+ \(verify\): succeeded/);
  const compose = await client.readResource({ uri: `denv://environments/${sb.id}/compose` });
  assert.match((compose.contents[0] as { text: string }).text, /postgres/);
  const sheet = await client.readResource({ uri: `denv://versions/${version}/datasheet` });
  assert.match((sheet.contents[0] as { text: string }).text, new RegExp(version));
  seen.push(logText, JSON.stringify(compose), JSON.stringify(sheet));

  for (const id of [sb.id, wrong.id as string]) {
    const gone = await ok(client, "destroy", { environment: id });
    assert.equal(gone.destroyed, true);
  }
  assert.equal((await ok(client, "destroy", { environment: sb.id })).destroyed, false, "idempotent");
}

test("the episode over Streamable HTTP (/v1/mcp): verify 1 for the right answer, 0 for a wrong one", async () => {
  const client = await overHttp(lab.keyA);
  try {
    await episode(client);
  } finally {
    await client.close();
  }
});

test("the episode over stdio (denv mcp), with the CLI's key from the environment", async () => {
  const client = await overStdio(lab.keyA);
  try {
    await episode(client);
  } finally {
    await client.close();
  }
});

test("no key ever reaches a tool's answer, a resource, or a sandbox's environment", async () => {
  assert.ok(seen.length > 20, "answers were collected");
  for (const text of seen) assert.ok(!text.includes(lab.keyA), "an answer holds the key");
  const client = await overHttp(lab.keyA);
  try {
    const sb = await ok(client, "create_sandbox", { from_version: version });
    const env = await ok(client, "exec", { environment: sb.id, command: "env; cat /proc/1/environ" });
    assert.ok(!String(env.stdout).includes(lab.keyA), "the sandbox's environment holds no key");
    assert.ok(!String(env.stdout).includes("DENV_API_KEY"));
    await ok(client, "destroy", { environment: sb.id });
  } finally {
    await client.close();
  }
});

const READ_ONLY_TOOLS = [
  "diff_environment",
  "egress_log",
  "get_deployment",
  "list_environments",
  "list_files",
  "list_projects",
  "list_versions",
  "read_file",
  "read_logs",
];

test("--read-only offers only the tools that change nothing; the others are refused", async () => {
  const client = await overStdio(lab.keyA, "--read-only");
  try {
    const names = (await client.listTools()).tools.map((t) => t.name).sort();
    assert.deepEqual(names, READ_ONLY_TOOLS);
    const refused = await tool(client, "destroy", { environment: "alpha" });
    assert.equal(refused.isError, true);
    const alpha = await lab.api("GET", "/v1/envs/alpha");
    assert.equal(alpha.data.status, "running", "alpha is untouched");
    const envs = (await ok(client, "list_environments", {})).environments as { name: string }[];
    assert.ok(envs.some((e) => e.name === "alpha"));
    // Its logs are read: the database said it was ready, on its own stream, at a time.
    const logs = (await ok(client, "read_logs", { environment: "alpha", service: "db", tail: 200 }))
      .lines as {
      service: string;
      time: string;
      line: string;
    }[];
    assert.ok(
      logs.length > 0 && logs.every((l) => l.service === "db" && l.time !== ""),
      JSON.stringify(logs[0]),
    );
    assert.ok(
      logs.some((l) => /ready to accept connections/.test(l.line)),
      "PostgreSQL's start is there",
    );
  } finally {
    await client.close();
  }
});

test("/v1/mcp?read_only=true is the same read-only set over HTTP", async () => {
  const client = await overHttp(lab.keyA, "?read_only=true");
  try {
    assert.deepEqual((await client.listTools()).tools.map((t) => t.name).sort(), READ_ONLY_TOOLS);
    const refused = await tool(client, "exec", { environment: "alpha", command: "touch /tmp/x" });
    assert.equal(refused.isError, true);
    assert.match(String((refused.content[0] as { text: string }).text), /exec/);
  } finally {
    await client.close();
  }
});

test("another team's key sees nothing of ours, by tool, by resource or by session id", async () => {
  const b = await overHttp(lab.keyB);
  const a = await overHttp(lab.keyA);
  try {
    assert.deepEqual((await ok(b, "list_environments", {})).environments, []);
    assert.deepEqual((await ok(b, "list_versions", {})).versions, []);
    assert.deepEqual((await ok(b, "list_projects", {})).projects, []);
    for (const [name, args] of [
      ["exec", { environment: "alpha", command: "true" }],
      ["read_file", { environment: "alpha", path: "/etc/hostname" }],
      ["create_sandbox", { from_version: version }],
      ["fork", { environment: "alpha" }],
      ["verify", { environment: "alpha" }],
      ["pause", { environment: "alpha" }],
      ["resume", { environment: "alpha" }],
    ] as const) {
      const r = await tool(b, name, args);
      assert.equal(r.isError, true, `${name} as team B`);
      assert.equal(errorCode(r), "not_found", `${name} as team B`);
    }
    // Destroy is idempotent: to B, A's alpha is as absent as a name never used, and stays running.
    assert.deepEqual(await ok(b, "destroy", { environment: "alpha" }), {
      environment: "alpha",
      destroyed: false,
    });
    assert.equal((await lab.api("GET", "/v1/envs/alpha")).data.status, "running");
    await assert.rejects(b.readResource({ uri: `denv://versions/${version}/datasheet` }), /not_found/);
    // A's session id with B's key answers as a session that does not exist.
    const sid = (a.transport as StreamableHTTPClientTransport).sessionId as string;
    const res = await fetch(`${lab.server.url}/v1/mcp`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${lab.keyB}`,
        "mcp-session-id": sid,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 7,
        method: "tools/call",
        params: { name: "list_environments" },
      }),
    });
    assert.equal(res.status, 404);
    assert.ok(!(await res.text()).includes("alpha"));
    const alpha = await lab.api("GET", "/v1/envs/alpha");
    assert.equal(alpha.data.status, "running", "alpha is untouched");
  } finally {
    await a.close();
    await b.close();
  }
});

async function testContainers(): Promise<number> {
  return (await docker.listContainers({ all: true, filters: { label: [`dev.denv.test=${lab.host.runId}`] } }))
    .length;
}

test("a fork cancelled mid-way leaves nothing behind: no environment, no container", async () => {
  const client = await overHttp(lab.keyA);
  const before = await testContainers();
  const name = "mcp-cancelled";
  const controller = new AbortController();
  const phases: string[] = [];
  try {
    await assert.rejects(
      client.callTool({ name: "fork", arguments: { environment: "alpha", name } }, undefined, {
        signal: controller.signal,
        timeout: 120_000,
        onprogress: (p) => {
          phases.push(p.message ?? "");
          // Cancelled once the fork's own deployment is under way on the host.
          if (p.message?.startsWith("fork:")) controller.abort("the harness gave up");
        },
      }),
    );
    assert.ok(
      phases.some((p) => p.startsWith("fork:")),
      `cancelled during the fork's deployment (${phases.join(" | ")})`,
    );
    // The server finishes or rolls back what it started, then the tool destroys it.
    const deadline = Date.now() + 90_000;
    let left: unknown[] = [];
    let containers = -1;
    while (Date.now() < deadline) {
      left = ((await lab.api("GET", "/v1/envs")).data.environments as { name: string }[]).filter(
        (e) => e.name === name,
      );
      containers = await testContainers();
      if (left.length === 0 && containers === before) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    assert.deepEqual(left, [], "no environment of that name is left");
    assert.equal(containers, before, "no container of the fork is left");
  } finally {
    await client.close();
  }
});

test("pause and resume through MCP keep the memory", async () => {
  const client = await overStdio(lab.keyA);
  try {
    const sb = (await ok(client, "create_sandbox", { from_version: version })) as { id: string };
    const paused = await tool(client, "pause", { environment: sb.id });
    assert.ok(!paused.isError, JSON.stringify(paused.content));
    assert.equal((paused.structuredContent as { status: string }).status, "paused");
    assert.equal(
      ((await ok(client, "resume", { environment: sb.id })) as { status: string }).status,
      "running",
    );
    await ok(client, "destroy", { environment: sb.id });
  } finally {
    await client.close();
  }
});
