/**
 * The digest of a volume's state, for replay reports: every entry under the dataset's path, by
 * its path, type, permission bits, owner, size and content (a link by its target text, never
 * followed). Times and inode numbers are left out: the kernel stamps files with the real clock and
 * a fork's inodes are its own, and neither is the state a grader reads. The tree is a container's
 * writing: it is walked without following a link, each file opened O_NOFOLLOW relative to the
 * checked directory, within a budget of entries.
 */
import { createHash } from "node:crypto";
import { constants } from "node:fs";
import { lstat, open, opendir, readlink } from "node:fs/promises";
import { join } from "node:path";
import { DenvError } from "@denv/protocol";

export interface LeftOutRule {
  test: (path: string) => boolean;
  why: string;
}

/**
 * What PostgreSQL itself leaves out of a base backup (its basebackup.c), and its WAL: the state is
 * read after a CHECKPOINT, so the tables hold it and redo starts at that checkpoint. What is left
 * out differs between identical runs for reasons that are not the data: relation-cache files hold
 * the process's memory addresses (ASLR), the WAL's full-page images carry hint bits set by
 * whichever background process read a catalog first, and the rest is per-process runtime state.
 */
export const POSTGRES_LEFT_OUT: LeftOutRule[] = [
  {
    test: (p) => p === "pg_wal" || p.startsWith("pg_wal/"),
    why: "pg_wal/: the WAL (read after a CHECKPOINT)",
  },
  {
    test: (p) => p === "pg_internal.init" || p.endsWith("/pg_internal.init"),
    why: "pg_internal.init: relation-cache files",
  },
  { test: (p) => p === "postmaster.pid" || p === "postmaster.opts", why: "postmaster.pid, postmaster.opts" },
  {
    test: (p) =>
      /^(pg_stat_tmp|pg_replslot|pg_dynshmem|pg_notify|pg_serial|pg_snapshots|pg_subtrans)\//.test(p),
    why: "the contents of pg_stat_tmp, pg_replslot, pg_dynshmem, pg_notify, pg_serial, pg_snapshots, pg_subtrans",
  },
];

/** The rules for a volume: PostgreSQL's when it is a data directory (PG_VERSION at its root). */
export async function leftOutFor(root: string): Promise<LeftOutRule[]> {
  const st = await lstat(join(root, "PG_VERSION")).catch(() => null);
  return st?.isFile() ? POSTGRES_LEFT_OUT : [];
}

export interface TreeDigest {
  /** sha256 of every entry's line, in path order. */
  digest: string;
  files: number;
  bytes: number;
  /** Path → the digest of its entry line, for finding what differs; only the first maxListed. */
  entries: [string, string][];
  listed_all: boolean;
  /** What the digest leaves out, and why: an engine's bookkeeping that is not the data. */
  left_out: string[];
}

export interface DigestLimits {
  /** Entries (files, directories, links) a volume may hold for its digest (default 500,000). */
  maxEntries?: number;
  /** Entries listed by path in the answer (default 20,000). */
  maxListed?: number;
}

const typeOf = (st: import("node:fs").Stats) =>
  st.isFile()
    ? "f"
    : st.isDirectory()
      ? "d"
      : st.isSymbolicLink()
        ? "l"
        : st.isFIFO()
          ? "p"
          : st.isSocket()
            ? "s"
            : st.isCharacterDevice()
              ? "c"
              : "b";

/** A file's sha256, read through `buf` (the caller's, reused: only what each read filled is hashed). */
async function fileSha256(path: string, buf: Buffer): Promise<{ sha: string; bytes: number }> {
  // O_NOFOLLOW: a name swapped for a link after the lstat is refused, not followed; O_NONBLOCK:
  // a name swapped for a FIFO does not hang the walk.
  const fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw new DenvError("conflict", `${path} changed while it was digested`);
    const h = createHash("sha256");
    let bytes = 0;
    for (;;) {
      const { bytesRead } = await fh.read(buf, 0, buf.length, null);
      if (bytesRead === 0) break;
      h.update(buf.subarray(0, bytesRead));
      bytes += bytesRead;
    }
    return { sha: h.digest("hex"), bytes };
  } finally {
    await fh.close();
  }
}

export async function digestTree(root: string, limits: DigestLimits = {}): Promise<TreeDigest> {
  const maxEntries = limits.maxEntries ?? 500_000;
  const maxListed = limits.maxListed ?? 20_000;
  const total = createHash("sha256");
  const entries: [string, string][] = [];
  let count = 0;
  let files = 0;
  let bytes = 0;
  const rules = await leftOutFor(root);
  const used = new Set<string>();
  // One read buffer for the whole walk (files are read one after another): a zeroed MiB per file
  // cost a PostgreSQL volume of a thousand 8 KiB files a GiB of memset and the collector's time.
  const buf = Buffer.allocUnsafe(1024 * 1024);
  // Depth first, names sorted byte-wise: the same tree gives the same order on every host.
  const walk = async (rel: string): Promise<void> => {
    const dir = await opendir(join(root, rel));
    const names: string[] = [];
    for await (const d of dir) names.push(d.name);
    names.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    for (const name of names) {
      if (++count > maxEntries)
        throw new DenvError(
          "payload_too_large",
          `the volume holds more than ${maxEntries} entries: too many to digest`,
        );
      const path = rel ? `${rel}/${name}` : name;
      const rule = rules.find((r) => r.test(path));
      if (rule) {
        used.add(rule.why);
        continue;
      }
      const abs = join(root, path);
      const st = await lstat(abs);
      const type = typeOf(st);
      let content = "-";
      if (type === "f") {
        const f = await fileSha256(abs, buf);
        content = f.sha;
        files++;
        bytes += f.bytes;
      } else if (type === "l") content = `-> ${JSON.stringify(await readlink(abs))}`;
      else if (type === "c" || type === "b") content = `dev ${st.rdev}`;
      const line = `${type} ${(st.mode & 0o7777).toString(8)} ${st.uid}:${st.gid} ${type === "f" ? st.size : 0} ${content} ${JSON.stringify(path)}\n`;
      total.update(line);
      if (entries.length < maxListed)
        entries.push([path, createHash("sha256").update(line).digest("hex").slice(0, 16)]);
      if (type === "d") await walk(path);
    }
  };
  await walk("");
  return {
    digest: total.digest("hex"),
    files,
    bytes,
    entries,
    listed_all: count <= maxListed,
    left_out: rules.filter((r) => used.has(r.why)).map((r) => r.why),
  };
}
