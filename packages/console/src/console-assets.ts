/**
 * The console's files as the server serves them: its page, one script (web/*.ts bundled and
 * minified by esbuild) and one stylesheet. Built once into dist/ and rebuilt only when a source is
 * newer than the build, so a server never needs a CDN or a network to serve it.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";

const ROOT = join(import.meta.dirname, "..");
const WEB = join(ROOT, "web");
export const CONSOLE_DIST = join(ROOT, "dist");

export interface ConsoleAssets {
  html: string;
  js: string;
  css: string;
}

function newestSourceMs(): number {
  return Math.max(...readdirSync(WEB).map((f) => statSync(join(WEB, f)).mtimeMs));
}

/**
 * Bundles web/ into dist/ (console.js, console.css, index.html): built beside it, then each file
 * renamed into place, so a server in another process never reads a half-written file.
 */
export async function buildConsole(outDir = CONSOLE_DIST): Promise<void> {
  const work = `${outDir}.build-${process.pid}`;
  try {
    await bundle(work);
    mkdirSync(outDir, { recursive: true });
    for (const f of ["console.js", "console.css", "index.html"]) renameSync(join(work, f), join(outDir, f));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

async function bundle(outDir: string): Promise<void> {
  // esbuild is a build tool of the checkout: only a build needs it, not a server that has dist/.
  const { build } = await import("esbuild");
  mkdirSync(outDir, { recursive: true });
  await build({
    entryPoints: [join(WEB, "console-app.ts")],
    bundle: true,
    minify: true,
    format: "esm",
    target: ["chrome123", "firefox120", "safari17.5"],
    outfile: join(outDir, "console.js"),
    logLevel: "error",
    legalComments: "none",
  });
  await build({
    entryPoints: [join(WEB, "console.css")],
    bundle: true,
    minify: true,
    outfile: join(outDir, "console.css"),
    logLevel: "error",
  });
  await build({
    entryPoints: [join(WEB, "index.html")],
    loader: { ".html": "copy" },
    outdir: outDir,
    logLevel: "error",
  });
}

let cached: Promise<ConsoleAssets> | undefined;

/** The built files, building them first when dist/ is missing or older than web/. */
export function consoleAssets(): Promise<ConsoleAssets> {
  cached ??= (async () => {
    const built = join(CONSOLE_DIST, "console.js");
    if (!existsSync(built) || statSync(built).mtimeMs < newestSourceMs()) await buildConsole();
    const read = (f: string) => readFileSync(join(CONSOLE_DIST, f), "utf8");
    return { html: read("index.html"), js: read("console.js"), css: read("console.css") };
  })();
  cached.catch(() => {
    cached = undefined;
  });
  return cached;
}

if (import.meta.main) {
  await buildConsole();
  const size = (f: string) => statSync(join(CONSOLE_DIST, f)).size;
  process.stdout.write(
    `built ${CONSOLE_DIST}: console.js ${size("console.js")} bytes, console.css ${size("console.css")} bytes\n`,
  );
}
