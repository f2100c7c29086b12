/**
 * What a new host fetches: the installer (GET /install.sh, with this server's URL filled in) and
 * the denvd executables scripts/build-denvd.sh writes (GET /v1/downloads/{file}). Neither needs an
 * API key: the binaries hold no secret, and joining still needs a single-use token.
 */
import { createReadStream, existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { DenvError } from "@denv/protocol";

export const DOWNLOADABLE = ["denvd-linux-x86_64", "denvd-linux-aarch64", "denvd.version"] as const;

/** The repository's dist/ when the server runs from a checkout; DENV_DOWNLOADS_DIR overrides. */
export function defaultDownloadsDir(): string {
  return process.env.DENV_DOWNLOADS_DIR ?? join(import.meta.dirname, "..", "..", "..", "dist");
}

const INSTALLER = readFileSync(join(import.meta.dirname, "install.sh"), "utf8");

export function installScript(serverUrl: string): string {
  // The URL goes inside double quotes in sh: nothing in it may end the string or expand.
  const safe = serverUrl.replace(/[^A-Za-z0-9:/._~%-]/g, "");
  return INSTALLER.replace("__DENV_SERVER__", safe);
}

export function download(dir: string, file: string): Response {
  if (!(DOWNLOADABLE as readonly string[]).includes(file))
    throw new DenvError("not_found", `no download ${file}; there are ${DOWNLOADABLE.join(", ")}`);
  const path = join(dir, file);
  if (!existsSync(path))
    throw new DenvError(
      "not_found",
      `this server has no ${file}: build it with \`bash scripts/build-denvd.sh\` (or point --downloads-dir at the builds)`,
    );
  return new Response(Readable.toWeb(createReadStream(path)) as ReadableStream, {
    headers: {
      "content-type": file.endsWith(".version") ? "text/plain" : "application/octet-stream",
      "content-length": String(statSync(path).size),
    },
  });
}
