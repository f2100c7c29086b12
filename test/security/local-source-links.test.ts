/**
 * Issue 33, finding 5: a hostile checkout whose `.env` (or compose file, or env_file) is a link to
 * a file of the user's machine. `denv validate` and `denv project create` read a local source as
 * the server reads a git source: the link is refused, named, and what it points to is never read.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";

const CLI = join(import.meta.dirname, "../../packages/cli/bin/denv.js");
const root = mkdtempSync(join(tmpdir(), "denv-links-"));
const SECRET = "AWS_SECRET_ACCESS_KEY=hunter2-from-the-users-home";
writeFileSync(join(root, "credentials"), `${SECRET}\n`);

after(() => rmSync(root, { recursive: true, force: true }));

const COMPOSE = `services:
  app:
    image: 127.0.0.1:5000/denv/opsbox:bookworm
    environment:
      LEAK: \${AWS_SECRET_ACCESS_KEY:-none}
x-denv:
  kind: service
`;

function project(name: string, files: (dir: string) => void): string {
  const dir = join(root, name);
  mkdirSync(dir);
  files(dir);
  return dir;
}

function denv(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], {
    encoding: "utf8",
    env: {
      ...process.env,
      DENV_CONFIG: join(root, "config.json"),
      DENV_SERVER: "http://127.0.0.1:1",
      DENV_API_KEY: "dk_x",
    },
  });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

test("a .env that is a link is refused by validate, and its target is not read", () => {
  const dir = project("dotenv-link", (d) => {
    writeFileSync(join(d, "docker-compose.yaml"), COMPOSE);
    symlinkSync(join(root, "credentials"), join(d, ".env"));
  });
  const r = denv("validate", dir, "--json");
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /\.env is a symbolic link/);
  assert.doesNotMatch(r.out, /hunter2/);
});

test("a compose file that is a link, and an env_file through a linked folder, are refused", () => {
  const linked = project("compose-link", (d) =>
    symlinkSync(join(root, "dotenv-link", "docker-compose.yaml"), join(d, "docker-compose.yaml")),
  );
  const r = denv("validate", linked);
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /docker-compose\.yaml is a symbolic link/);
  const viaDir = project("env-file-link", (d) => {
    writeFileSync(
      join(d, "docker-compose.yaml"),
      COMPOSE.replace("    environment:", "    env_file: conf/app.env\n    environment:"),
    );
    symlinkSync(root, join(d, "conf"));
    writeFileSync(join(root, "app.env"), `${SECRET}\n`);
  });
  const v = denv("validate", viaDir, "--json");
  assert.equal(v.code, 1, v.out);
  assert.match(v.out, /conf is a symbolic link/);
  assert.doesNotMatch(v.out, /hunter2/);
});

test("project create with a linked .env refuses before anything is sent", () => {
  const dir = join(root, "dotenv-link");
  // The server address answers nothing: a refusal that came from the server would say so.
  const r = denv("project", "create", "leaky", "--kind", "service", "--source", dir);
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /\.env is a symbolic link/);
  assert.doesNotMatch(r.out, /hunter2|cannot reach|ECONNREFUSED/);
});

test("the same project with regular files validates (the refusal is about the link)", () => {
  const dir = project("plain", (d) => {
    writeFileSync(join(d, "docker-compose.yaml"), COMPOSE);
    writeFileSync(join(d, ".env"), "AWS_SECRET_ACCESS_KEY=fine\n");
  });
  const r = denv("validate", dir, "--json");
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /"LEAK": "fine"/);
});
