/**
 * A new user's day one, from the README and the docs alone (issue 70's acceptance), through the
 * real `denv` command: a compose file of their own with a build, a project folder bound in, a
 * published port and an env_file — validated (the port's meaning said), made a project, deployed,
 * forked, exec'd into, its logs read, a port reached by its URL, and the console reached by the
 * sign-in link `denv console` prints. No step is outside what the docs show.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { cliRunner } from "../harness/cli-runner.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

const work = mkdtempSync(join(tmpdir(), "denv-new-user-"));
let lab: Lab;
const denv = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));

const FILES: Record<string, string> = {
  "docker-compose.yaml": `x-denv:
  kind: service
services:
  web:
    build: ./web
    env_file: .env
    ports: ["8080:8000"]
    volumes: ["./site:/srv/site"]
    command: ["sh", "-c", "echo started $$GREETING; exec python3 -m http.server 8000 -d /srv/site"]
`,
  ".env": "GREETING=hello-from-env-file\n",
  "web/Dockerfile": "FROM 127.0.0.1:5000/denv/opsbox:bookworm\nRUN echo built > /srv-built\n",
  "site/index.html": "<h1>day one</h1>\n",
};

before(async () => {
  lab = await openLab();
  for (const [name, text] of Object.entries(FILES)) {
    mkdirSync(dirname(join(work, "my-env", name)), { recursive: true });
    writeFileSync(join(work, "my-env", name), text);
  }
});

after(async () => {
  await lab?.close();
  rmSync(work, { recursive: true, force: true });
});

test("a compose file of one's own reaches a fork, its logs, a port URL and the console, as the docs say", async () => {
  const dir = join(work, "my-env");
  const valid = await denv("validate", dir);
  assert.equal(valid.code, 0, valid.stderr);
  // The published port's meaning is said, not left to be found out.
  assert.match(valid.stdout + valid.stderr, /8080/);
  const made = await denv("project", "create", "--kind", "service", "--source", dir, "my-env");
  assert.equal(made.code, 0, made.stderr);
  const deployed = await denv("deploy", "--project", "my-env", "--wait");
  assert.equal(deployed.code, 0, deployed.stdout + deployed.stderr);
  assert.match(deployed.stdout, /✓ prepare/);
  const fork = await denv("fork", "my-env/alpha", "--name", "rollout-1");
  assert.equal(fork.code, 0, fork.stderr);
  // The build, the bound folder and the env_file, in the fork.
  const ran = await denv(
    "exec",
    "my-env/rollout-1",
    "--",
    "sh",
    "-c",
    'cat /srv-built /srv/site/index.html; echo "$GREETING"',
  );
  assert.equal(ran.code, 0, ran.stderr);
  assert.equal(ran.stdout, "built\n<h1>day one</h1>\nhello-from-env-file\n");
  // What the service wrote.
  const logs = await waitFor("the fork's service's first line in its logs", async () => {
    const r = await denv("logs", "my-env/rollout-1", "--tail", "20");
    return r.code === 0 && /started hello-from-env-file/.test(r.stdout) ? r : null;
  });
  assert.match(logs.stdout, /web/);
  // The port the service listens on, reached by a URL of its own.
  const port = await denv("port", "my-env/rollout-1", "8000");
  assert.equal(port.code, 0, port.stderr);
  const url = port.stdout.trim().split("\n")[0] as string;
  const page = await waitFor("the port URL answering", async () => {
    const res = await fetch(url).catch(() => null);
    return res?.status === 200 ? await res.text() : null;
  });
  assert.equal(page, "<h1>day one</h1>\n");
  // The console: a sign-in link into this team.
  const link = await denv("console", "--no-open");
  assert.equal(link.code, 0, link.stderr);
  const token = /invitation=([\w%-]+)/.exec(link.stdout)?.[1];
  assert.ok(token, link.stdout);
  const signup = await fetch(`${lab.server.url}/v1/auth/signup`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      email: "new@example.com",
      password: "day one password",
      invitation: decodeURIComponent(token),
    }),
  });
  assert.equal(signup.status, 201);
  const envs = await fetch(`${lab.server.url}/v1/envs`, {
    headers: { cookie: signup.headers.get("set-cookie")?.split(";")[0] ?? "" },
  });
  const names = ((await envs.json()) as { environments: { name: string }[] }).environments.map((e) => e.name);
  assert.ok(names.includes("rollout-1"), `the console's session sees the team's forks: ${names.join(", ")}`);
});
