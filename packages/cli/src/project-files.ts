/**
 * Reading a local project's own files (its compose file, `.env`, env_file and friends) as the
 * server reads a git source's: regular files only, named inside the project, never through a
 * symbolic link. A hostile checkout's `.env -> ~/.aws/credentials` would otherwise carry a file of
 * the user's machine into a deployment.
 */
import { closeSync, constants, fstatSync, lstatSync, openSync, readSync } from "node:fs";
import { isAbsolute, join, normalize, sep } from "node:path";
import { DenvError } from "@denv/protocol";

/** A project file larger than this is refused (compose files and .env files are small). */
export const MAX_PROJECT_FILE_BYTES = 4 * 1024 * 1024;

/**
 * The text of `rel` inside the project directory `dir`, or undefined when there is no such file.
 * A link anywhere on the way, a name outside the project or anything but a regular file is refused
 * with what it was and where.
 */
export function readProjectFile(
  dir: string,
  rel: string,
  maxBytes = MAX_PROJECT_FILE_BYTES,
): string | undefined {
  const clean = normalize(rel);
  if (isAbsolute(clean) || clean === ".." || clean.startsWith(`..${sep}`))
    throw new DenvError(
      "spec_invalid",
      `${rel} is outside the project (${dir}): a project reads only its own files`,
    );
  const parts = clean.split(sep).filter((p) => p && p !== ".");
  let at = dir;
  for (const [i, part] of parts.entries()) {
    at = join(at, part);
    let st: ReturnType<typeof lstatSync>;
    try {
      st = lstatSync(at);
    } catch {
      return undefined;
    }
    if (st.isSymbolicLink())
      throw new DenvError(
        "spec_invalid",
        `${at} is a symbolic link: a project's files are read as regular files, never through a link`,
      );
    if (i < parts.length - 1 && !st.isDirectory()) return undefined;
  }
  // O_NOFOLLOW: a link swapped in since the walk above is refused by the kernel (ELOOP).
  let fd: number;
  try {
    fd = openSync(at, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return undefined;
    if (code === "ELOOP")
      throw new DenvError(
        "spec_invalid",
        `${at} is a symbolic link: a project's files are read as regular files`,
      );
    throw err;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new DenvError("spec_invalid", `${at} is not a regular file`);
    if (st.size > maxBytes)
      throw new DenvError("spec_invalid", `${at} is ${st.size} bytes; at most ${maxBytes} are read`);
    const buf = Buffer.alloc(st.size);
    let got = 0;
    while (got < buf.length) {
      const n = readSync(fd, buf, got, buf.length - got, got);
      if (n === 0) break;
      got += n;
    }
    return buf.subarray(0, got).toString("utf8");
  } finally {
    closeSync(fd);
  }
}
