/**
 * docs/architecture.md follows the tree: every package, and every folder of a package's source,
 * is named in its layout table (as `packages/NAME` or `PACKAGE/src/FOLDER/`), so a folder added
 * without a line there fails here.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { test } from "node:test";

const root = resolve(import.meta.dirname, "..", "..");
const page = readFileSync(join(root, "docs/architecture.md"), "utf8");

const dirs = (path: string) =>
  readdirSync(path, { withFileTypes: true })
    .filter((e) => e.isDirectory() && e.name !== "node_modules")
    .map((e) => e.name);

test("docs/architecture.md names every package and every folder of each package's source", () => {
  const missing: string[] = [];
  for (const pkg of dirs(join(root, "packages"))) {
    if (!page.includes(`\`packages/${pkg}\``)) missing.push(`packages/${pkg}`);
    const src = join(root, "packages", pkg, "src");
    for (const folder of (() => {
      try {
        return dirs(src);
      } catch {
        return [];
      }
    })())
      if (!page.includes(`${pkg}/src/${folder}/`)) missing.push(`${pkg}/src/${folder}/`);
  }
  assert.deepEqual(missing, [], `not in docs/architecture.md's layout:\n${missing.join("\n")}`);
});
