/**
 * Files in an environment's service, as the service's user unless --user says otherwise: put and
 * get (tars), and ls, stat, mkdir, rm and mv.
 */
import {
  createReadStream,
  createWriteStream,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  statSync,
} from "node:fs";
import { basename, dirname, join, posix } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import type { Command } from "commander";
import tar from "tar-stream";
import { printJson, progressReporter, UsageError } from "../output.ts";
import { run } from "./command-runner.ts";

export function registerFileCommands(program: Command): void {
  const files = program.command("files").description("Move files in and out of an environment's service");
  const put = files
    .command("put")
    .description("Copy a local file or directory to a path in the service")
    .argument("<env>")
    .argument("<local>")
    .argument("<remote>", "absolute path it lands at")
    .option("--service <name>", "the service (default: the agent's)")
    .option("--user <user>", "write as this user (default: the service's own); parents are made, owned by it")
    .option("--owner <uid:gid>", "owner of the files written (writes as root, unless --user says otherwise)")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv files put rollout-017 --service opsbox ./fixtures /home/ubuntu/fixtures\n\nA file never replaces a directory, nor a directory a file: such a put is refused.",
    );
  put.action(
    run(
      put,
      async (
        client,
        json,
        env: string,
        local: string,
        remote: string,
        o: { service?: string; user?: string; owner?: string },
      ) => {
        if (!posix.isAbsolute(remote))
          throw new UsageError(`${remote} must be an absolute path in the service`);
        if (!existsSync(local)) throw new UsageError(`${local} does not exist`);
        const [uid = 0, gid = 0] = (o.owner ?? "0:0").split(":").map(Number);
        if (!Number.isInteger(uid) || !Number.isInteger(gid) || uid < 0 || gid < 0)
          throw new UsageError(`--owner ${o.owner} is not uid:gid`);
        const user = o.user ?? (o.owner ? "root" : undefined);
        // The tar is made as it is sent: files of any size, read from disk as the server takes them.
        const total = json ? 0 : bytesUnder(local);
        const r = await client().putTar(
          env,
          {
            path: posix.dirname(remote),
            ...(o.service ? { service: o.service } : {}),
            ...(user ? { user } : {}),
          },
          withProgress(tarOf(local, posix.basename(remote), uid, gid), total, "sent"),
        );
        if (json) printJson(r);
        else process.stdout.write(`put ${local} → ${remote} (${r.entries} entries, ${r.bytes} bytes)\n`);
        return 0;
      },
    ),
  );
  const get = files
    .command("get")
    .description("Copy a path from the service to a local file or directory")
    .argument("<env>")
    .argument("<remote>")
    .argument("<local>", "a directory (ending in /, or existing) to copy into, or a file path")
    .option("--service <name>", "the service (default: the agent's)")
    .option("--user <user>", "read as this user (default: the service's own)")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv files get rollout-017 --service opsbox /home/ubuntu/answer.txt ./out/",
    );
  get.action(
    run(
      get,
      async (
        client,
        json,
        env: string,
        remote: string,
        local: string,
        o: { service?: string; user?: string },
      ) => {
        const body = await client().getTar(env, {
          path: remote,
          ...(o.service ? { service: o.service } : {}),
          ...(o.user ? { user: o.user } : {}),
        });
        const intoDir = local.endsWith("/") || (existsSync(local) && statSync(local).isDirectory());
        // A file's size is known beforehand (a directory's tar is not: no bar for it).
        const size = json
          ? 0
          : await client()
              .files.stat(env, {
                query: {
                  path: remote,
                  ...(o.service ? { service: o.service } : {}),
                  ...(o.user ? { user: o.user } : {}),
                },
              })
              .then((e) => (e.type === "file" ? e.size : 0))
              .catch(() => 0);
        const written = await untar(
          Readable.from(
            withProgress(Readable.fromWeb(body as NodeReadableStream<Uint8Array>), size, "received"),
          ),
          intoDir ? local : dirname(local),
          intoDir ? null : basename(local),
        );
        if (json) printJson({ ok: true, files: written });
        else process.stdout.write(`got ${remote} → ${written.join(", ")}\n`);
        return 0;
      },
    ),
  );
  registerFileOps(files);
}

/** Below this a transfer is over before a bar would say anything. */
const PROGRESS_FROM_BYTES = 8 * 1024 * 1024;

/** The bytes of the regular files at or under `path` (links not followed). */
function bytesUnder(path: string): number {
  const st = lstatSync(path);
  if (st.isFile()) return st.size;
  if (!st.isDirectory()) return 0;
  return readdirSync(path).reduce((n, child) => n + bytesUnder(join(path, child)), 0);
}

/**
 * A transfer's bytes as they pass, with a bar on stderr (MiB of `totalBytes`, the files' sizes: a
 * tar's headers make it end a little past them, so it stops at the total) when it is large enough
 * to wait for; the bytes go on as they are.
 */
async function* withProgress(
  chunks: AsyncIterable<Uint8Array>,
  totalBytes: number,
  what: string,
): AsyncIterable<Uint8Array> {
  const progress = totalBytes >= PROGRESS_FROM_BYTES ? progressReporter(`MiB ${what}`) : null;
  const total = Math.ceil(totalBytes / 1024 ** 2);
  // A log gets a line per tenth, a terminal a bar redrawn per MiB.
  const step = process.stderr.isTTY ? 1 : Math.max(1, Math.ceil(total / 10));
  let bytes = 0;
  for await (const c of chunks) {
    bytes += c.length;
    const mib = Math.min(total, Math.floor(bytes / 1024 ** 2));
    progress?.show(mib - (mib % step), total);
    yield c;
  }
  progress?.show(total, total);
  progress?.end();
}

/**
 * A tar of a local file or directory whose top entry is named `top`, made as it is read: each
 * file is streamed from disk into its entry, one after another.
 */
export function tarOf(
  local: string,
  top: string,
  uid: number,
  gid: number,
  options: { refuseLinks?: boolean } = {},
): AsyncIterable<Uint8Array> {
  const pack = tar.pack();
  const add = async (path: string, name: string): Promise<void> => {
    // A directory from someone else (an imported task) may hold links to this machine's files.
    if (options.refuseLinks && lstatSync(path).isSymbolicLink())
      throw new UsageError(`${path} is a symbolic link; it is not followed`);
    const st = statSync(path);
    if (st.isDirectory()) {
      pack.entry({ name, type: "directory", mode: st.mode & 0o7777, uid, gid });
      for (const child of readdirSorted(path)) await add(join(path, child), `${name}/${child}`);
    } else if (st.isFile()) {
      const entry = pack.entry({ name, size: st.size, mode: st.mode & 0o7777, uid, gid });
      await pipeline(createReadStream(path), entry as unknown as NodeJS.WritableStream);
    }
  };
  add(local, top).then(
    () => pack.finalize(),
    (err: Error) => pack.destroy(err),
  );
  return pack as unknown as AsyncIterable<Uint8Array>;
}

function readdirSorted(dir: string): string[] {
  return readdirSync(dir).sort();
}

/** Extracts files and directories (links and special files are skipped) under `into`, as it streams. */
async function untar(body: Readable, into: string, rename: string | null): Promise<string[]> {
  // Loaded here: @denv/denvd brings the Docker client, which every other command would pay for.
  const { checkEntryName } = await import("@denv/denvd");
  const written: string[] = [];
  const extract = tar.extract();
  extract.on("entry", (header, stream, next) => {
    const done = (err?: unknown) => next(err as Error | undefined);
    try {
      let name = checkEntryName(header.name);
      if (rename) name = [rename, ...name.split("/").slice(1)].join("/");
      const target = join(into, name);
      if (header.type === "file" || header.type === "contiguous-file") {
        mkdirSync(dirname(target), { recursive: true });
        written.push(target);
        pipeline(stream as unknown as Readable, createWriteStream(target)).then(() => done(), done);
        return;
      }
      if (header.type === "directory") mkdirSync(target, { recursive: true });
      stream.on("end", () => done());
      stream.resume();
    } catch (err) {
      stream.resume();
      done(err);
    }
  });
  await pipeline(body, extract as unknown as NodeJS.WritableStream);
  return written;
}

type Who = { service?: string; user?: string };
const whoQuery = (o: Who) => ({
  ...(o.service ? { service: o.service } : {}),
  ...(o.user ? { user: o.user } : {}),
});

/** ls, stat, mkdir, rm and mv under `denv files`. */
function registerFileOps(files: Command): void {
  const withWho = (c: Command) =>
    c
      .option("--service <name>", "the service (default: the agent's)")
      .option("--user <user>", "as this user (default: the service's own)")
      .option("--json", "print JSON");
  const ls = withWho(
    files
      .command("ls")
      .description("List a directory (links are listed, not entered)")
      .argument("<env>")
      .argument("<path>"),
  ).option("--depth <n>", "levels to list", "1");
  ls.action(
    run(ls, async (client, json, env: string, path: string, o: Who & { depth: string }) => {
      const r = await client().files.list(env, { query: { path, depth: o.depth, ...whoQuery(o) } });
      if (json) printJson(r);
      else
        for (const e of r.entries)
          process.stdout.write(
            `${e.type === "directory" ? "d" : e.type === "symlink" ? "l" : "-"}${e.mode.toString(8).padStart(4, "0")} ${(e.owner ?? String(e.uid)).padEnd(8)} ${String(e.size).padStart(10)} ${e.modified_at} ${e.path}${e.link_target ? ` -> ${e.link_target}` : ""}\n`,
          );
      return 0;
    }),
  );
  const stat = withWho(
    files
      .command("stat")
      .description("A path's type, size, mode, owner and time")
      .argument("<env>")
      .argument("<path>"),
  );
  stat.action(
    run(stat, async (client, json, env: string, path: string, o: Who) => {
      const e = await client().files.stat(env, { query: { path, ...whoQuery(o) } });
      if (json) printJson(e);
      else
        process.stdout.write(
          `${e.path}: ${e.type}, ${e.size} bytes, mode ${e.mode.toString(8)}, ${e.owner ?? e.uid}:${e.group ?? e.gid}, modified ${e.modified_at}${e.link_target ? `, -> ${e.link_target}` : ""}\n`,
        );
      return 0;
    }),
  );
  const mkdir = withWho(
    files
      .command("mkdir")
      .description("Make a directory and its parents, owned by the user")
      .argument("<env>")
      .argument("<path>"),
  );
  mkdir.action(
    run(mkdir, async (client, json, env: string, path: string, o: Who) => {
      const r = await client().files.mkdir(env, { path, ...whoQuery(o) });
      if (json) printJson(r);
      else process.stdout.write(r.created ? `made ${path}\n` : `${path} was already there\n`);
      return 0;
    }),
  );
  const rm = withWho(
    files
      .command("rm")
      .description("Remove a file, link or empty directory (-r: a whole tree)")
      .argument("<env>")
      .argument("<path>"),
  ).option("-r, --recursive", "remove a directory and everything in it");
  rm.action(
    run(rm, async (client, json, env: string, path: string, o: Who & { recursive?: boolean }) => {
      const r = await client().files.remove(env, {
        query: { path, ...(o.recursive ? { recursive: "true" as const } : {}), ...whoQuery(o) },
      });
      if (json) printJson(r);
      else process.stdout.write(`removed ${r.removed}\n`);
      return 0;
    }),
  );
  const mv = withWho(
    files
      .command("mv")
      .description("Rename or move a path")
      .argument("<env>")
      .argument("<from>")
      .argument("<to>"),
  );
  mv.action(
    run(mv, async (client, json, env: string, from: string, to: string, o: Who) => {
      const r = await client().files.rename(env, { from, to, ...whoQuery(o) });
      if (json) printJson(r);
      else process.stdout.write(`moved ${r.from} → ${r.to}\n`);
      return 0;
    }),
  );
}
