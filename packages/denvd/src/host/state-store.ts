/**
 * denvd's own records: the stacks and versions on this host, one row each in an SQLite database in
 * the state directory (`state.db`); the host's owner id in `state.json`.
 *
 * Until 2026-12-05 every record lived in `state.json`, rewritten whole on each change: a create
 * made five writes, each the serialized state of every stack and version on the host, so a host
 * holding a thousand versions wrote megabytes per create (bench/README.md). A row per record makes
 * a change cost the record's own size. A `state.json` that still holds records (an older denvd's,
 * or one a test wrote as a kill leaves it) is read into the database at open, its records taking
 * the place of any with the same id, and then rewritten with the owner id alone.
 *
 * The owner id (on every engine object this host makes: reconcile tells its own from others' by it)
 * is kept in the database too, so a `state.json` lost beside a kept `state.db` does not make the
 * host a new owner, a stranger to its own containers.
 *
 * A stack (stk_…) is what one of the control plane's environments runs on this host: its
 * containers, networks and datasets. The control plane's environment ids never appear here.
 */
import { randomBytes } from "node:crypto";
import { chmod, mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DatabaseSync, type StatementSync } from "node:sqlite";
import type { ResolvedSpec } from "@denv/protocol";

/**
 * creating and destroying: cut off by a kill, removed at the next open. restoring: a rollback under
 * way (restoreVersionId), finished at the next open: the stack is the environment, never removed
 * for it.
 */
export type StackStatus = "creating" | "running" | "paused" | "restoring" | "failed" | "lost" | "destroying";

export interface StackRecord {
  id: string;
  name: string;
  status: StackStatus;
  spec: ResolvedSpec;
  /** The version it was forked from or last rolled back to; null for a fresh deploy until snapshot. */
  versionId: string | null;
  parentVersionId: string | null;
  network: string;
  /** Volume name (as in the compose file) → dataset id. */
  datasets: Record<string, string>;
  /** Service → container id. */
  containers: Record<string, string>;
  operationId: string;
  createdAt: string;
  /** Services verify froze for inspection: the only containers that may stay paused. */
  frozen?: string[];
  /** The version a rollback under way restores (status restoring). */
  restoreVersionId?: string;
  /** Services paused with their memory on disk (status paused): each resumes from its checkpoint. */
  paused?: string[];
  /** The GPUs (UUIDs) the control plane gave each service; absent: none given. */
  gpus?: Record<string, string[]>;
  /** The egress policy set while it runs (a change since its spec's); absent: its spec's. */
  egressPolicy?: { allow: string[]; deny: string[] };
}

/** What a live version keeps of its processes, beside its volumes (on its host only). */
export interface LiveRecord {
  services: Record<
    string,
    {
      checkpointBytes: number;
      layerBytes: number;
      dumpMs: number;
      /** sha256 of its images and layer (liveDigest), checked before a restore; absent: older records. */
      digest?: string;
    }
  >;
  /** Services kept disk-only (best-effort), with why. */
  skipped: Record<string, string>;
  /** The CPU flags of the host that took them (cpu-flags.ts); absent: older records. */
  cpuFlags?: string[];
}

export interface VersionRecord {
  id: string;
  /** The stack it was taken of. */
  stackId: string;
  specHash: string;
  spec: ResolvedSpec;
  /** Service → image digest. */
  images: Record<string, string>;
  /** Volume name → snapshot id. */
  snapshots: Record<string, string>;
  frozenMs: number;
  /** What the stack's clock read in the frozen window (ms since 1970): a fork's clock starts there. */
  clockMs?: number;
  createdAt: string;
  /** A live version's processes, kept on this host only (snapshots/live-capture.ts). */
  live?: LiveRecord;
  /** The egress policy its stack had when it was taken, where one was set while it ran (its forks take it). */
  egressPolicy?: { allow: string[]; deny: string[] };
}

/** `state.json`: the owner id, and records where an older denvd kept them there. */
interface StateFile {
  ownerId: string;
  /** Named environments before stacks had their own name. */
  environments?: Record<string, StackRecord>;
  stacks?: Record<string, StackRecord>;
  versions?: Record<string, VersionRecord & { environmentId?: string }>;
}

type Kind = "stack" | "version";

/**
 * A connection to `<dir>/state.db`, the file made first if need be: denvd's records and its
 * operation journal (op-journal.ts) each open one. Made by denvd's root alone to read: a stack's
 * record holds its spec (SQLite gives its log files the database file's mode). WAL with
 * synchronous=NORMAL, as the server's store: a commit does not wait for an fsync, a crash cannot
 * corrupt the database, and only a power loss can drop the last commits.
 */
export async function openStateDb(dir: string): Promise<DatabaseSync> {
  await mkdir(dir, { recursive: true });
  const dbPath = join(dir, "state.db");
  await writeFile(dbPath, "", { flag: "a", mode: 0o600 });
  await chmod(dbPath, 0o600);
  const db = new DatabaseSync(dbPath);
  try {
    db.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000");
  } catch (err) {
    db.close();
    throw new Error(`denvd's records in ${dbPath} cannot be read: ${(err as Error).message}`, { cause: err });
  }
  return db;
}

export class StateStore {
  private readonly stacksById = new Map<string, StackRecord>();
  private readonly versionsById = new Map<string, VersionRecord>();
  private ownerIdValue = "";
  private readonly upsert: StatementSync;
  private readonly remove: StatementSync;

  private readonly db: DatabaseSync;

  private constructor(db: DatabaseSync) {
    this.db = db;
    db.exec(
      "CREATE TABLE IF NOT EXISTS records (kind TEXT NOT NULL, id TEXT NOT NULL, json TEXT NOT NULL, PRIMARY KEY (kind, id));" +
        " CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    );
    // An upsert keeps the row's rowid: records list in the order they were first written.
    this.upsert = db.prepare(
      "INSERT INTO records (kind, id, json) VALUES (?, ?, ?) ON CONFLICT (kind, id) DO UPDATE SET json = excluded.json",
    );
    this.remove = db.prepare("DELETE FROM records WHERE kind = ? AND id = ?");
  }

  static async open(dir: string): Promise<StateStore> {
    await mkdir(dir, { recursive: true });
    const path = join(dir, "state.json");
    let file: StateFile | undefined;
    try {
      file = JSON.parse(await readFile(path, "utf8")) as StateFile;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT")
        throw new Error(`${path} cannot be read: ${(err as Error).message}`, { cause: err });
    }
    const stacks = Object.entries(file?.stacks ?? file?.environments ?? {});
    const versions = Object.entries(file?.versions ?? {});
    // A record is an object under its own id; anything else in the file is refused by its place.
    for (const [where, entries] of [
      ["stacks", stacks],
      ["versions", versions],
    ] as const)
      for (const [id, rec] of entries)
        if (typeof rec !== "object" || rec === null || Array.isArray(rec) || rec.id !== id)
          throw new Error(`${path}: ${where}.${id} is not a record with the id ${JSON.stringify(id)}`);
    const dbPath = join(dir, "state.db");
    const db = await openStateDb(dir);
    let store: StateStore;
    let dbOwner: string | undefined;
    try {
      store = new StateStore(db);
      const owner = db.prepare("SELECT value FROM meta WHERE key = 'owner_id'").get() as
        | { value: string }
        | undefined;
      dbOwner = owner?.value;
      const rows = db.prepare("SELECT kind, id, json FROM records ORDER BY rowid").all() as {
        kind: Kind;
        id: string;
        json: string;
      }[];
      for (const row of rows) {
        if (row.kind === "stack") store.stacksById.set(row.id, JSON.parse(row.json) as StackRecord);
        else if (row.kind === "version")
          store.versionsById.set(row.id, JSON.parse(row.json) as VersionRecord);
      }
    } catch (err) {
      db.close();
      throw new Error(`denvd's records in ${dbPath} cannot be read: ${(err as Error).message}`, {
        cause: err,
      });
    }
    const fileOwner = typeof file?.ownerId === "string" ? file.ownerId : undefined;
    if (fileOwner !== undefined && dbOwner !== undefined && fileOwner !== dbOwner) {
      db.close();
      throw new Error(
        `${path} names the owner ${fileOwner} but ${dbOwner} made the records in ${dbPath}: the two files are not one host's`,
      );
    }
    store.ownerIdValue = fileOwner ?? dbOwner ?? randomBytes(6).toString("hex");
    if (fileOwner !== undefined && dbOwner !== undefined && !stacks.length && !versions.length) return store;
    // Records the file still holds go into the database in one transaction, and only then is the
    // file rewritten without them: a kill between the two reads them in again, to the same rows.
    store.db.exec("BEGIN");
    try {
      store.db
        .prepare("INSERT INTO meta (key, value) VALUES ('owner_id', ?) ON CONFLICT (key) DO NOTHING")
        .run(store.ownerIdValue);
      for (const [id, rec] of stacks) store.write("stack", id, rec);
      for (const [id, v] of versions)
        store.write("version", id, { ...v, stackId: v.stackId ?? v.environmentId ?? "" });
      store.db.exec("COMMIT");
    } catch (err) {
      store.db.exec("ROLLBACK");
      db.close();
      throw new Error(`${path}: its records cannot be moved into ${dbPath}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    const tmp = `${path}.${process.pid}.tmp`;
    await writeFile(tmp, JSON.stringify({ ownerId: store.ownerIdValue }));
    await rename(tmp, path);
    return store;
  }

  get ownerId(): string {
    return this.ownerIdValue;
  }

  /** Closes the database (its write-ahead log folded in); the store is not used after this. */
  close(): void {
    if (this.db.isOpen) this.db.close();
  }

  stacks(): StackRecord[] {
    return [...this.stacksById.values()];
  }

  stack(id: string): StackRecord | undefined {
    return this.stacksById.get(id);
  }

  versions(): VersionRecord[] {
    return [...this.versionsById.values()];
  }

  version(id: string): VersionRecord | undefined {
    return this.versionsById.get(id);
  }

  async putStack(rec: StackRecord): Promise<void> {
    this.write("stack", rec.id, rec);
  }

  async deleteStack(id: string): Promise<void> {
    this.remove.run("stack", id);
    this.stacksById.delete(id);
  }

  async putVersion(rec: VersionRecord): Promise<void> {
    this.write("version", rec.id, rec);
  }

  async deleteVersion(id: string): Promise<void> {
    this.remove.run("version", id);
    this.versionsById.delete(id);
  }

  /** The row first, then the copy in memory: a record that could not be stored is not kept. */
  private write(kind: Kind, id: string, rec: StackRecord | VersionRecord): void {
    const json = JSON.stringify(rec);
    this.upsert.run(kind, id, json);
    const copy = JSON.parse(json);
    if (kind === "stack") this.stacksById.set(id, copy as StackRecord);
    else this.versionsById.set(id, copy as VersionRecord);
  }
}
