/**
 * A sandbox's files, as its service's user unless `user` names another: whole files read and
 * written (as one-file tars underneath), tars of trees, and stat, list, mkdir, remove, rename.
 * A write makes missing parents; it never replaces a directory with a file, nor a file with a
 * directory (ConflictError, code is_directory / not_a_directory).
 */
import { posix } from "node:path";
import tar from "tar-stream";
import type { DenvClient } from "./client.ts";
import { NotFoundError } from "./errors.ts";
import type { Operations } from "./schema.gen.ts";

/** A path as its user saw it: type, size, mode, owner, group, modified_at, link_target. */
export type FileEntry = Operations["getV1EnvsByIdFilesStat"]["response"];

/** Where a file operation happens, and as whom. */
export interface FileOptions {
  /** The service (default: the agent's, else the first). */
  service?: string;
  /** Who reads or writes (default: the service's own user). */
  user?: string;
}

const who = (o: FileOptions) => ({
  ...(o.service ? { service: o.service } : {}),
  ...(o.user ? { user: o.user } : {}),
});

async function collect(stream: AsyncIterable<unknown>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c as Uint8Array));
  return Buffer.concat(chunks);
}

/** A sandbox's files (`sandbox.files`), as its service's user unless `user` names another. */
export class Files {
  private readonly client: DenvClient;
  private readonly id: string;

  constructor(client: DenvClient, id: string) {
    this.client = client;
    this.id = id;
  }

  /** A file's bytes. */
  async read(path: string, options: FileOptions = {}): Promise<Uint8Array> {
    const archive = await this.getTar(path, options);
    const extract = tar.extract();
    let found: Buffer | null = null;
    extract.on("entry", (header, stream, next) => {
      void collect(stream).then((data) => {
        if (found === null && (header.type === "file" || header.type === "contiguous-file")) found = data;
        next();
      });
    });
    await new Promise<void>((resolve, reject) => {
      extract.on("finish", resolve);
      extract.on("error", reject);
      extract.end(Buffer.from(archive));
    });
    if (found === null) throw new NotFoundError("not_found", `${path} is not a regular file`, 404);
    return found;
  }

  /** A file's text (UTF-8). */
  async readText(path: string, options: FileOptions = {}): Promise<string> {
    return Buffer.from(await this.read(path, options)).toString("utf8");
  }

  /** Writes a file (made, or overwritten), with `mode` (default 0644), making missing parents. */
  async write(
    path: string,
    data: string | Uint8Array,
    options: FileOptions & { mode?: number } = {},
  ): Promise<void> {
    if (!posix.isAbsolute(path) || path.endsWith("/"))
      throw new TypeError(`${path} must be an absolute path to a file`);
    const pack = tar.pack();
    pack.entry({ name: posix.basename(path), mode: options.mode ?? 0o644 }, Buffer.from(data));
    pack.finalize();
    await this.putTar(posix.dirname(path), await collect(pack), options);
  }

  /** Extracts a tar at a directory. */
  async putTar(
    dir: string,
    archive: Uint8Array,
    options: FileOptions = {},
  ): Promise<{ entries: number; bytes: number }> {
    return this.client.call("putV1EnvsByIdFiles", {
      params: { id: this.id },
      query: { path: dir, ...who(options) },
      body: new Uint8Array(archive),
    });
  }

  /** A tar of a path (a file, or a directory and all it holds), read without following links. */
  async getTar(path: string, options: FileOptions = {}): Promise<Uint8Array> {
    return this.client.call("getV1EnvsByIdFiles", {
      params: { id: this.id },
      query: { path, ...who(options) },
    });
  }

  /** A path's type, size, mode, owner and time; a link is reported as a link. */
  async stat(path: string, options: FileOptions = {}): Promise<FileEntry> {
    return this.client.call("getV1EnvsByIdFilesStat", {
      params: { id: this.id },
      query: { path, ...who(options) },
    });
  }

  /** Whether a path exists (as the user sees it). */
  async exists(path: string, options: FileOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, options);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  /** A directory's entries, `depth` levels down (default 1); links are listed, not entered. */
  async list(path: string, options: FileOptions & { depth?: number } = {}): Promise<FileEntry[]> {
    const r = await this.client.call("getV1EnvsByIdFilesList", {
      params: { id: this.id },
      query: { path, depth: String(options.depth ?? 1), ...who(options) },
    });
    return r.entries;
  }

  /** Makes a directory and its parents; false when it was already there. */
  async mkdir(path: string, options: FileOptions = {}): Promise<boolean> {
    const r = await this.client.call("postV1EnvsByIdFilesMkdir", {
      params: { id: this.id },
      body: { path, ...who(options) },
    });
    return r.created;
  }

  /** Removes a file, a link or an empty directory; `recursive` removes a whole tree (following no link). */
  async remove(path: string, options: FileOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.client.call("deleteV1EnvsByIdFiles", {
      params: { id: this.id },
      query: { path, ...(options.recursive ? { recursive: "true" } : {}), ...who(options) },
    });
  }

  /** Renames or moves a path. */
  async rename(from: string, to: string, options: FileOptions = {}): Promise<void> {
    await this.client.call("postV1EnvsByIdFilesRename", {
      params: { id: this.id },
      body: { from, to, ...who(options) },
    });
  }
}
