/**
 * Files in and out of a stack's services. In: a tar checked entry by entry (tar-sanitizer.ts),
 * then extracted by the engine. Out: the path is walked inside the container by its agent, without
 * following any link (a link the agent planted on the way is refused, not followed to files it
 * could not read); a container that is not running has no agent and runs nothing that could swap
 * a path, so the engine reads it, after each component is checked not to be a link.
 */
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { createReadStream, createWriteStream } from "node:fs";
import { rm } from "node:fs/promises";
import { join, posix } from "node:path";
import { PassThrough, Readable } from "node:stream";
import { DenvError, isDenvError } from "@denv/protocol";
import type { FileSink, FsEntryRaw, FsRequest } from "../exec/executor.ts";
import type { StackContext } from "./stack-context.ts";
import { sanitizeTar } from "./tar-sanitizer.ts";

/** A tar read into memory on the host (getFiles, not the streamed path) is at most this. */
export const MAX_FILES_BYTES = 64 * 1024 * 1024;
/** How long a files read waits for the agent of a container that just started. */
const AGENT_WAIT_MS = 3000;
/** Go's os.ModeSymlink, as the engine reports a path's mode. */
const GO_MODE_SYMLINK = 1 << 27;

/** A service's container in a stack: the one asked for, else the agent's, else the first. */
export interface ServiceTarget {
  stackId: string;
  containerId: string;
  service: string;
}

/**
 * Extracts a tar at `path` in a service, after checking every entry stays inside it. In a running
 * container its agent writes it as `user` (the service's own by default): files owned by that user,
 * missing parents made, nothing replaced by something of another kind. A stopped container is
 * written by the engine, which also refuses such replacements (its parents must exist).
 *
 * A tar of up to SPOOL_BYTES is checked whole before any of it is written, so a refused one writes
 * nothing. A larger one streams: its first SPOOL_BYTES are checked and spooled, then the rest is
 * checked as it passes, so a 10 GiB upload is written once, not twice; one refused past that point
 * stops at the refused entry, the entries before it written (as `docker cp` and tar do).
 */
export async function putFiles(
  ctx: StackContext,
  target: ServiceTarget,
  path: string,
  tar: Readable,
  options: { user?: string | null } = {},
): Promise<{ entries: number; bytes: number }> {
  const clean = checkContainerPath(path);
  const tmp = join(ctx.options.stateDir, `upload-${randomBytes(6).toString("hex")}.tar`);
  // Read a chunk at a time (object mode), as the checker wrote them: a byte-mode read() would join
  // whatever is buffered into a new buffer, a copy of every byte of the upload.
  const checked = new PassThrough({
    writableHighWaterMark: 1024 * 1024,
    readableObjectMode: true,
    readableHighWaterMark: 64,
  });
  const checking = sanitizeTar(tar, checked);
  checking.catch(() => {});
  try {
    const spooled = await spool(checked, tmp, SPOOL_BYTES);
    // Whole: checked before anything is written. Not whole: the rest follows as it is checked.
    if (spooled.ended) await checking;
    const body = spooled.ended
      ? createReadStream(tmp)
      : Readable.from(concatStreams(createReadStream(tmp), checked));
    const st = await ctx.runtime.inspectContainer(target.containerId);
    const written = (async () => {
      if (st.running && !st.paused && ctx.executor.writeFiles && ctx.options.agentBinary) {
        await ctx.agents.waitConnected(target.stackId, target.service, AGENT_WAIT_MS);
        const r = await ctx.executor.writeFiles(target.containerId, clean, body, options);
        if (!r)
          throw new DenvError("unavailable", "the service's agent is not answering; try again in a moment");
      } else {
        await refuseLinksOnTheWay(ctx, target.containerId, clean, true);
        await ctx.runtime.putArchive(target.containerId, clean, body);
      }
    })();
    // A write the agent refused (an entry that passed the check) stops the check, which would
    // otherwise wait for a reader that is gone.
    written.catch(() => checked.destroy());
    const [check, write] = await Promise.allSettled([checking, written]);
    if (write.status === "rejected") {
      // The agent's own refusal (is_directory, permission_denied, ...) is the answer; a write that
      // failed only because the check cut its tar short is not.
      const code = isDenvError(write.reason) ? write.reason.code : "";
      if (check.status === "fulfilled" || WRITE_REFUSALS.has(code)) throw write.reason;
    }
    if (check.status === "rejected") throw check.reason;
    return check.value;
  } finally {
    checked.destroy();
    await rm(tmp, { force: true });
  }
}

/** What the agent answers when it refuses an entry itself. */
const WRITE_REFUSALS = new Set([
  "invalid_path",
  "is_directory",
  "not_a_directory",
  "permission_denied",
  "insufficient_storage",
  "conflict",
  "not_found",
]);

/** Checked tars up to this size are written only once wholly checked. */
const SPOOL_BYTES = 64 * 1024 * 1024;

/** Writes a stream's first `limitBytes` to a file; says whether the stream ended within them. */
async function spool(input: Readable, file: string, limitBytes: number): Promise<{ ended: boolean }> {
  const out = createWriteStream(file);
  let size = 0;
  let ended = true;
  try {
    for (;;) {
      if (size >= limitBytes) {
        ended = false;
        break;
      }
      const chunk = input.read() as Buffer | null;
      if (chunk) {
        size += chunk.length;
        if (!out.write(chunk)) await once(out, "drain");
        continue;
      }
      if (input.readableEnded || input.destroyed) break;
      // Waits for more, its end, or the check failing (the input is then destroyed).
      await new Promise<void>((resolve) => {
        const go = () => {
          input.off("readable", go);
          input.off("end", go);
          input.off("close", go);
          resolve();
        };
        input.on("readable", go);
        input.on("end", go);
        input.on("close", go);
      });
    }
  } finally {
    out.end();
    await once(out, "close");
  }
  return { ended };
}

async function* concatStreams(...streams: Readable[]): AsyncGenerator<Buffer> {
  for (const s of streams) for await (const chunk of s) yield chunk as Buffer;
}

/**
 * A tar of `path` in a service, read as `user` (the service's own by default) without following
 * links, to `sink` as it is made: memory stays flat however large the tree. Nothing reaches the
 * sink before the path was found and may be read, so those failures are errors, not short tars.
 */
export async function readFilesTo(
  ctx: StackContext,
  target: ServiceTarget,
  path: string,
  sink: FileSink,
  options: { user?: string | null } = {},
): Promise<{ bytes: number }> {
  const id = target.containerId;
  const clean = checkContainerPath(path);
  const st = await ctx.runtime.inspectContainer(id);
  const withAgent = Boolean(ctx.options.agentBinary);
  if (st.running && ctx.executor.readFiles && withAgent) {
    // Just after a start the agent may still be dialling in.
    await ctx.agents.waitConnected(target.stackId, target.service, AGENT_WAIT_MS);
    const user = options.user ?? ctx.agents.defaultUser(id) ?? null;
    const read = await ctx.executor.readFiles(id, clean, { user, sink });
    if (read) return read;
    throw new DenvError("unavailable", "the service's agent is not answering; try again in a moment");
  }
  if (st.running && !st.paused && withAgent)
    throw new DenvError("unavailable", "the service's agent is not answering; try again in a moment");
  // Stopped or paused (or a host without agents): nothing in the container runs to race the check.
  await refuseLinksOnTheWay(ctx, id, clean, false);
  let bytes = 0;
  for await (const c of await ctx.runtime.getArchive(id, clean)) {
    bytes += (c as Buffer).length;
    await sink(c as Buffer);
  }
  return { bytes };
}

/**
 * For a container nothing runs in (the engine reads and writes it, and the engine follows links):
 * each directory on the way to `path` (and `path` itself when `withLast`) is checked not to be a
 * link. Nothing in a stopped container can swap one in after the check.
 */
async function refuseLinksOnTheWay(
  ctx: StackContext,
  id: string,
  path: string,
  withLast: boolean,
): Promise<void> {
  const parts = path.split("/").filter(Boolean);
  let prefix = "";
  for (const part of withLast ? parts : parts.slice(0, -1)) {
    prefix += `/${part}`;
    const stat = await ctx.runtime.statPath(id, prefix);
    if (!stat) {
      if (withLast) return; // the engine makes nothing that is missing: its own error says so
      throw new DenvError("not_found", `${prefix} does not exist in the service`);
    }
    if (stat.mode & GO_MODE_SYMLINK)
      throw new DenvError(
        "invalid_path",
        `${prefix} is a symbolic link; denv does not follow links in a path (use the link's target)`,
      );
  }
}

/** A tar of `path` in a service, in memory (at most `maxBytes`): for callers on the host itself. */
export async function getFiles(
  ctx: StackContext,
  target: ServiceTarget,
  path: string,
  options: { user?: string | null; maxBytes?: number } = {},
): Promise<Buffer> {
  const limit = options.maxBytes ?? MAX_FILES_BYTES;
  const chunks: Buffer[] = [];
  let size = 0;
  await readFilesTo(
    ctx,
    target,
    path,
    (c) => {
      size += c.length;
      if (size > limit)
        return Promise.reject(
          new DenvError(
            "payload_too_large",
            `${path} is over ${limit / 1024 ** 2} MiB as a tar; get a smaller path`,
          ),
        );
      chunks.push(Buffer.from(c));
    },
    options,
  );
  return Buffer.concat(chunks);
}

/** A path as the API answers it. */
export interface FsEntry {
  path: string;
  name: string;
  type: "file" | "directory" | "symlink" | "other";
  size: number;
  mode: number;
  uid: number;
  gid: number;
  owner: string | null;
  group: string | null;
  modified_at: string;
  link_target: string | null;
}

function entryOf(raw: FsEntryRaw, path: string): FsEntry {
  return {
    path,
    name: posix.basename(path) || "/",
    type: raw.type,
    size: raw.size,
    mode: raw.mode,
    uid: raw.uid,
    gid: raw.gid,
    owner: raw.owner,
    group: raw.group,
    modified_at: new Date(raw.mtimeMs).toISOString(),
    link_target: raw.linkTarget,
  };
}

/**
 * stat, list, mkdir, remove and rename in a running service, by its agent, as `user` (the
 * service's own by default): the kernel holds that user's permissions, and links are reported or
 * removed as links, never followed inside what is listed or removed.
 */
export async function fileOp(
  ctx: StackContext,
  target: ServiceTarget,
  request: FsRequest,
  options: { user?: string | null } = {},
): Promise<{ entries: FsEntry[]; created: boolean }> {
  const clean: FsRequest =
    request.op === "rename"
      ? { ...request, path: checkContainerPath(request.path), to: checkContainerPath(request.to) }
      : { ...request, path: checkContainerPath(request.path) };
  const st = await ctx.runtime.inspectContainer(target.containerId);
  if (!st.running || st.paused)
    throw new DenvError(
      "conflict",
      `service ${target.service} is ${st.paused ? "frozen" : "stopped"}; its files can be read with GET /files`,
    );
  if (!ctx.executor.fsOp || !ctx.options.agentBinary)
    throw new DenvError("unavailable", "this host has no agent in its containers to work on files");
  await ctx.agents.waitConnected(target.stackId, target.service, AGENT_WAIT_MS);
  const r = await ctx.executor.fsOp(target.containerId, clean, options);
  if (!r) throw new DenvError("unavailable", "the service's agent is not answering; try again in a moment");
  return {
    created: r.created,
    entries: r.entries.map((e) =>
      entryOf(e, clean.op === "list" ? posix.join(clean.path, e.name) : clean.path),
    ),
  };
}

/** An absolute path in a container, normalised; `..` and NUL bytes refused. */
export function checkContainerPath(path: string): string {
  if (!path.startsWith("/")) throw new DenvError("invalid_argument", `path ${path} must be absolute`);
  if (path.includes("\0")) throw new DenvError("invalid_argument", "a path cannot hold NUL bytes");
  if (path.split("/").includes(".."))
    throw new DenvError("invalid_argument", `path ${path} must not contain ".."`);
  return posix.normalize(path).replace(/(.)\/$/, "$1");
}
