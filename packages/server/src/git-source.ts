/**
 * A project's git source, read at deploy: the compose file and .env at the repository's root, from
 * the commit the default branch points at. Repositories are hostile input: the clone is bare (no
 * working tree is written, so no link in it is ever followed), the two files are read from git's
 * objects as blobs (a symbolic link there is refused, not resolved), sizes are bounded, and git runs
 * with no configuration of the server's own: no credentials, no SSH identity, no protocols but
 * http(s), no redirects, only hosts an administrator allowed. The clone is kept open while the
 * deploy's resolve phase archives its build contexts (git archive: links stay links in the tar).
 */
import { execFile, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { isIP } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, type Readable } from "node:stream";
import { DenvError } from "@denv/protocol";
import { COMPOSE_FILE_NAMES, MAX_COMPOSE_BYTES } from "@denv/spec";
import type { FetchPolicy } from "./fetch-policy.ts";
import { resolveChecked } from "./outbound-guard.ts";

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

// biome-ignore lint/suspicious/noControlCharactersInRegex: what a remote prints is stripped of them
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f]/g;

/** git's configuration for a team's repository: nothing of the server's, only http(s), no redirects. */
const GIT_CONFIG = [
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

/**
 * The environment git runs in. `authorization`: an HTTP Authorization header git sends to the
 * remote (a GitHub installation's token), given through git's environment-borne configuration so it
 * is never in a command line another process can read, nor in the URL that errors print.
 */
function gitEnv(home: string, authorization?: string): NodeJS.ProcessEnv {
  return {
    ...(authorization
      ? {
          GIT_CONFIG_COUNT: "1",
          GIT_CONFIG_KEY_0: "http.extraHeader",
          GIT_CONFIG_VALUE_0: `Authorization: ${authorization}`,
        }
      : {}),
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
  };
}

/** git with nothing of the server's configuration and only http(s) transports. */
function git(args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<Buffer> {
  const config = GIT_CONFIG;
  return new Promise((resolve, reject) => {
    execFile(
      "git",
      [...config, ...args],
      {
        encoding: "buffer",
        timeout: timeoutMs,
        maxBuffer: MAX_COMPOSE_BYTES + 64 * 1024,
        env,
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

/** A clone kept open after its files are read: its directories archived as build contexts. */
export interface GitCheckout extends GitSource {
  /**
   * A tar of one directory of the commit (a path inside the repository, already normalised), as
   * git archive writes it: links inside stay links, for the host's builder to keep in the context.
   */
  archive(path: string): Readable;
  /**
   * What `path` is in the commit, for a bind mount's seed: a folder (its tree archived), a file
   * (archived alone, by its name), or absent. A link on the way is refused, as the CLI refuses one.
   */
  seed(path: string): Promise<{ type: "file" | "directory"; tar: Readable } | null>;
  /**
   * A regular file of the commit the compose file reads (env_file, a secret's file:), as text;
   * null when absent. A link on the way or one over maxBytes is refused.
   */
  readText(path: string, maxBytes: number): Promise<string | null>;
  close(): Promise<void>;
}

export interface GitSourceOptions {
  timeoutMs?: number;
  /** The commit to read (a webhook's head); fetched alone, and checked to be what was fetched. */
  commit?: string;
  /** The branch or tag to read, when no commit is given; default: the remote's default branch. */
  ref?: string;
  /** A directory of the repository that holds the compose file: the project's root. */
  path?: string;
  /** An Authorization header for the remote (a GitHub installation token's). */
  authorization?: string;
  /** How the source is named in errors (a github: source, not its clone URL). */
  label?: string;
}

/**
 * Fetches one commit of a repository (the default branch's, a ref's, or one named; no working tree)
 * and reads the two files at the project's root (the repository's, or `path` in it).
 */
export async function openGitSource(
  remote: string,
  policy: FetchPolicy,
  options: GitSourceOptions = {},
): Promise<GitCheckout> {
  const url = checkGitUrl(remote, policy);
  const source = options.label ?? remote;
  const timeoutMs = options.timeoutMs ?? 120_000;
  if (options.commit !== undefined && !/^[0-9a-f]{40}([0-9a-f]{24})?$/.test(options.commit))
    throw new DenvError("invalid_argument", `${options.commit} is not a full commit id`);
  if (options.ref !== undefined && !isRefName(options.ref))
    throw new DenvError("invalid_argument", `${options.ref} is not a branch or tag name git takes`);
  // git resolves names itself: the name is resolved here and checked (outbound-guard.ts), and git is
  // given that address alone, so a name that answers differently a moment later gains nothing.
  const port = Number(url.port || (url.protocol === "https:" ? 443 : 80));
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const [address] = await resolveChecked(policy, host, port, `git source ${source}`);
  const pinned = [
    "-c",
    `http.curloptResolve=${url.hostname}:${port}:${isIP(address as string) === 6 ? `[${address}]` : address}`,
  ];
  const dir = await mkdtemp(join(tmpdir(), "denv-src-"));
  const home = join(dir, "home");
  const env = gitEnv(home, options.authorization);
  const repo = join(dir, "repo.git");
  const failed = (err: Error & { killed?: boolean }) => {
    throw new DenvError(
      "unavailable",
      err.killed
        ? `git fetch of ${source} did not finish within ${timeoutMs / 1000} s`
        : `git fetch of ${source} failed: ${err.message}`,
    );
  };
  try {
    const want = options.commit ?? (options.ref ? `refs/heads/${options.ref}` : undefined);
    if (want !== undefined) {
      // One commit (or one branch's head) alone: an empty bare repository fetching just it.
      await git(["init", "--quiet", "--bare", repo], env, timeoutMs);
      await git(["--git-dir", repo, "remote", "add", "origin", url.href], env, timeoutMs);
      const fetch = (w: string) =>
        git(
          [
            ...pinned,
            "--git-dir",
            repo,
            "fetch",
            "--quiet",
            "--depth",
            "1",
            "--filter=blob:none",
            "--no-tags",
            "origin",
            w,
          ],
          env,
          timeoutMs,
        );
      // A ref may be a tag rather than a branch.
      await fetch(want)
        .catch((err) =>
          options.ref && !options.commit ? fetch(`refs/tags/${options.ref}`) : Promise.reject(err),
        )
        .catch(failed);
      await git(["--git-dir", repo, "update-ref", "HEAD", "FETCH_HEAD^{commit}"], env, timeoutMs);
    } else {
      await git(
        [
          ...pinned,
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
        env,
        timeoutMs,
      ).catch(failed);
    }
    const at = (args: string[]) => git(["--git-dir", repo, ...args], env, timeoutMs);
    const commit = (await at(["rev-parse", "HEAD^{commit}"])).toString().trim();
    if (options.commit !== undefined && commit !== options.commit)
      throw new DenvError("unavailable", `${source} gave commit ${commit} for ${options.commit}`);
    // The entry at a path of the commit, each step from the root checked: a link on the way is
    // refused (as the CLI refuses one), a path through a file is absent.
    const entryAt = async (path: string, what: string, from = commit) => {
      if (path.startsWith("-") || path.includes("\0") || path.split("/").includes(".."))
        throw new DenvError("invalid_argument", `${what} is not a path inside the repository`);
      const parts = path.split("/");
      for (let i = 1; i <= parts.length; i++) {
        const prefix = parts.slice(0, i).join("/");
        const [meta = ""] = (await at(["ls-tree", "-z", from, "--", prefix])).toString("utf8").split("\t");
        const [mode = "", type = "", object = ""] = meta.split(" ");
        if (!mode) return null;
        if (mode === "120000")
          throw new DenvError(
            "invalid_argument",
            `${what}: ${prefix} is a symbolic link in ${source}; a project's files are read as they are, never through a link`,
          );
        if (i < parts.length && type !== "tree") return null;
        if (i === parts.length) return { type, object };
      }
      return null;
    };
    // The project's root: the commit's tree, or a directory of it (`#path`), itself never a link.
    let root = commit;
    if (options.path !== undefined && options.path !== ".") {
      const e = await entryAt(options.path, `the project's path ${options.path}`);
      if (e?.type !== "tree")
        throw new DenvError(
          "invalid_argument",
          `${source} has no directory ${options.path} at ${commit.slice(0, 12)}`,
        );
      root = e.object;
    }
    // The root tree: "<mode> <type> <object>\t<name>" per entry, NUL-separated.
    const entries = (await at(["ls-tree", "-z", root]))
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
    return {
      compose: (await blob(file)) as string,
      dotenv: await blob(".env"),
      commit,
      file,
      archive: (path: string) => gitArchive(repo, env, root, path, timeoutMs),
      seed: async (path: string) => {
        if (path === ".") return { type: "directory", tar: gitArchive(repo, env, root, ".", timeoutMs) };
        const e = await entryAt(path, `bind mount source ./${path}`, root);
        if (!e) return null;
        if (e.type === "tree")
          return { type: "directory", tar: gitArchive(repo, env, root, path, timeoutMs) };
        const parts = path.split("/");
        const dir = parts.slice(0, -1).join("/") || ".";
        return { type: "file", tar: gitArchive(repo, env, root, dir, timeoutMs, parts[parts.length - 1]) };
      },
      readText: async (path: string, maxBytes: number) => {
        const e = await entryAt(path, path, root);
        if (!e) return null;
        if (e.type !== "blob") throw new DenvError("invalid_argument", `${path} in ${source} is not a file`);
        const size = Number((await at(["cat-file", "-s", e.object])).toString().trim());
        if (!(size <= maxBytes))
          throw new DenvError("invalid_argument", `${path} in ${source} is over ${maxBytes} bytes`);
        return (await at(["cat-file", "blob", e.object])).toString("utf8");
      },
      close: () => rm(dir, { recursive: true, force: true }),
    };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** git archive of one tree of a commit, streamed (the clone fetches the tree's blobs as it goes). */
function gitArchive(
  repo: string,
  env: NodeJS.ProcessEnv,
  commit: string,
  path: string,
  timeoutMs: number,
  only?: string,
): Readable {
  if (path.startsWith("-") || path.includes("\0") || path.split("/").includes(".."))
    throw new DenvError("invalid_argument", `${path} is not a path inside the repository`);
  const tree = path === "." ? commit : `${commit}:${path}`;
  // `only`: one entry of that tree (a file a bind mount names), by its name.
  const member = only === undefined ? [] : ["--", `:(literal)${only}`];
  const child = spawn("git", [...GIT_CONFIG, "--git-dir", repo, "archive", "--format=tar", tree, ...member], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
    timeout: timeoutMs * 5,
  });
  const out = new PassThrough();
  let stderr = "";
  child.stderr.on("data", (c: Buffer) => {
    stderr = (stderr + c.toString("utf8")).slice(-2000);
  });
  child.stdout.pipe(out, { end: false });
  child.on("close", (code) => {
    if (code === 0) return out.end();
    const said = stderr.replace(CONTROL, "").trim().split("\n").at(-1);
    out.destroy(
      new DenvError(
        "invalid_argument",
        `the build context ${path} could not be read from the repository: ${said || `git exited ${code}`}`,
      ),
    );
  });
  child.on("error", (err) => out.destroy(err));
  // A reader that gave up (a context over its limit) stops git too.
  out.on("close", () => {
    if (child.exitCode === null) child.kill("SIGKILL");
  });
  return out;
}

/** A branch or tag name as git's check-ref-format takes it (no `..`, control characters, `~^:?*[\\`). */
export function isRefName(name: string): boolean {
  return (
    name.length > 0 &&
    name.length <= 255 &&
    !name.startsWith("-") &&
    !name.startsWith("/") &&
    !name.endsWith("/") &&
    !name.endsWith(".") &&
    !name.endsWith(".lock") &&
    !name.includes("..") &&
    !name.includes("@{") &&
    !name.includes("//") &&
    // biome-ignore lint/suspicious/noControlCharactersInRegex: refused in a ref name
    !/[\u0000-\u0020\u007f~^:?*[\\]/.test(name)
  );
}
