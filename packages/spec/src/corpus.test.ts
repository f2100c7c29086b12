/**
 * The compose corpus: every file in testdata/corpus declares what must happen to it on its first
 * line (`# expect: ok`, or `# expect: refuse CODE [PATH]; CODE [PATH]...`), and its full result is
 * kept as a golden file beside it. Regenerate goldens with UPDATE_GOLDEN=1 after a deliberate change.
 * A golden only says the output did not change; the facts a file must resolve to are its
 * `# assert: PATH = JSON` lines (what Compose itself makes of the file: `1g` is 1073741824 bytes,
 * `$$` is a literal `$`), checked whatever the golden says, so regenerating cannot bless a wrong one.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { canonicalJson, validateCompose } from "./validate-compose.ts";

const dir = join(import.meta.dirname, "..", "testdata", "corpus");
const files = readdirSync(dir)
  .filter((f) => f.endsWith(".yaml"))
  .sort();
// Refusals that concern the whole file rather than one field have no position.
const FILE_LEVEL = new Set(["yaml_alias_bomb", "not_a_mapping", "file_too_large"]);

test("the corpus holds at least 40 files, accepted and refused", () => {
  assert.ok(files.length >= 40, `${files.length} files`);
  assert.ok(files.some((f) => f.startsWith("accept-")));
  assert.ok(files.some((f) => f.startsWith("refuse-")));
  const facts = files.flatMap((f) => readFileSync(join(dir, f), "utf8").match(/^# assert: /gm) ?? []);
  assert.ok(facts.length >= 40, `${facts.length} independent facts (# assert: lines)`);
});

for (const file of files) {
  const name = file.replace(/\.yaml$/, "");
  test(`corpus: ${name}`, () => {
    const text = readFileSync(join(dir, file), "utf8");
    const header = /^# expect: (.*)$/m.exec(text)?.[1];
    assert.ok(header, "first line must be # expect: ...");
    const dotenvPath = join(dir, `${name}.dotenv`);
    const result = validateCompose(text, {
      env: {},
      dotenv: existsSync(dotenvPath) ? readFileSync(dotenvPath, "utf8") : undefined,
      noBuild: text.includes("# validated with --no-build"),
      projectName: name,
      readFile: (rel) => {
        const p = join(dir, `${name}.${rel}`);
        return existsSync(p) ? readFileSync(p, "utf8") : undefined;
      },
    });
    if (header === "ok") {
      assert.ok(result.ok, `expected ok, got ${JSON.stringify(!result.ok && result.errors)}`);
      for (const [, path, value] of text.matchAll(/^# assert: (\S+) = (.+)$/gm)) {
        const got: unknown = (path as string)
          .split(".")
          .reduce<unknown>((o, k) => (o as Record<string, unknown> | undefined)?.[k], result.spec);
        assert.deepEqual(got, JSON.parse(value as string), `${path}`);
      }
    } else {
      assert.ok(!result.ok, "expected a refusal");
      for (const want of header.replace(/^refuse /, "").split(";")) {
        const [code, path] = want.trim().split(/\s+/);
        const hit = result.errors.find((e) => e.code === code && (path === undefined || e.path === path));
        assert.ok(hit, `expected ${code} at ${path ?? "(any)"}; got ${JSON.stringify(result.errors)}`);
        if (!FILE_LEVEL.has(hit.code)) assert.ok(hit.line > 0 && hit.column > 0, `no position for ${code}`);
        assert.ok(hit.message.length > 10);
      }
    }
    const goldenPath = join(dir, `${name}.golden.json`);
    const actual = `${canonicalJson(result, 2)}\n`;
    if (process.env.UPDATE_GOLDEN === "1") writeFileSync(goldenPath, actual);
    assert.ok(existsSync(goldenPath), `missing ${name}.golden.json: run with UPDATE_GOLDEN=1`);
    assert.equal(actual, readFileSync(goldenPath, "utf8"));
  });
}
