/**
 * The repository's pages link only to what is in the repository: every relative link of every
 * tracked Markdown file (README, docs/, the packages' and tests' own pages) names a file or folder
 * that exists inside it, and none points outside it (the product's documents are summarised in
 * docs/, not linked from a path beside the checkout).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";

const root = resolve(import.meta.dirname, "..", "..");
const pages = execFileSync(
  "git",
  ["-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
  {
    encoding: "utf8",
  },
)
  .split("\n")
  .filter((p) => p && existsSync(join(root, p)));

/** The targets of a page's links and images, outside code blocks and code spans. */
export function linkTargets(markdown: string): string[] {
  const prose = markdown.replace(/```[\s\S]*?```/g, "").replace(/`[^`\n]*`/g, "");
  return [...prose.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map(
    (m) => m[1] as string,
  );
}

test("the link finder sees links and images, and not what is in code", () => {
  assert.deepEqual(
    linkTargets("see [a](docs/a.md#x) and ![i](img.png) `[no](x.md)`\n```\n[no](y.md)\n```\n"),
    ["docs/a.md#x", "img.png"],
  );
});

test("the README and the docs exist, and the README stays short", () => {
  assert.ok(pages.includes("README.md"));
  for (const p of [
    "concepts",
    "compose",
    "cli",
    "sandbox-api",
    "frameworks",
    "targets",
    "console",
    "security",
    "crash-safety",
    "benchmarks",
    "architecture",
    "contributing",
  ])
    assert.ok(pages.includes(`docs/${p}.md`), `docs/${p}.md`);
  const lines = readFileSync(join(root, "README.md"), "utf8").split("\n").length;
  assert.ok(lines <= 150, `README.md is ${lines} lines`);
});

test("every relative link of every page names something inside the repository", () => {
  const broken: string[] = [];
  for (const page of pages) {
    const text = readFileSync(join(root, page), "utf8");
    if (/\.\.\/shared\//.test(text)) broken.push(`${page}: names ../shared/, outside the repository`);
    for (const target of linkTargets(text)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith("#")) continue;
      const path = decodeURIComponent(target.split("#")[0] as string);
      const abs = resolve(dirname(join(root, page)), path);
      const rel = relative(root, abs);
      if (rel.startsWith("..") || resolve(abs) === resolve(root, ".."))
        broken.push(`${page}: ${target} leaves the repository`);
      else if (!existsSync(abs)) broken.push(`${page}: ${target} does not exist`);
    }
  }
  assert.deepEqual(broken, []);
});
