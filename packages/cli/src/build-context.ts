/**
 * A build context as the CLI uploads it: a tar of the context directory with .dockerignore applied
 * (Docker's own rules, from @balena/dockerignore), the Dockerfile and .dockerignore always kept as
 * Docker keeps them. The tar is made the same way each time (entries sorted, owner 0:0, times
 * zeroed), so an unchanged directory has the same sha256 and uploads, and builds, nothing again.
 * Links are archived as links, never followed; sockets, FIFOs and devices are left out and said.
 */
import { createHash } from "node:crypto";
import {
  constants,
  createReadStream,
  createWriteStream,
  lstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
} from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, posix } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import tar from "tar-stream";

// A CommonJS module whose types say ESM default: loaded as what it is.
const ignore = createRequire(import.meta.url)(
  "@balena/dockerignore",
) as typeof import("@balena/dockerignore").default;

export interface PackedContext {
  /** A temporary file holding the tar. */
  file: string;
  digest: string;
  bytes: number;
  entries: number;
  /** Paths left out because they are not files, directories or links. */
  skipped: string[];
}

export interface Entry {
  rel: string;
  kind: "file" | "directory" | "symlink";
  mode: number;
  size: number;
  link?: string;
  /** Owner and time as they are on disk; left out, 0:0 at time zero. */
  uid?: number;
  gid?: number;
  mtime?: Date;
}

function walk(root: string, keep: (rel: string) => boolean, skipped: string[]): Entry[] {
  const out: Entry[] = [];
  const visit = (rel: string) => {
    const names = readdirSync(join(root, rel)).sort();
    for (const name of names) {
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(root, r));
      if (!keep(r)) {
        // A directory left out may still hold a file an exception (!path) brings back.
        if (st.isDirectory()) {
          const inner: Entry[] = [];
          const before = out.length;
          visit(r);
          inner.push(...out.splice(before));
          if (inner.length)
            out.push({ rel: r, kind: "directory", mode: st.mode & 0o7777, size: 0 }, ...inner);
        }
        continue;
      }
      if (st.isSymbolicLink())
        out.push({ rel: r, kind: "symlink", mode: 0o777, size: 0, link: readlinkSync(join(root, r)) });
      else if (st.isDirectory()) {
        out.push({ rel: r, kind: "directory", mode: st.mode & 0o7777, size: 0 });
        visit(r);
      } else if (st.isFile()) out.push({ rel: r, kind: "file", mode: st.mode & 0o7777, size: st.size });
      else skipped.push(r);
    }
  };
  visit("");
  return out;
}

/** Packs `dir` for a build with `dockerfile` (relative to it) into a temporary tar file. */
export async function packContext(dir: string, dockerfile: string): Promise<PackedContext> {
  let patterns: string[] = [];
  try {
    patterns = readFileSync(join(dir, ".dockerignore"), "utf8")
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith("#"));
  } catch {}
  const ig = ignore().add(patterns);
  const always = new Set([posix.normalize(dockerfile), ".dockerignore"]);
  const keep = (rel: string) => always.has(rel) || !ig.ignores(rel);
  const skipped: string[] = [];
  const entries = walk(dir, keep, skipped);
  const packed = await packEntries(dir, entries);
  return { ...packed, entries: entries.length, skipped };
}

/**
 * Writes `entries` (paths relative to `root`, in order) to a temporary tar file, hashing it as it
 * goes. Without their own owner and time, entries are 0:0 at time zero, so a tree packs the same
 * way each time.
 */
export async function packEntries(
  root: string,
  entries: Entry[],
): Promise<{ file: string; digest: string; bytes: number }> {
  const file = join(await mkdtemp(join(tmpdir(), "denv-context-")), "context.tar");
  const pack = tar.pack();
  const hash = createHash("sha256");
  let bytes = 0;
  const writing = pipeline(
    pack as unknown as Readable,
    async function* (src: AsyncIterable<Buffer>) {
      for await (const chunk of src) {
        hash.update(chunk);
        bytes += chunk.length;
        yield chunk;
      }
    },
    createWriteStream(file),
  );
  for (const e of entries) {
    const fixed = {
      uid: e.uid ?? 0,
      gid: e.gid ?? 0,
      uname: "",
      gname: "",
      mtime: e.mtime ?? new Date(0),
      mode: e.mode,
    };
    if (e.kind === "directory") pack.entry({ name: `${e.rel}/`, type: "directory", ...fixed });
    else if (e.kind === "symlink")
      pack.entry({ name: e.rel, type: "symlink", linkname: e.link as string, ...fixed });
    else {
      await new Promise<void>((resolve, reject) => {
        const sink = pack.entry({ name: e.rel, type: "file", size: e.size, ...fixed }, (err) =>
          err ? reject(err) : resolve(),
        );
        // O_NOFOLLOW: a file swapped for a link since the walk is refused, not followed.
        pipeline(
          createReadStream("", {
            fd: openSync(join(root, e.rel), constants.O_RDONLY | constants.O_NOFOLLOW),
          }),
          sink,
        ).catch(reject);
      });
    }
  }
  pack.finalize();
  await writing;
  return { file, digest: `sha256:${hash.digest("hex")}`, bytes };
}
