/** The `denv` command as a user runs it: a real process, its exit code, its --json output. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";

const bin = join(import.meta.dirname, "..", "bin", "denv.js");
const opsWorld = join(import.meta.dirname, "..", "..", "..", "examples", "ops-world");

function denv(args: string[], cwd?: string) {
  const r = spawnSync(process.execPath, [bin, ...args], { encoding: "utf8", cwd });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

test("denv --help lists the commands and the exit codes", () => {
  const r = denv(["--help"]);
  assert.equal(r.code, 0);
  assert.match(r.stdout, /validate/);
  assert.match(r.stdout, /init/);
  assert.match(r.stdout, /usage error/);
});

test("unknown commands and options are usage errors (exit 2)", () => {
  assert.equal(denv(["frobnicate"]).code, 2);
  assert.equal(denv(["validate", "--frob"]).code, 2);
  assert.equal(denv(["init"]).code, 2);
  const r = denv(["init", "no-such-kind", mkdtempSync(join(tmpdir(), "denv-"))]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /available: rl-environment/);
});

test("an unknown command given --help is a usage error, not the top-level help", () => {
  for (const args of [
    ["rewind", "--help"],
    ["--server", "http://x", "rewind", "-h"],
  ]) {
    const r = denv(args);
    assert.equal(r.code, 2, args.join(" "));
    assert.match(r.stderr, /unknown command 'rewind'/);
    assert.equal(r.stdout, "");
  }
  // Known commands and the help command still print their help.
  assert.equal(denv(["deploy", "--help"]).code, 0);
  assert.equal(denv(["--server", "http://x", "fork", "--help"]).code, 0);
  assert.equal(denv(["help"]).code, 0);
});

test("denv validate --json prints the resolved ops-world spec", () => {
  const r = denv(["validate", opsWorld, "--json"]);
  assert.equal(r.code, 0, r.stderr);
  const out = JSON.parse(r.stdout);
  assert.equal(out.ok, true);
  assert.equal(out.spec.name, "ops-world");
  assert.deepEqual(out.spec.services.opsbox.caps, { memory_bytes: 2147483648, pids: 512, cpus: 2 });
  assert.match(out.spec.hash, /^sha256:[0-9a-f]{64}$/);
});

test("denv validate --json reports every refusal with code, path, line and column (exit 1)", () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-"));
  writeFileSync(
    join(dir, "compose.yaml"),
    "services:\n  a:\n    image: alpine\n    privileged: true\n    volumes: ['/etc:/etc']\n",
  );
  const r = denv(["validate", "--json"], dir);
  assert.equal(r.code, 1);
  const out = JSON.parse(r.stdout);
  assert.equal(out.ok, false);
  assert.deepEqual(
    out.errors.map((e: { code: string; path: string; line: number; column: number }) => [
      e.code,
      e.path,
      e.line,
      e.column,
    ]),
    [
      ["privileged", "services.a.privileged", 4, 17],
      ["bind_mount", "services.a.volumes[0]", 5, 15],
    ],
  );
  const human = denv(["validate", dir]);
  assert.equal(human.code, 1);
  assert.match(human.stderr, /services\.a\.privileged \(line 4:17\) \[privileged\]/);
});

test("--no-build refuses build without image", () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-"));
  writeFileSync(join(dir, "docker-compose.yaml"), "services:\n  app:\n    build: .\n");
  assert.equal(denv(["validate", dir]).code, 0);
  const r = denv(["validate", dir, "--no-build", "--json"]);
  assert.equal(r.code, 1);
  assert.equal(JSON.parse(r.stdout).errors[0].code, "build_without_image");
});

test("a missing path is a usage error that says what to do", () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-"));
  const r = denv(["validate", dir]);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /denv init rl-environment/);
});

test("denv init rl-environment writes the seed's file, which validates, and never overwrites", () => {
  const dir = join(mkdtempSync(join(tmpdir(), "denv-")), "env");
  const first = denv(["init", "rl-environment", dir, "--json"]);
  assert.equal(first.code, 0, first.stderr);
  const path = JSON.parse(first.stdout).path;
  // It names a grader and a seed of the reader's own: said before they deploy, not after a failed prepare.
  assert.match(JSON.parse(first.stdout).before_deploying, /ghcr\.io\/you\/verifier:1\.2 is a placeholder/);
  assert.match(readFileSync(path, "utf8"), /image: postgres:16-alpine/);
  assert.equal(denv(["validate", dir]).code, 0);
  const said = denv(["init", "rl-environment", join(dirname(dir), "again")]);
  assert.match(said.stdout, /^before you deploy it: .*placeholder/m);
  writeFileSync(path, "# mine\n");
  const second = denv(["init", "rl-environment", dir]);
  assert.equal(second.code, 1);
  assert.equal(readFileSync(path, "utf8"), "# mine\n");
});

test("denv init writes a starter for every kind the seed names; each validates; none overwrites a file", () => {
  for (const kind of ["rl-environment", "agent", "service", "website", "inference"]) {
    const dir = join(mkdtempSync(join(tmpdir(), "denv-")), kind);
    const r = denv(["init", kind, dir, "--json"]);
    assert.equal(r.code, 0, `${kind}: ${r.stderr}`);
    const out = JSON.parse(r.stdout) as { files: string[] };
    const v = denv(["validate", dir, "--json"]);
    assert.equal(v.code, 0, `${kind}: ${v.stdout}`);
    assert.equal(JSON.parse(v.stdout).spec.kind, kind);
    // A file it would write that the user already has (not the compose file) stops it too.
    const last = out.files.find((f) => !f.endsWith("docker-compose.yaml")) ?? (out.files[0] as string);
    writeFileSync(last, "mine\n");
    if (last !== join(dir, "docker-compose.yaml")) rmSync(join(dir, "docker-compose.yaml"));
    assert.equal(denv(["init", kind, dir]).code, 1);
    assert.equal(readFileSync(last, "utf8"), "mine\n");
  }
});

test("API commands answer bad arguments with usage errors (exit 2) before calling anything", () => {
  for (const args of [
    ["fork", "alpha"],
    ["exec"],
    ["files", "put", "x"],
    ["rollback", "alpha"],
    ["deploy"],
    ["project", "create", "p"],
    ["cloud", "connect", "hetzner", "--name", "hz"],
    ["cloud", "disconnect"],
  ]) {
    const r = denv(args);
    assert.equal(r.code, 2, `denv ${args.join(" ")}: ${r.stderr}`);
  }
});

test("without a server or key, API commands say how to get one (exit 1, --json error)", () => {
  const r = spawnSync(process.execPath, [bin, "env", "list", "--json"], {
    encoding: "utf8",
    env: { ...process.env, DENV_CONFIG: "/nonexistent/config.json", DENV_SERVER: "", DENV_API_KEY: "" },
  });
  assert.equal(r.status, 1);
  const out = JSON.parse(r.stdout);
  assert.equal(out.ok, false);
  assert.equal(out.error.code, "unauthenticated");
  assert.match(out.error.message, /denv login/);
});
