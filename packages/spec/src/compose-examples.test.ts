/**
 * 39 compose files as people publish them (web apps with databases, proxies, queues, monitoring;
 * written in the shapes of a public collection of examples): each validates as written, with the
 * project's own files it names, except those that need the host itself, which are refused for
 * that reason. Each file's first line says which (`# expect: ok` or `# expect: refuse CODE`).
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { validateCompose } from "./validate-compose.ts";

const dir = join(import.meta.dirname, "..", "testdata", "compose-examples");
const names = readdirSync(dir).sort();
/** What only the host can give: its socket, its network, its paths, its kernel, its runtimes. */
const HOST_BOUND = new Set([
  "docker_socket",
  "network_mode_host",
  "bind_mount",
  "cap_add",
  "sysctl_refused",
  "unsupported_field",
]);

function validate(name: string) {
  const text = readFileSync(join(dir, name, "compose.yaml"), "utf8");
  const expect = /^# expect: (.*)$/m.exec(text)?.[1] ?? "";
  const result = validateCompose(text, {
    env: {},
    noBuild: false,
    projectName: name,
    readFile: (rel) => {
      const p = join(dir, name, rel);
      return existsSync(p) ? readFileSync(p, "utf8") : undefined;
    },
  });
  return { text, expect, result };
}

test("39 published compose files: all but the 8 that need the host validate as written", () => {
  assert.equal(names.length, 39);
  const ok = names.filter((n) => validate(n).result.ok);
  assert.equal(ok.length, 31, `refused: ${names.filter((n) => !ok.includes(n)).join(", ")}`);
});

for (const name of names) {
  test(`compose example: ${name}`, () => {
    const { text, expect, result } = validate(name);
    if (expect === "ok") {
      assert.ok(result.ok, JSON.stringify(!result.ok && result.errors));
      // Every relative bind mount became a dataset seeded with the project's files.
      const seeded = Object.values(result.spec.datasets).filter((d) => d.seed).length;
      if (/\n\s+- \.\/|source: \.\/|\[\.\/|"\.:/.test(text))
        assert.ok(seeded > 0, "a project mount became a dataset");
      return;
    }
    assert.ok(!result.ok, "expected a refusal");
    const code = expect.replace(/^refuse /, "");
    assert.ok(HOST_BOUND.has(code));
    assert.ok(
      result.errors.some((e) => e.code === code),
      `expected ${code}; got ${JSON.stringify(result.errors)}`,
    );
    // Refused only for what needs the host, never for the project's own files.
    for (const e of result.errors) assert.ok(HOST_BOUND.has(e.code), JSON.stringify(e));
    for (const e of result.errors.filter((x) => x.code === "bind_mount"))
      assert.match(e.message, /(~|^bind mount of \/)/);
  });
}
