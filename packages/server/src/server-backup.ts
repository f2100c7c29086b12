/**
 * A server's backup and its restore onto a fresh data directory: the SQLite store (a consistent
 * copy, taken while the server runs: SQLite's VACUUM INTO reads one snapshot of it), the key that
 * seals the teams' secrets (`secret.key`: without it the restored store's cloud tokens and App keys
 * cannot be opened) and the uploaded build contexts, in one tar readable by its owner only. A
 * store on PostgreSQL is the database's to dump (pg_dump); its backup holds the rest.
 *
 * The versions themselves (their snapshots) live on the hosts and are not in it: a restored server
 * serves them once the hosts connect to it (their identities are in the store). What is restored
 * is checked first: regular files and directories under the three names, nothing else, never over
 * a data directory that already holds a store.
 */
import { createReadStream, createWriteStream, existsSync } from "node:fs";
import { chmod, mkdir, readdir, rm, stat } from "node:fs/promises";
import { dirname, join, normalize, sep } from "node:path";
import { DatabaseSync } from "node:sqlite";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenvError } from "@denv/protocol";
import tar from "tar-stream";

/** What a backup holds, by its name in the data directory. */
const STORE_FILE = "denv.sqlite";
const SECRET_KEY = "secret.key";
const CONTEXTS = "build-contexts";

export interface BackupSummary {
  /** The archive's entries (files), by their names in the data directory. */
  files: string[];
  bytes: number;
  /** Whether the store is in it (false: it is on PostgreSQL, to be dumped with pg_dump). */
  store: boolean;
}

/** Every regular file under `dir`, relative to `root`, '/'-separated, no link followed. */
async function filesUnder(root: string, dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(join(root, dir), { withFileTypes: true })) {
    const rel = `${dir}/${e.name}`;
    if (e.isDirectory()) out.push(...(await filesUnder(root, rel)));
    else if (e.isFile()) out.push(rel);
  }
  return out;
}

/** Writes `dataDir`'s backup to `outFile` (mode 0600): the store's copy, the secret key, the contexts. */
export async function backupDataDir(dataDir: string, outFile: string): Promise<BackupSummary> {
  if (!existsSync(join(dataDir, SECRET_KEY)))
    throw new DenvError(
      "not_found",
      `${dataDir} holds no server's data (no ${SECRET_KEY}): name the server's --data-dir`,
    );
  const work = join(dirname(outFile), `.denv-backup-${process.pid}-${Date.now()}`);
  await mkdir(work, { recursive: true, mode: 0o700 });
  try {
    const store = existsSync(join(dataDir, STORE_FILE));
    if (store) {
      // One consistent copy of a store that may be written to meanwhile (WAL readers see a snapshot).
      const db = new DatabaseSync(join(dataDir, STORE_FILE), { readOnly: true });
      try {
        db.prepare("VACUUM INTO ?").run(join(work, STORE_FILE));
      } finally {
        db.close();
      }
    }
    const names = [
      ...(store ? [STORE_FILE] : []),
      SECRET_KEY,
      ...(existsSync(join(dataDir, CONTEXTS)) ? await filesUnder(dataDir, CONTEXTS) : []),
    ];
    const pack = tar.pack();
    const written = pipeline(pack, createWriteStream(outFile, { mode: 0o600 }));
    let bytes = 0;
    for (const name of names) {
      const from = name === STORE_FILE ? join(work, name) : join(dataDir, name);
      const size = (await stat(from)).size;
      bytes += size;
      const entry = pack.entry({ name, size, mode: 0o600, type: "file" });
      await pipeline(createReadStream(from), entry);
    }
    pack.finalize();
    await written;
    await chmod(outFile, 0o600);
    return { files: names, bytes, store };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** Whether an archive's entry name is one a backup holds: the store, the key, or a context file. */
function allowedName(name: string): boolean {
  if (
    name.startsWith("/") ||
    name.includes("\\") ||
    name.split("/").some((p) => p === ".." || p === "." || p === "")
  )
    return false;
  return (
    name === STORE_FILE ||
    name === SECRET_KEY ||
    (name.startsWith(`${CONTEXTS}/`) && name.length > CONTEXTS.length + 1)
  );
}

/**
 * Restores a backup into `dataDir`, which must hold no store yet. Every entry is checked before
 * anything is written: a name outside the three, a link, a device or a path that climbs refuses the
 * whole archive, naming the entry. Answers what was restored.
 */
export async function restoreDataDir(inFile: string, dataDir: string): Promise<BackupSummary> {
  if (existsSync(join(dataDir, SECRET_KEY)) || existsSync(join(dataDir, STORE_FILE)))
    throw new DenvError(
      "conflict",
      `${dataDir} already holds a server's data: restore into an empty directory (a restore never replaces a store)`,
    );
  // First pass: every entry's name and type, nothing written.
  const names: string[] = [];
  await readArchive(inFile, async (header, body) => {
    if (header.type !== "file" || !allowedName(header.name))
      throw new DenvError(
        "invalid_argument",
        `${inFile} is not a denv backup: its entry ${JSON.stringify(header.name.slice(0, 200))} (${header.type}) is not one a backup holds (${STORE_FILE}, ${SECRET_KEY}, ${CONTEXTS}/…)`,
      );
    names.push(header.name);
    body.resume();
  });
  if (!names.includes(SECRET_KEY))
    throw new DenvError("invalid_argument", `${inFile} is not a denv backup: it holds no ${SECRET_KEY}`);
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  await chmod(dataDir, 0o700);
  let bytes = 0;
  await readArchive(inFile, async (header, body) => {
    const to = normalize(join(dataDir, header.name));
    if (!to.startsWith(`${normalize(dataDir)}${sep}`))
      throw new DenvError("invalid_argument", `bad entry ${header.name}`);
    await mkdir(dirname(to), { recursive: true, mode: 0o700 });
    await pipeline(body, createWriteStream(to, { mode: 0o600, flags: "wx" }));
    bytes += header.size ?? 0;
  });
  return { files: names, bytes, store: names.includes(STORE_FILE) };
}

/** Each entry of a tar in turn: `onEntry` reads (or drains) its body. */
async function readArchive(
  file: string,
  onEntry: (header: tar.Header, body: Readable) => Promise<void>,
): Promise<void> {
  const extract = tar.extract();
  const done = new Promise<void>((resolve, reject) => {
    extract.on("entry", (header, stream, next) => {
      onEntry(header, stream as unknown as Readable).then(
        () => next(),
        (err: unknown) => {
          extract.destroy(err as Error);
          reject(err);
        },
      );
    });
    extract.on("finish", resolve);
    extract.on("error", reject);
  });
  createReadStream(file)
    .on("error", (e) => extract.destroy(e))
    .pipe(extract);
  await done;
}
