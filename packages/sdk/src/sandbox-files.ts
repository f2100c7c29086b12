/**
 * A sandbox's files, as its service's user unless `user` names another: whole files read and
 * written (as one-file tars underneath), tars of trees, and stat, list, mkdir, remove, rename.
 * A write makes missing parents; it never replaces a directory with a file, nor a file with a
 * directory (ConflictError, code is_directory / not_a_directory).
 */
import { posix } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
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

async function collect(stream: AsyncIterable<unknown> | ReadableStream<Uint8Array>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of stream as AsyncIterable<unknown>) chunks.push(Buffer.from(c as Uint8Array));
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
    return collect(await this.readStream(path, options));
  }

  /**
   * A file's bytes as a stream, as the host reads them: a file of any size, in little memory. A
   * missing path (NotFoundError) or one that is not a regular file is thrown before the first byte.
   */
  async readStream(path: string, options: FileOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const archive = Readable.fromWeb(
      (await this.client.getTar(this.id, { path, ...who(options) })) as NodeReadableStream<Uint8Array>,
    );
    const extract = tar.extract();
    return new Promise((resolve, reject) => {
      let handed = false;
      extract.on("entry", (header, stream, next) => {
        stream.on("end", () => next());
        if (!handed && (header.type === "file" || header.type === "contiguous-file")) {
          handed = true;
          resolve(ReadableStream.from(stream as unknown as AsyncIterable<Uint8Array>));
        } else stream.resume();
      });
      extract.on("finish", () => {
        if (!handed) reject(new NotFoundError("not_found", `${path} is not a regular file`, 404));
      });
      pipeline(archive, extract).catch(reject);
    });
  }

  /** A file's text (UTF-8). */
  async readText(path: string, options: FileOptions = {}): Promise<string> {
    return Buffer.from(await this.read(path, options)).toString("utf8");
  }

  /**
   * Writes a file (made, or overwritten), with `mode` (default 0644), making missing parents.
   * `data` may be a stream (a ReadableStream or any async iterable of bytes), sent as it is read;
   * a stream's `size` must be given (the tar it travels in says it first).
   */
  async write(
    path: string,
    data: string | Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
    options: FileOptions & { mode?: number; size?: number } = {},
  ): Promise<void> {
    if (!posix.isAbsolute(path) || path.endsWith("/"))
      throw new TypeError(`${path} must be an absolute path to a file`);
    const pack = tar.pack();
    const header = { name: posix.basename(path), mode: options.mode ?? 0o644 };
    if (typeof data === "string" || data instanceof Uint8Array) {
      pack.entry(header, Buffer.from(data));
      pack.finalize();
    } else {
      if (options.size === undefined || !Number.isSafeInteger(options.size) || options.size < 0)
        throw new TypeError("a stream is written with its size: write(path, stream, { size })");
      const entry = pack.entry({ ...header, size: options.size }, (err) => {
        if (err) pack.destroy(err);
        else pack.finalize();
      });
      pipeline(Readable.from(data as AsyncIterable<Uint8Array>), entry).catch((err: Error) =>
        pack.destroy(err),
      );
    }
    await this.putTar(posix.dirname(path), pack as unknown as AsyncIterable<Uint8Array>, options);
  }

  /** Extracts a tar at a directory; the tar may be a stream (sent as it is made). */
  async putTar(
    dir: string,
    archive: Uint8Array | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
    options: FileOptions = {},
  ): Promise<{ entries: number; bytes: number }> {
    return this.client.putTar(this.id, { path: dir, ...who(options) }, archive);
  }

  /** A tar of a path (a file, or a directory and all it holds), read without following links. */
  async getTar(path: string, options: FileOptions = {}): Promise<Uint8Array> {
    return collect(await this.getTarStream(path, options));
  }

  /** The same tar, as a stream. */
  async getTarStream(path: string, options: FileOptions = {}): Promise<ReadableStream<Uint8Array>> {
    return this.client.getTar(this.id, { path, ...who(options) });
  }

  /** A path's type, size, mode, owner and time; a link is reported as a link. */
  async stat(path: string, options: FileOptions = {}): Promise<FileEntry> {
    return this.client.files.stat(this.id, { query: { path, ...who(options) } });
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
    const r = await this.client.files.list(this.id, {
      query: { path, depth: String(options.depth ?? 1), ...who(options) },
    });
    return r.entries;
  }

  /** Makes a directory and its parents; false when it was already there. */
  async mkdir(path: string, options: FileOptions = {}): Promise<boolean> {
    const r = await this.client.files.mkdir(this.id, { path, ...who(options) });
    return r.created;
  }

  /** Removes a file, a link or an empty directory; `recursive` removes a whole tree (following no link). */
  async remove(path: string, options: FileOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.client.files.remove(this.id, {
      query: { path, ...(options.recursive ? { recursive: "true" } : {}), ...who(options) },
    });
  }

  /** Renames or moves a path. */
  async rename(from: string, to: string, options: FileOptions = {}): Promise<void> {
    await this.client.files.rename(this.id, { from, to, ...who(options) });
  }
}
