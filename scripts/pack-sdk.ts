/**
 * Packs @denv/sdk as an npm tarball any project installs (`npm install ./denv-sdk-0.1.0.tgz`):
 * the SDK bundled with what it uses (@denv/protocol's pieces, tar-stream) into one ES module, so
 * the package has no dependencies and installs offline, and its type declarations (tsc's, with the
 * relative imports pointing at the .js the declarations stand for). Node does not strip types
 * under node_modules, which is why the checkout's .ts sources are not what is packed.
 *
 *   node scripts/pack-sdk.ts [OUT_DIR]      writes OUT_DIR/denv-sdk-VERSION.tgz (default dist/)
 */
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dirname, "..");
const SDK = join(ROOT, "packages/sdk");

export async function packSdk(outDir: string): Promise<string> {
  const version = (JSON.parse(readFileSync(join(SDK, "package.json"), "utf8")) as { version: string })
    .version;
  const work = mkdtempSync(join(tmpdir(), "denv-sdk-pack-"));
  try {
    const dist = join(work, "package", "dist");
    mkdirSync(dist, { recursive: true });
    // esbuild is a build tool of the checkout: only packing needs it.
    const { build } = await import("esbuild");
    await build({
      entryPoints: [join(SDK, "src/index.ts")],
      outfile: join(dist, "index.js"),
      bundle: true,
      format: "esm",
      platform: "node",
      target: "node20",
      logLevel: "silent",
      // tar-stream's CommonJS needs require in an ES module.
      banner: {
        js: 'import { createRequire } from "node:module"; const require = createRequire(import.meta.url);',
      },
    });
    const types = join(work, "types");
    execFileSync(
      join(ROOT, "node_modules/.bin/tsc"),
      [
        "-p",
        join(ROOT, "tsconfig.json"),
        "--declaration",
        "--emitDeclarationOnly",
        "--noEmit",
        "false",
        "--outDir",
        types,
      ],
      { stdio: "pipe" },
    );
    const declared = join(types, "packages/sdk/src");
    for (const f of readdirSync(declared)) {
      if (!f.endsWith(".d.ts") || f.includes(".test.") || f === "generate-docs.d.ts") continue;
      const text = readFileSync(join(declared, f), "utf8").replace(
        /from "(\.\/[\w.-]+)\.ts"/g,
        'from "$1.js"',
      );
      writeFileSync(join(dist, f), text);
    }
    writeFileSync(
      join(work, "package", "package.json"),
      `${JSON.stringify(
        {
          name: "@denv/sdk",
          version,
          description: "A typed client of denv's /v1 API: sandboxes, exec, files, forks, verify",
          type: "module",
          exports: { ".": { types: "./dist/index.d.ts", default: "./dist/index.js" } },
          types: "./dist/index.d.ts",
          engines: { node: ">=20" },
          license: "UNLICENSED",
        },
        null,
        2,
      )}\n`,
    );
    cpSync(join(ROOT, "docs/sdk/typescript.md"), join(work, "package", "README.md"));
    mkdirSync(outDir, { recursive: true });
    const name = execFileSync("npm", ["pack", "--silent", "--pack-destination", resolve(outDir)], {
      cwd: join(work, "package"),
      encoding: "utf8",
    }).trim();
    return join(resolve(outDir), name.split("\n").pop() as string);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const file = await packSdk(process.argv[2] ?? join(ROOT, "dist"));
  process.stdout.write(`${file}\n`);
}
