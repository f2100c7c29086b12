/**
 * The project's own files a compose file bind-mounts (`./nginx/nginx.conf:/etc/nginx/nginx.conf:ro`,
 * `./src:/code`), packed as the host will seed the mount's dataset with them. Read as the project's
 * other files are: inside the project, never through a symbolic link on the way. Inside a mounted
 * folder, links stay links (as the container would see them) but only ones that stay inside it;
 * sockets, FIFOs and devices are refused, since a copy of them is not what the mount showed. The
 * files keep their owner, mode and time, as the host's folder would show them.
 */
import { lstatSync, readdirSync, readlinkSync, type Stats } from "node:fs";
import { join, posix } from "node:path";
import { DenvError } from "@denv/protocol";
import { type Entry, packEntries } from "./build-context.ts";

/** What one project mount may hold, as the server keeps one upload (its build-context limit). */
export const MAX_MOUNT_BYTES = 2 * 1024 ** 3;

export interface PackedMount {
  /** A temporary file holding the tar. */
  file: string;
  digest: string;
  bytes: number;
  entries: number;
  type: "file" | "directory";
  /** true when the source did not exist: an empty folder, as Compose makes for a short mount. */
  missing: boolean;
}

function refuse(message: string): never {
  throw new DenvError("spec_invalid", message);
}

function kindOf(st: Stats): string {
  if (st.isSocket()) return "a socket";
  if (st.isFIFO()) return "a FIFO";
  if (st.isBlockDevice() || st.isCharacterDevice()) return "a device";
  return "not a file, folder or link";
}

const owned = (st: Stats) => ({ uid: st.uid, gid: st.gid, mtime: st.mtime, mode: st.mode & 0o7777 });

/**
 * Packs the project path `rel` (normalised, inside the project: the spec checked it) of the
 * project directory `dir`. A file packs as one entry named after it; a folder as its contents.
 */
export async function packProjectMount(
  dir: string,
  rel: string,
  limitBytes = MAX_MOUNT_BYTES,
): Promise<PackedMount> {
  const shown = rel === "." ? "the project directory" : `./${rel}`;
  const parts = rel === "." ? [] : rel.split("/");
  if (parts.includes("..") || rel.startsWith("/")) refuse(`${shown} is outside the project`);
  let at = dir;
  let st = lstatSync(dir);
  for (const part of parts) {
    at = join(at, part);
    try {
      st = lstatSync(at);
    } catch {
      // Compose makes a missing source folder on the host for a short mount: an empty folder here.
      const packed = await packEntries(dir, []);
      return { ...packed, entries: 0, type: "directory", missing: true };
    }
    if (st.isSymbolicLink())
      refuse(
        `bind mount source ${shown}: ${at} is a symbolic link; a project's files are mounted as they are in it, never through a link`,
      );
  }
  if (st.isFile()) {
    if (st.size > limitBytes) refuse(tooLarge(shown, st.size, limitBytes));
    const name = posix.basename(rel);
    const packed = await packEntries(join(at, ".."), [
      { rel: name, kind: "file", size: st.size, ...owned(st) },
    ]);
    return { ...packed, entries: 1, type: "file", missing: false };
  }
  if (!st.isDirectory())
    refuse(`bind mount source ${shown} is ${kindOf(st)}; only files and folders are mounted`);
  const entries: Entry[] = [];
  let total = 0;
  const visit = (sub: string) => {
    for (const name of readdirSync(join(at, sub)).sort()) {
      const r = sub ? `${sub}/${name}` : name;
      const s = lstatSync(join(at, r));
      // Each entry costs a header besides its content.
      total += 512;
      if (s.isSymbolicLink()) {
        const link = readlinkSync(join(at, r));
        const to = posix.normalize(posix.join(posix.dirname(r), link));
        if (link.startsWith("/") || to === ".." || to.startsWith("../"))
          refuse(
            `bind mount source ${shown}: the link ${JSON.stringify(r)} → ${JSON.stringify(link)} points outside it; the host's files are not part of the project`,
          );
        entries.push({ rel: r, kind: "symlink", size: 0, link, ...owned(s), mode: 0o777 });
      } else if (s.isDirectory()) {
        entries.push({ rel: r, kind: "directory", size: 0, ...owned(s) });
        visit(r);
      } else if (s.isFile()) {
        total += s.size;
        if (total > limitBytes) refuse(tooLarge(shown, total, limitBytes));
        entries.push({ rel: r, kind: "file", size: s.size, ...owned(s) });
      } else
        refuse(
          `bind mount source ${shown}: ${JSON.stringify(r)} is ${kindOf(s)}; only files, folders and links inside it are mounted`,
        );
    }
  };
  visit("");
  const count = entries.length;
  // The folder's own owner and mode, as a bind mount shows them: the seed's root entry ("./").
  entries.unshift({ rel: ".", kind: "directory", size: 0, ...owned(st) });
  const packed = await packEntries(at, entries);
  return { ...packed, entries: count, type: "directory", missing: false };
}

function tooLarge(shown: string, bytes: number, limitBytes: number): string {
  const gib = (n: number) => `${(n / 1024 ** 3).toFixed(1)} GiB`;
  return `bind mount source ${shown} holds more than ${gib(limitBytes)} (${gib(bytes)} so far), the most one upload may carry; put large data in a named volume filled by a warm command, or in the image`;
}
