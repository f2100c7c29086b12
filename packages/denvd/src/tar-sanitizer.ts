/**
 * Checks a tar stream before it reaches a container: entries must stay inside the directory they
 * are extracted to. Refused: absolute names, `..` components, NUL bytes, hard or symbolic links
 * whose target leaves the tree, entries (and hard links) that go through a symbolic link an earlier
 * entry made (a chain `a/b -> ..`, `a/b/c -> ..`, then `a/b/c/FILE` would land outside), entries
 * that replace such a link, and device, FIFO or other special entries. setuid and setgid bits are
 * dropped: an upload gives no one new powers. The checked entries are re-packed into a new tar
 * that is safe to hand to the engine.
 */
import { posix } from "node:path";
import type { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenvError } from "@denv/protocol";
import tar from "tar-stream";

function refuse(message: string): never {
  throw new DenvError("invalid_argument", `bad tar: ${message}`);
}

/** The normalised relative name of an entry, or a refusal. */
export function checkEntryName(name: string): string {
  if (name.includes("\0")) refuse(`entry name holds a NUL byte: ${JSON.stringify(name)}`);
  if (name.startsWith("/")) refuse(`absolute entry name ${name}`);
  if (name.split("/").includes("..")) refuse(`entry name with "..": ${name}`);
  const normalized = posix.normalize(name);
  if (normalized.startsWith("..")) refuse(`entry escapes the target: ${name}`);
  return normalized;
}

function checkLink(entryName: string, linkname: string, kind: "symlink" | "link"): void {
  if (linkname.includes("\0")) refuse(`link target holds a NUL byte in ${entryName}`);
  if (linkname.startsWith("/")) refuse(`${kind} ${entryName} points to an absolute path ${linkname}`);
  const base = kind === "symlink" ? posix.dirname(entryName) : ".";
  const resolved = posix.normalize(posix.join(base, linkname));
  if (resolved === ".." || resolved.startsWith("../"))
    refuse(`${kind} ${entryName} → ${linkname} escapes the target`);
}

/** Reads `input`, checks every entry, and writes a re-packed tar to `output`. Rejects on the first bad entry. */
export async function sanitizeTar(
  input: Readable,
  output: Writable,
  options: {
    /**
     * A volume's symbolic links are its data (a replica's tar): kept whatever they point at, since
     * no entry may pass through one anyway. An upload's must stay inside the tree.
     */
    linksAreData?: boolean;
  } = {},
): Promise<{ entries: number; bytes: number }> {
  const extract = tar.extract();
  const pack = tar.pack();
  let entries = 0;
  let bytes = 0;
  // Errors reach the caller through the pipelines below; these keep a late duplicate of the same
  // error (streamx emits it again on destroy) from surfacing as an uncaught exception.
  extract.on("error", () => {});
  pack.on("error", () => {});
  const packed = pipeline(pack, output);
  // Names of the symbolic links this tar made: nothing may pass through or replace one.
  const links = new Set<string>();
  const throughLink = (name: string): string | undefined => {
    const parts = name.split("/");
    for (let i = 1; i <= parts.length; i++) {
      const prefix = parts.slice(0, i).join("/");
      if (links.has(prefix)) return prefix;
    }
    return undefined;
  };
  extract.on("entry", (header, stream, next) => {
    stream.on("error", () => {}); // a refused entry's stream is destroyed with the refusal
    try {
      const name = checkEntryName(header.name);
      const via = throughLink(name);
      if (via) refuse(`${name} goes through (or replaces) the symbolic link ${via} made earlier in the tar`);
      if (header.type === "symlink") {
        if (options.linksAreData) {
          if ((header.linkname ?? "").includes("\0")) refuse(`link target holds a NUL byte in ${name}`);
        } else checkLink(name, header.linkname ?? "", "symlink");
        links.add(name);
      } else if (header.type === "link") {
        checkLink(name, header.linkname ?? "", "link");
        const target = throughLink(posix.normalize(header.linkname ?? ""));
        if (target) refuse(`hard link ${name} points through the symbolic link ${target}`);
      } else if (header.type !== "file" && header.type !== "directory" && header.type !== "contiguous-file") {
        refuse(`${name} is a ${header.type}; only files, directories and links inside the tree are accepted`);
      }
      entries++;
      bytes += header.size ?? 0;
      const mode = (header.mode ?? (header.type === "directory" ? 0o755 : 0o644)) & ~0o6000;
      const out = pack.entry({ ...header, name, mode }, (err) => next(err ?? undefined));
      // A tar cut off mid-entry (its sender gone) fails through the pipelines; not here as well.
      out.on("error", () => {});
      stream.pipe(out);
    } catch (err) {
      stream.resume();
      next(err as Error);
    }
  });
  try {
    await pipeline(input, extract);
  } catch (err) {
    pack.destroy();
    await packed.catch(() => {});
    if (err instanceof DenvError) throw err;
    throw new DenvError("invalid_argument", `bad tar: ${(err as Error).message}`, { cause: err });
  }
  pack.finalize();
  await packed;
  return { entries, bytes };
}
