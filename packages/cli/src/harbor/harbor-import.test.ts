import assert from "node:assert/strict";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { parse } from "yaml";
import { importHarborEnvironment, importHarborTask, projectNameFor } from "./harbor-import.ts";
import { findTasks, readEnvironmentDir, readHarborTask } from "./harbor-task.ts";

function task(files: Record<string, string>, name = "t"): string {
  const dir = join(mkdtempSync(join(tmpdir(), "harbor-")), name);
  const all = {
    "task.toml": "[verifier]\ntimeout_sec = 30.0\n",
    "environment/Dockerfile": "FROM debian:bookworm\nWORKDIR /srv/work\n",
    "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    ...files,
  };
  for (const [rel, text] of Object.entries(all)) {
    mkdirSync(join(dir, rel, ".."), { recursive: true });
    writeFileSync(join(dir, rel), text);
  }
  return dir;
}

const out = () => mkdtempSync(join(tmpdir(), "harbor-out-"));

test("a Dockerfile task: main is built with denv's layer, the agent is uid 1000, the verifier carries tests/", async () => {
  const t = await importHarborTask(readHarborTask(task({ "solution/solve.sh": "echo hi\n" })), out());
  const compose = parse(readFileSync(join(t.dir, "docker-compose.yaml"), "utf8"));
  assert.equal(compose.services.main.user, "1000:1000");
  assert.equal(compose.services.main.working_dir, "/srv/work");
  assert.deepEqual(compose.services.main.volumes, ["workdir:/srv/work", "logs:/logs"]);
  assert.equal(compose["x-denv"].agent.service, "main");
  assert.equal(compose["x-denv"].verifier.service, "main");
  assert.equal(compose["x-denv"].verifier.timeout, "30s");
  // Compose would interpolate a bare $: every one in the script is doubled.
  assert.doesNotMatch(compose["x-denv"].verifier.command[2], /(^|[^$])\$[A-Za-z@?{]/);
  assert.match(readFileSync(join(t.dir, "environment/Dockerfile.denv"), "utf8"), /useradd -m -u 1000/);
  assert.equal(t.oracle, "solution");
});

test("hostile tasks fail safely, saying where", async () => {
  const bad: [Record<string, string>, RegExp][] = [
    [{ "task.toml": "[environment]\ncpus = 'lots'\n" }, /environment\.cpus/],
    [{ "task.toml": "[environment\n" }, /not valid TOML/],
    [{ "task.toml": "[[steps]]\nname = 'a'\n" }, /multi-step/],
    [
      { "environment/docker-compose.yaml": "services:\n  side:\n    build: ../../..\n" },
      /leaves environment/,
    ],
    [{ "task.toml": "[environment]\nos = 'windows'\n" }, /Windows/],
  ];
  for (const [files, why] of bad) {
    await assert.rejects(async () => importHarborTask(readHarborTask(task(files)), out()), why);
  }
  // Links are never followed: not task.toml, not tests/test.sh, not anything under tests/.
  const linkedTest = task({});
  const shadow = join(linkedTest, "tests/test.sh");
  writeFileSync(join(linkedTest, "secret"), "s");
  rmSync(shadow);
  symlinkSync("/etc/passwd", shadow);
  assert.throws(() => readHarborTask(linkedTest), /symbolic link/);
  const linkedToml = task({});
  rmSync(join(linkedToml, "task.toml"));
  symlinkSync("/etc/hostname", join(linkedToml, "task.toml"));
  assert.throws(() => findTasks(linkedToml), /no task\.toml/);
  const linkedInside = task({});
  symlinkSync("/etc/passwd", join(linkedInside, "tests/data"));
  await assert.rejects(async () => importHarborTask(readHarborTask(linkedInside), out()), /symbolic link/);
});

test("what does not map is listed: bind mounts, limits denv has no field for, unknown keys", async () => {
  const t = await importHarborTask(
    readHarborTask(
      task({
        "task.toml":
          "surprise = 1\n[environment]\nstorage_mb = 100\ngpus = 1\nallow_internet = false\n[agent]\nuser = 'root'\n",
        "environment/docker-compose.yaml":
          "services:\n  main:\n    depends_on: [side]\n    command: ['x']\n  side:\n    image: debian:bookworm\n    volumes: ['./data:/data', 'named:/n']\nvolumes: {named: {}}\n",
      }),
    ),
    out(),
  );
  for (const want of [
    /services\.side\.volumes "\.\/data:\/data"/,
    /storage_mb/,
    /\[environment\]\.gpus/,
    /\[agent\]\.user root/,
    /services\.main\.command/,
    /^surprise/,
  ])
    assert.ok(
      t.unmapped.some((u) => want.test(u)),
      `${want}: ${t.unmapped.join("\n")}`,
    );
  const compose = parse(readFileSync(join(t.dir, "docker-compose.yaml"), "utf8"));
  assert.deepEqual(compose.services.side.volumes, ["named:/n"]);
  assert.deepEqual(compose.services.main.depends_on, ["side"]);
  assert.equal(compose["x-denv"].egress, "deny");
  assert.deepEqual(JSON.parse(readFileSync(join(t.dir, "denv-import.json"), "utf8")).unmapped, t.unmapped);
});

test("project names from task names are safe names", () => {
  assert.equal(projectNameFor("Hello World!"), "hello-world");
  assert.equal(projectNameFor("../../etc"), "etc");
  assert.equal(projectNameFor("42-answers"), "task-42-answers");
  assert.equal(projectNameFor("!!!"), "task");
});

test("main's image by Harbor's precedence; a compose task whose main has none is refused and nothing is written", async () => {
  const { readdirSync, rmSync } = await import("node:fs");
  const noDockerfile = (files: Record<string, string>) => {
    const dir = task(files);
    rmSync(join(dir, "environment/Dockerfile"));
    return dir;
  };
  // Neither a Dockerfile, nor docker_image, nor an image for main in the compose file.
  const where = out();
  await assert.rejects(
    async () =>
      importHarborTask(
        readHarborTask(
          noDockerfile({
            "environment/docker-compose.yaml":
              "services:\n  main:\n    depends_on: [side]\n  side:\n    image: debian:bookworm\n",
          }),
        ),
        where,
      ),
    (err: Error & { code?: string }) =>
      err.code === "spec_invalid" && /services\.main has no image/.test(err.message),
  );
  assert.deepEqual(readdirSync(where), []);
  // The compose file's main image is main's image (it overrides the prebuilt one in Harbor's merge).
  const fromCompose = await importHarborTask(
    readHarborTask(
      noDockerfile({
        "task.toml": "[environment]\ndocker_image = 'debian:bookworm'\n",
        "environment/docker-compose.yaml": "services:\n  main:\n    image: example/main:1\n",
      }),
    ),
    out(),
  );
  assert.match(
    readFileSync(join(fromCompose.dir, "environment/Dockerfile.denv"), "utf8"),
    /^FROM example\/main:1\n/,
  );
  // docker_image alone: environment/'s files go into the workdir, as Harbor uploads them.
  const withFiles = await importHarborTask(
    readHarborTask(
      noDockerfile({
        "task.toml": "[environment]\ndocker_image = 'debian:bookworm'\nworkdir = '/app'\n",
        "environment/numbers.txt": "6 7\n",
        "environment/data/more.txt": "x\n",
      }),
    ),
    out(),
  );
  const layer = readFileSync(join(withFiles.dir, "environment/Dockerfile.denv"), "utf8");
  assert.match(layer, /^FROM debian:bookworm\n/);
  assert.match(layer, /COPY --chown=1000:1000 \["numbers\.txt","\/app\/numbers\.txt"\]/);
  assert.match(layer, /COPY --chown=1000:1000 \["data","\/app\/data"\]/);
  assert.ok(!withFiles.unmapped.some((u) => u.includes("environment/ files")), withFiles.unmapped.join("\n"));
});

test("an environment directory as the Harbor adapter runs it: the image's users, the file's own x-denv, nothing written on refusal", async () => {
  const env = join(task({ "environment/Dockerfile": "FROM debian:bookworm\nWORKDIR /w\n" }), "environment");
  const outDir = join(out(), "harbor-abc");
  const p = await importHarborEnvironment(
    readEnvironmentDir(env),
    { cpus: 2 },
    {
      name: "harbor-abc",
      out: outDir,
      egress: "deny",
    },
  );
  const compose = parse(readFileSync(join(p.dir, "docker-compose.yaml"), "utf8"));
  assert.deepEqual(compose.services.main.build, { context: "./environment", dockerfile: "Dockerfile" });
  assert.equal(compose.services.main.user, undefined, "Harbor's users are the adapter's to apply");
  assert.deepEqual(compose.services.main.volumes, ["workdir:/w"]);
  assert.equal(compose.services.main.cpus, 2);
  assert.deepEqual(compose["x-denv"], { kind: "agent", egress: "deny" });
  assert.equal(p.kind, "agent");
  // A compose file with its own x-denv block (a verifier) keeps it, and its kind.
  const withBlock = join(
    task({
      "environment/docker-compose.yaml":
        "x-denv:\n  kind: rl-environment\n  verifier: {image: v:1, command: [/v]}\nservices:\n  main:\n    image: a:1\n",
    }),
    "environment",
  );
  const q = await importHarborEnvironment(
    readEnvironmentDir(withBlock),
    {},
    {
      name: "harbor-def",
      out: join(out(), "harbor-def"),
      egress: "allow",
    },
  );
  assert.equal(q.kind, "rl-environment");
  assert.equal(
    parse(readFileSync(join(q.dir, "docker-compose.yaml"), "utf8"))["x-denv"].verifier.image,
    "v:1",
  );
  // Refused: a linked Dockerfile, a hostile name; nothing is left where the project would be.
  const linked = join(task({}), "environment");
  rmSync(join(linked, "Dockerfile"));
  writeFileSync(join(linked, "..", "secret"), "s");
  symlinkSync(join(linked, "..", "secret"), join(linked, "Dockerfile"));
  assert.throws(() => readEnvironmentDir(linked), /symbolic link/);
  const bad = join(out(), "x");
  await assert.rejects(
    importHarborEnvironment(readEnvironmentDir(env), {}, { name: "../x", out: bad, egress: "allow" }),
    /not a valid project name/,
  );
  assert.equal(existsSync(bad), false);
  const noImage = join(task({ "environment/docker-compose.yaml": "services:\n  main: {}\n" }), "environment");
  rmSync(join(noImage, "Dockerfile"));
  const target = join(out(), "harbor-ghi");
  await assert.rejects(
    importHarborEnvironment(
      readEnvironmentDir(noImage),
      {},
      { name: "harbor-ghi", out: target, egress: "allow" },
    ),
    /services\.main has no image/,
  );
  assert.equal(existsSync(target), false);
});
