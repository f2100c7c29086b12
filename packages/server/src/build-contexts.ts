/**
 * Build contexts a team uploaded with a local project: tars kept by their sha256 under the team's
 * own directory (a team can neither read nor learn of another's), written to a temporary file and
 * renamed only once their digest matched what the client said, so a cut or forged upload never
 * stands in for a context. They are kept for the host to build from; the host's build cache is
 * what makes a second deploy of an unchanged context build nothing.
 */
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenvError } from "@denv/protocol";
import { newId } from "./ids.ts";

/** A context's name: sha256: and 64 hex digits. */
export const CONTEXT_DIGEST = /^sha256:[0-9a-f]{64}$/;
export const DEFAULT_CONTEXT_LIMIT_BYTES = 2 * 1024 ** 3;

export class BuildContexts {
  readonly dir: string;
  readonly limitBytes: number;

  constructor(dataDir: string, limitBytes = DEFAULT_CONTEXT_LIMIT_BYTES) {
    this.dir = join(dataDir, "build-contexts");
    this.limitBytes = limitBytes;
  }

  private path(teamId: string, digest: string): string {
    if (!CONTEXT_DIGEST.test(digest))
      throw new DenvError("invalid_argument", `${digest} is not a sha256: digest`);
    if (!/^[a-z]+_[0-9a-zA-Z]+$/.test(teamId)) throw new Error(`bad team id ${teamId}`);
    return join(this.dir, teamId, `${digest.slice(7)}.tar`);
  }

  /** The context's size, or null when the team has no such context. */
  async size(teamId: string, digest: string): Promise<number | null> {
    try {
      return (await stat(this.path(teamId, digest))).size;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw err;
    }
  }

  /** Stores a tar from a stream; refuses it when its sha256 is not `digest`. */
  async put(teamId: string, digest: string, body: Readable): Promise<number> {
    const final = this.path(teamId, digest);
    await mkdir(join(this.dir, teamId), { recursive: true, mode: 0o700 });
    const tmp = join(this.dir, teamId, `.${newId("up")}.part`);
    const hash = createHash("sha256");
    let bytes = 0;
    try {
      await pipeline(
        body,
        async function* (source: AsyncIterable<Buffer>) {
          for await (const chunk of source) {
            hash.update(chunk);
            bytes += chunk.length;
            yield chunk;
          }
        },
        createWriteStream(tmp, { mode: 0o600 }),
      );
      const got = `sha256:${hash.digest("hex")}`;
      if (got !== digest)
        throw new DenvError(
          "invalid_argument",
          `the uploaded context's sha256 is ${got}, not ${digest}: it was cut or changed on the way; upload it again`,
        );
      await rename(tmp, final);
      return bytes;
    } finally {
      await rm(tmp, { force: true });
    }
  }

  open(teamId: string, digest: string): Readable {
    return createReadStream(this.path(teamId, digest));
  }
}
