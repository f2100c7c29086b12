/**
 * Build contexts a team uploaded with a local project: tars kept by their sha256 under the team's
 * own directory (a team can neither read nor learn of another's), written to a temporary file and
 * renamed only once their digest matched what the client said, so a cut or forged upload never
 * stands in for a context. They are kept for the host to build from; the host's build cache is
 * what makes a second deploy of an unchanged context build nothing.
 */
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, readdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { PassThrough, type Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenvError } from "@denv/protocol";
import tar from "tar-stream";
import { newId } from "./ids.ts";

/** A context's name: sha256: and 64 hex digits. */
export const CONTEXT_DIGEST = /^sha256:[0-9a-f]{64}$/;
export const DEFAULT_CONTEXT_LIMIT_BYTES = 2 * 1024 ** 3;
/** How long an unreferenced context is kept: an upload whose source is not sent yet is not lost. */
export const CONTEXT_GRACE_MS = 3600_000;
/** What one team may keep stored here (contexts and git archives together), by default. */
export const DEFAULT_TEAM_QUOTA_BYTES = 10 * 1024 ** 3;

export class BuildContexts {
  readonly dir: string;
  readonly limitBytes: number;
  readonly teamQuotaBytes: number;
  /** Bytes of uploads still arriving, per team: counted against the quota as they come. */
  private readonly arriving = new Map<string, number>();
  /**
   * Where a context missing here may be (the other server replicas, which each keep the uploads
   * they took): each answers with a stream of it in turn. What comes is checked against its
   * digest as an upload is; one that is not the context is dropped and the next is read.
   */
  fromPeers: ((teamId: string, digest: string) => AsyncIterable<Readable>) | null = null;

  constructor(
    dataDir: string,
    limitBytes = DEFAULT_CONTEXT_LIMIT_BYTES,
    teamQuotaBytes = DEFAULT_TEAM_QUOTA_BYTES,
  ) {
    this.dir = join(dataDir, "build-contexts");
    this.limitBytes = limitBytes;
    this.teamQuotaBytes = teamQuotaBytes;
  }

  /** The bytes the team's stored contexts take. */
  async usedBytes(teamId: string): Promise<number> {
    const dir = join(this.dir, teamId);
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return 0;
      throw err;
    }
    let total = 0;
    for (const name of names)
      if (name.endsWith(".tar")) total += (await stat(join(dir, name)).catch(() => null))?.size ?? 0;
    return total;
  }

  /** The teams with anything stored. */
  async teams(): Promise<string[]> {
    try {
      return (await readdir(this.dir)).filter((n) => /^[a-z]+_[0-9a-zA-Z]+$/.test(n));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw err;
    }
  }

  private path(teamId: string, digest: string): string {
    if (!CONTEXT_DIGEST.test(digest))
      throw new DenvError("invalid_argument", `${digest} is not a sha256: digest`);
    if (!/^[a-z]+_[0-9a-zA-Z]+$/.test(teamId)) throw new Error(`bad team id ${teamId}`);
    return join(this.dir, teamId, `${digest.slice(7)}.tar`);
  }

  /**
   * The context's size, or null when the team has no such context: one another replica took is
   * copied here first (and is then here for `open`).
   */
  async size(teamId: string, digest: string): Promise<number | null> {
    const local = await this.storedSize(teamId, digest);
    if (local !== null || !this.fromPeers) return local;
    for await (const body of this.fromPeers(teamId, digest)) {
      try {
        return await this.put(teamId, digest, body);
      } catch {
        // cut, or not what it was named: the next peer
      }
    }
    return null;
  }

  /** The context's size here, on this replica's disk (null: not here). */
  async storedSize(teamId: string, digest: string): Promise<number | null> {
    try {
      return (await stat(this.path(teamId, digest))).size;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw err;
    }
  }

  /** Stores a tar from a stream; refuses it when its sha256 is not `digest`. */
  async put(teamId: string, digest: string, body: Readable): Promise<number> {
    return (await this.store(teamId, body, digest)).bytes;
  }

  /** Stores a tar from a stream (a git archive) under the digest it turns out to have. */
  async putStream(teamId: string, body: Readable): Promise<{ digest: string; bytes: number }> {
    return this.store(teamId, body, null);
  }

  private async store(
    teamId: string,
    body: Readable,
    expected: string | null,
  ): Promise<{ digest: string; bytes: number }> {
    if (expected !== null) this.path(teamId, expected);
    await mkdir(join(this.dir, teamId), { recursive: true, mode: 0o700 });
    const limit = this.limitBytes;
    const quota = this.teamQuotaBytes;
    const stored = await this.usedBytes(teamId);
    const arriving = this.arriving;
    const tmp = join(this.dir, teamId, `.${newId("up")}.part`);
    const hash = createHash("sha256");
    let bytes = 0;
    const out = createWriteStream(tmp, { mode: 0o600 });
    try {
      await pipeline(
        body,
        async function* (source: AsyncIterable<Buffer>) {
          for await (const chunk of source) {
            hash.update(chunk);
            bytes += chunk.length;
            arriving.set(teamId, (arriving.get(teamId) ?? 0) + chunk.length);
            if (bytes > limit)
              throw new DenvError("payload_too_large", `the build context is over ${limit} bytes`);
            // Every upload of the team's counts as it arrives, so parallel ones cannot pass together.
            const total = stored + (arriving.get(teamId) ?? 0);
            if (total > quota)
              throw new DenvError(
                "quota_exceeded",
                `the team's stored build contexts would take over ${total} bytes, past its quota of ${quota} bytes (${stored} stored); contexts no project names expire within ${CONTEXT_GRACE_MS / 60_000} minutes`,
                { details: { quota_bytes: quota, stored_bytes: stored, upload_bytes: bytes } },
              );
            yield chunk;
          }
        },
        out,
      );
      const got = `sha256:${hash.digest("hex")}`;
      if (expected !== null && got !== expected)
        throw new DenvError(
          "invalid_argument",
          `the uploaded context's sha256 is ${got}, not ${expected}: it was cut or changed on the way; upload it again`,
        );
      await rename(tmp, this.path(teamId, got));
      return { digest: got, bytes };
    } finally {
      const left = (arriving.get(teamId) ?? 0) - bytes;
      if (left > 0) arriving.set(teamId, left);
      else arriving.delete(teamId);
      // A refused upload can end before the file's open has: wait for its close, or the open
      // would make the partial file again after the rm (a CI run found one left).
      if (!out.closed) await new Promise<void>((r) => out.once("close", () => r()));
      await rm(tmp, { force: true });
    }
  }

  /**
   * Deletes the team's contexts that none of `keep` names and that were written more than
   * `olderThanMs` ago (an upload racing the prune is younger than that). The host keeps what it
   * built; a context deleted here is uploaded (or archived from git) again if it is ever needed.
   */
  async prune(teamId: string, keep: ReadonlySet<string>, olderThanMs: number): Promise<string[]> {
    const dir = join(this.dir, teamId);
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw err;
    }
    const removed: string[] = [];
    for (const name of names) {
      const m = /^([0-9a-f]{64})\.tar$/.exec(name);
      if (!m || keep.has(`sha256:${m[1]}`)) continue;
      const st = await stat(join(dir, name)).catch(() => null);
      if (!st || Date.now() - st.mtimeMs < olderThanMs) continue;
      await rm(join(dir, name), { force: true });
      removed.push(`sha256:${m[1]}`);
    }
    return removed;
  }

  open(teamId: string, digest: string): Readable {
    return createReadStream(this.path(teamId, digest));
  }
}

/**
 * A tar made the same way each time from the same files: entries as they come, times zeroed, owner
 * 0:0; anything but files, directories and links dropped. (git archive of a tree stamps every entry
 * with the time of the archive, which would make each deploy's context new.)
 */
export function normalizedTar(input: Readable): Readable {
  const extract = tar.extract();
  const pack = tar.pack();
  extract.on("entry", (header, stream, next) => {
    const base = { name: header.name, mode: header.mode, uid: 0, gid: 0, mtime: new Date(0) };
    if (header.type === "file") {
      const entry = pack.entry({ ...base, type: "file", size: header.size }, (err) => next(err));
      stream.pipe(entry);
      return;
    }
    if (header.type === "directory") pack.entry({ ...base, type: "directory" });
    else if (header.type === "symlink")
      pack.entry({ ...base, type: "symlink", linkname: header.linkname ?? "" });
    stream.resume();
    stream.on("end", () => next());
  });
  // Handed on as a Node stream: one that failed before its reader came (git refusing the path at
  // once) must still fail that reader, which a destroyed tar-stream pack does not do.
  const out = new PassThrough();
  const fail = (err: Error) => out.destroy(err);
  extract.on("finish", () => pack.finalize());
  extract.on("error", fail);
  pack.on("error", fail);
  input.on("error", fail);
  (pack as unknown as Readable).pipe(out);
  input.pipe(extract);
  return out;
}
