import assert from "node:assert/strict";
import { test } from "node:test";
import { projectRelativePath } from "./build-field.ts";
import { validateCompose } from "./validate-compose.ts";

const validate = (build: string) =>
  validateCompose(`services:\n  app:\n${build}`, { env: {}, noBuild: false, projectName: "p" });

test("build: the long form resolves context, dockerfile, args, target and cache_from", () => {
  const r = validate(
    "    build:\n      context: ./app/\n      dockerfile: docker/Dockerfile.prod\n      target: runtime\n      args: [A=1, B=two words]\n      cache_from: [base:1]\n      no_cache: true\n",
  );
  assert.ok(r.ok, JSON.stringify(r));
  assert.deepEqual(r.spec.services.app?.build, {
    context: "app",
    dockerfile: "docker/Dockerfile.prod",
    args: { A: "1", B: "two words" },
    target: "runtime",
    cache_from: ["base:1"],
    no_cache: true,
    labels: {},
    network: "default",
    context_digest: null,
  });
  assert.equal(r.spec.services.app?.image, "p-app");
});

test("build: anything that would reach the host, or leave the project, is refused where it is written", () => {
  const cases: [string, string][] = [
    ["    build:\n      context: .\n      network: host\n", "services.app.build.network"],
    ["    build:\n      context: .\n      privileged: true\n", "services.app.build.privileged"],
    ["    build:\n      context: .\n      secrets: [token]\n", "services.app.build.secrets"],
    ["    build:\n      context: .\n      ssh: [default]\n", "services.app.build.ssh"],
    [
      "    build:\n      context: .\n      additional_contexts: {a: /etc}\n",
      "services.app.build.additional_contexts",
    ],
    ["    build: ../outside\n", "services.app.build.context"],
    ["    build: /etc\n", "services.app.build.context"],
    ["    build: https://github.com/x/y.git\n", "services.app.build.context"],
    ["    build:\n      context: .\n      dockerfile: ../../etc/passwd\n", "services.app.build.dockerfile"],
    ["    build:\n      context: .\n      dockerfile: /etc/passwd\n", "services.app.build.dockerfile"],
    ["    build:\n      context: .\n      args: {A: {nested: 1}}\n", "services.app.build.args.A"],
    ["    build:\n      context: .\n      frobnicate: 1\n", "services.app.build.frobnicate"],
  ];
  for (const [text, path] of cases) {
    const r = validate(text);
    assert.ok(!r.ok, `accepted: ${text}`);
    assert.ok(
      r.errors.some((e) => e.path === path),
      `${text}: ${JSON.stringify(r.errors.map((e) => [e.path, e.message]))}`,
    );
  }
});

test("build: fields that cannot change the image are accepted with a warning, never dropped silently", () => {
  const r = validate("    build:\n      context: .\n      tags: [x:1]\n      args: [NOVALUE]\n");
  assert.ok(r.ok);
  assert.deepEqual(r.spec.services.app?.build?.args, {});
  assert.deepEqual(r.warnings.map((w) => w.path).sort(), [
    "services.app.build.args[0]",
    "services.app.build.tags",
  ]);
});

test("projectRelativePath normalises inside and refuses leaving", () => {
  assert.equal(projectRelativePath("./a/./b/../c/", "x"), "a/c");
  assert.equal(projectRelativePath(".", "x"), ".");
  assert.equal(projectRelativePath("a/..", "x"), ".");
  assert.equal(typeof projectRelativePath("a/../../b", "x"), "object");
  assert.equal(typeof projectRelativePath("a\0b", "x"), "object");
});
