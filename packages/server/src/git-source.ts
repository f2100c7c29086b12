/**
 * A project's git source, read at deploy: the compose file and .env at the repository's root, from
 * the commit the default branch points at. Repositories are hostile input: the clone is bare (no
 * working tree is written, so no link in it is ever followed), the two files are read from git's
 * objects as blobs (a symbolic link there is refused, not resolved), sizes are bounded, and git runs
 * with no configuration of the server's own: no credentials, no SSH identity, no protocols but
 * http(s), no redirects, only hosts an administrator allowed.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenvError } from "@denv/protocol";
import { COMPOSE_FILE_NAMES, MAX_COMPOSE_BYTES } from "@denv/spec";
import type { FetchPolicy } from "./fetch-policy.ts";

export interface GitSource {
  compose: string;
  dotenv: string | null;
  commit: string;
  /** Which of COMPOSE_FILE_NAMES it was. */
  file: string;
}

/** Checks a git source URL before it is stored or cloned; returns it parsed. */
export function checkGitUrl(source: string, policy: FetchPolicy): URL {
  let url: URL;
  try {
    url = new URL(source);
  } catch {
    throw new DenvError(
      "invalid_argument",
      `${source} is not a git URL denv clones: give an https:// URL (or a local directory, uploaded by the CLI)`,
    );
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new DenvError(
      "invalid_argument",
      url.protocol === "file:"
        ? "file:// sources would be read from the server's own disk; give an https:// URL, or deploy the directory with the CLI"
        : `${url.protocol}// sources are not cloned (the server's own SSH identity is never used for a project); give an https:// URL`,
    );
  }
  if (url.username || url.password) {
    throw new DenvError(
      "invalid_argument",
      "a git URL with credentials in it would be stored and shown as the project's source; use a public https:// URL",
    );
  }
  if (url.hash) throw new DenvError("invalid_argument", "a git URL has no #fragment");
  policy.check(url, "git source");
  return url;
}

/** git with nothing of the server's configuration and only http(s) transports. */
function git(args: string[], home: string, timeoutMs: number): Promise<Buffer> {
  const config = [
    "protocol.allow=never",
    "protocol.https.allow=always",
    "protocol.http.allow=always",
    "http.followRedirects=false",
    "credential.helper=",
    "core.askPass=",
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "transfer.fsckObjects=true",
  ].flatMap((c) => ["-c", c]);
  return new Promise((resolve, reject) => {
    execFile(
      "git",
      [...config, ...args],
      {
        encoding: "buffer",
        timeout: timeoutMs,
        maxBuffer: MAX_COMPOSE_BYTES + 64 * 1024,
        env: {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          HOME: home,
          GIT_CONFIG_NOSYSTEM: "1",
          GIT_CONFIG_GLOBAL: "/dev/null",
          GIT_TERMINAL_PROMPT: "0",
          GIT_ASKPASS: "/bin/false",
          SSH_ASKPASS: "/bin/false",
          GIT_SSH_COMMAND: "/bin/false",
          GIT_ALLOW_PROTOCOL: "https:http",
          GIT_LFS_SKIP_SMUDGE: "1",
          ...(process.env.http_proxy ? { http_proxy: process.env.http_proxy } : {}),
          ...(process.env.https_proxy ? { https_proxy: process.env.https_proxy } : {}),
        },
      },
      (err, stdout, stderr) => {
        if (!err) return resolve(stdout);
        const text = stderr
          .toString("utf8")
          // biome-ignore lint/suspicious/noControlCharactersInRegex: strip what a remote may print
          .replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, "")
          .trim()
          .split("\n")
          .slice(-3)
          .join("; ")
          .slice(-300);
        reject(Object.assign(new Error(text || err.message), { killed: err.killed }));
      },
    );
  });
}

/** Clones the repository's default branch (one commit, no working tree) and reads the two files. */
export async function readGitSource(
  source: string,
  policy: FetchPolicy,
  options: { timeoutMs?: number } = {},
): Promise<GitSource> {
  const url = checkGitUrl(source, policy);
  const timeoutMs = options.timeoutMs ?? 120_000;
  const dir = await mkdtemp(join(tmpdir(), "denv-src-"));
  const home = join(dir, "home");
  const repo = join(dir, "repo.git");
  try {
    await git(
      [
        "clone",
        "--quiet",
        "--bare",
        "--depth",
        "1",
        "--single-branch",
        "--no-tags",
        "--filter=blob:none",
        "--",
        url.href,
        repo,
      ],
      home,
      timeoutMs,
    ).catch((err: Error & { killed?: boolean }) => {
      throw new DenvError(
        "unavailable",
        err.killed
          ? `git clone ${source} did not finish within ${timeoutMs / 1000} s`
          : `git clone ${source} failed: ${err.message}`,
      );
    });
    const at = (args: string[]) => git(["--git-dir", repo, ...args], home, timeoutMs);
    const commit = (await at(["rev-parse", "HEAD"])).toString().trim();
    // The root tree: "<mode> <type> <object>\t<name>" per entry, NUL-separated.
    const entries = (await at(["ls-tree", "-z", "HEAD"]))
      .toString("utf8")
      .split("\0")
      .filter(Boolean)
      .map((line) => {
        const [meta = "", name = ""] = line.split("\t");
        const [mode = "", type = "", object = ""] = meta.split(" ");
        return { mode, type, object, name };
      });
    const blob = async (name: string): Promise<string | null> => {
      const e = entries.find((x) => x.name === name);
      if (!e) return null;
      if (e.mode === "120000")
        throw new DenvError(
          "invalid_argument",
          `${name} is a symbolic link in ${source}; denv reads regular files only`,
        );
      if (e.type !== "blob" || !/^[0-9a-f]{40,64}$/.test(e.object))
        throw new DenvError("invalid_argument", `${name} in ${source} is not a file`);
      const size = Number((await at(["cat-file", "-s", e.object])).toString().trim());
      if (!(size <= MAX_COMPOSE_BYTES))
        throw new DenvError("invalid_argument", `${name} in ${source} is over ${MAX_COMPOSE_BYTES} bytes`);
      return (await at(["cat-file", "blob", e.object])).toString("utf8");
    };
    const file = COMPOSE_FILE_NAMES.find((n) => entries.some((e) => e.name === n));
    if (!file)
      throw new DenvError(
        "invalid_argument",
        `${source} has no compose.yaml or docker-compose.yaml at its root`,
      );
    return { compose: (await blob(file)) as string, dotenv: await blob(".env"), commit, file };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
