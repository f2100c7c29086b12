import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { environmentCompose, mainImage, readEnvironmentDir, readHarborTask } from "./harbor-task.ts";

function dir(files: Record<string, string>): string {
  const d = mkdtempSync(join(tmpdir(), "harbor-env-"));
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(join(d, rel, ".."), { recursive: true });
    writeFileSync(join(d, rel), text);
  }
  return d;
}

const plan = (files: Record<string, string>, cfg: Record<string, unknown> = {}) => {
  const env = readEnvironmentDir(dir(files));
  return mainImage(env, "t", cfg, environmentCompose(env, "t", cfg, []));
};

test("main's image by Harbor's precedence: Dockerfile, then the compose file's main image, then docker_image", () => {
  const df = plan(
    { Dockerfile: "FROM debian:bookworm\nWORKDIR /srv\nWORKDIR app\n" },
    { docker_image: "x:1" },
  );
  assert.equal(df.from, "dockerfile");
  assert.equal(df.workdir, "/srv/app");
  assert.match(df.notes[0] ?? "", /docker_image x:1: the Dockerfile is built instead/);
  const composed = plan(
    { "docker-compose.yaml": "services:\n  main:\n    image: a:1\n" },
    { docker_image: "b:2" },
  );
  assert.deepEqual([composed.from, composed.image], ["compose", "a:1"]);
  assert.match(composed.notes[0] ?? "", /services\.main\.image a:1 is used/);
  const prebuilt = plan({ "seed.txt": "x" }, { docker_image: "b:2", workdir: "/w" });
  assert.deepEqual([prebuilt.from, prebuilt.image, prebuilt.workdir], ["docker_image", "b:2", "/w"]);
  // A compose file that uses Harbor's variable for the prebuilt image.
  const vars = plan(
    { "docker-compose.yml": "services:\n  main:\n    image: ${PREBUILT_IMAGE_NAME}\n" },
    { docker_image: "c:3" },
  );
  assert.equal(vars.image, "c:3");
});

test("nothing to run, or a compose file that is not one, is refused naming the field", () => {
  assert.throws(() => plan({ "seed.txt": "x" }), /no Dockerfile or docker-compose\.yaml.*nothing to run/);
  assert.throws(
    () => plan({ "docker-compose.yaml": "services:\n  main:\n    environment: {A: b}\n" }),
    (e: { code?: string; message: string }) =>
      e.code === "spec_invalid" && /services\.main has no image/.test(e.message),
  );
  assert.throws(
    () => plan({ "docker-compose.yaml": "services:\n  main:\n    image: [1]\n" }),
    /not a string/,
  );
  assert.throws(() => plan({ "docker-compose.yaml": "- a\n" }), /not a mapping/);
  assert.throws(
    () => plan({ "docker-compose.yaml": "services:\n  main: 3\n" }),
    /services\.main is not a mapping/,
  );
  assert.throws(() => plan({ "docker-compose.yaml": "services: [\n" }), /not valid YAML/);
});

test("a separate verifier's tests/ is an environment directory too; links in it are never followed", () => {
  const tests = dir({
    Dockerfile: "FROM debian:bookworm\nCOPY test.sh /tests/test.sh\n",
    "test.sh": "true\n",
  });
  assert.equal(plan({ Dockerfile: "FROM debian:bookworm\n" }).from, "dockerfile");
  assert.match(readEnvironmentDir(tests).dockerfile ?? "", /COPY test\.sh/);
  const linked = dir({ "secret.txt": "s" });
  symlinkSync(join(linked, "secret.txt"), join(linked, "Dockerfile"));
  assert.throws(() => readEnvironmentDir(linked), /symbolic link/);
  // environment/ itself a link: the task is refused, not read through it.
  const task = dir({ "task.toml": "", "tests/test.sh": "true\n", "elsewhere/Dockerfile": "FROM x\n" });
  symlinkSync(join(task, "elsewhere"), join(task, "environment"));
  assert.throws(() => readHarborTask(task), /symbolic link/);
});
