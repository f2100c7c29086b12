/**
 * The seed's first command without a key in hand: `denv login` against a real server, approved by
 * a person signed in over HTTP (as the console does it: cookie and CSRF token), the CLI a real
 * process that prints the URL and code and waits. Its key is saved 0600, works, is named after the
 * machine; `denv logout` revokes it. A denied login exits non-zero and saves nothing.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type RunningServer, startServer } from "@denv/server";
import { repoRoot } from "../harness/test-host.ts";

const BIN = join(repoRoot, "packages/cli/bin/denv.js");
let server: RunningServer;
let dir: string;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "denv-device-"));
  server = await startServer({ dataDir: join(dir, "server"), port: 0 });
});

after(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A person in a browser: signs up, then answers device codes with the session's CSRF token. */
async function personSignedUp(email: string) {
  const res = await fetch(`${server.url}/v1/auth/signup`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email, password: "correct horse battery", team_name: `${email}'s team` }),
  });
  assert.equal(res.status, 201);
  const cookie = (res.headers.get("set-cookie") ?? "").split(";")[0] as string;
  const session = (await res.json()) as { csrf_token: string; team: { id: string } };
  const answer = async (userCode: string, approve: boolean) => {
    const r = await fetch(`${server.url}/v1/device/${userCode}`, {
      method: "POST",
      headers: { cookie, "x-csrf-token": session.csrf_token, "content-type": "application/json" },
      body: JSON.stringify({ approve }),
    });
    assert.equal(r.status, 200, await r.text());
  };
  const keys = async () =>
    ((await (await fetch(`${server.url}/v1/keys`, { headers: { cookie } })).json()) as { keys: any[] }).keys;
  return { teamId: session.team.id, answer, keys };
}

/** `denv ARGS` as a process; resolves its user code as soon as it prints one, and its end. */
function denv(args: string[], config: string) {
  const child = spawn(process.execPath, [BIN, ...args], {
    env: { ...process.env, DENV_CONFIG: config, DENV_API_KEY: "", DENV_SERVER: "", DISPLAY: "" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => {
    stdout += c.toString();
  });
  const code = new Promise<{ userCode: string; url: string }>((resolve) => {
    child.stderr.on("data", (c: Buffer) => {
      stderr += c.toString();
      const m = /open (\S+)\nand confirm the code ([A-Z]{4}-[A-Z]{4})/.exec(stderr);
      if (m) resolve({ url: m[1] as string, userCode: m[2] as string });
    });
  });
  const done = new Promise<{ exitCode: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on("close", (exitCode) => resolve({ exitCode, stdout, stderr })),
  );
  return { code, done };
}

test("denv login SERVER: the person approves in the browser while the CLI waits; the key is saved 0600 and works", async () => {
  const person = await personSignedUp("ada@example.com");
  const config = join(dir, "ada", "config.json");
  const run = denv(["login", server.url, "--no-browser", "--name", "ada-laptop", "--json"], config);
  const { userCode, url } = await run.code;
  assert.equal(url, `${server.url}/device?code=${userCode}`);
  // Nothing is saved while the login waits.
  assert.equal(existsSync(config), false);
  await person.answer(userCode, true);
  const end = await run.done;
  assert.equal(end.exitCode, 0, end.stderr);
  assert.equal(JSON.parse(end.stdout).device, true);
  assert.equal(statSync(config).mode & 0o777, 0o600);
  const saved = JSON.parse(readFileSync(config, "utf8")) as { server: string; api_key: string };
  assert.equal(saved.server, server.url);
  assert.match(saved.api_key, /^dk_/);
  // The key is the person's, in their team, named as asked.
  const key = (await person.keys()).find((k) => k.name === "ada-laptop");
  assert.equal(key?.user_email, "ada@example.com");
  const projects = await fetch(`${server.url}/v1/projects`, {
    headers: { authorization: `Bearer ${saved.api_key}` },
  });
  assert.equal(projects.status, 200);

  // denv logout revokes it on the server and forgets it here.
  const out = await denv(["logout", "--json"], config).done;
  assert.equal(out.exitCode, 0, out.stderr);
  assert.equal(JSON.parse(out.stdout).revoked, true);
  assert.equal(JSON.parse(readFileSync(config, "utf8")).api_key, "");
  const after = await fetch(`${server.url}/v1/projects`, {
    headers: { authorization: `Bearer ${saved.api_key}` },
  });
  assert.equal(after.status, 401);
  assert.equal(
    (await person.keys()).find((k) => k.name === "ada-laptop"),
    undefined,
  );
});

test("a denied login exits non-zero and saves nothing", async () => {
  const person = await personSignedUp("eve@example.com");
  const config = join(dir, "eve", "config.json");
  const run = denv(["login", server.url, "--no-browser"], config);
  await person.answer((await run.code).userCode, false);
  const end = await run.done;
  assert.equal(end.exitCode, 1);
  assert.match(end.stderr, /denied/);
  assert.equal(existsSync(config), false);
});

test("denv login with neither a server nor a saved one says how; a bad URL is a usage error", async () => {
  const none = await denv(["login", "--no-browser"], join(dir, "none", "config.json")).done;
  assert.equal(none.exitCode, 2);
  assert.match(none.stderr, /give the server's URL/);
  const bad = await denv(["login", "file:///etc/passwd"], join(dir, "none", "config.json")).done;
  assert.equal(bad.exitCode, 2);
  assert.match(bad.stderr, /not an http\(s\):\/\/ URL/);
});
