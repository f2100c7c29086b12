/**
 * The operations that change engine state, written down before they act and again when they end,
 * one row each in denvd's database (`state.db`, table `ops`). A denvd killed mid-operation finds at
 * its next open what was in flight (reconcile.ts finishes or undoes each), and one the server sends
 * again after that is answered from what is written (its outcome, or "run it again" once undone)
 * instead of being run twice: the in-memory result cache (op-result-cache.ts) dies with the
 * process, this does not.
 *
 * Until 2026-12-06 each entry was a file under <state dir>/ops, written whole (temp file and
 * rename) twice an operation, and every hundredth operation read all of them back to prune the
 * oldest. A row is written in one statement, a kill leaves the old row or the new one, and the
 * prune is one statement. Files an older denvd left are read in at open and removed once their
 * rows are in. Finished entries are kept for the newest `keep` operations, which covers any
 * re-send (the server stops re-sending an operation after its deadline).
 */
import { readdir, readFile, rm, rmdir } from "node:fs/promises";
import { join } from "node:path";
import type { DatabaseSync, StatementSync } from "node:sqlite";
import { DenvError, OP_METHODS, type OpMethod, operationEntry } from "@denv/protocol";
import { openStateDb } from "./state-store.ts";

/** Operations written down (their `journaled` in the operation table): each changes what the engine or the storage holds. */
export const JOURNALED_OPS: ReadonlySet<OpMethod> = new Set(
  OP_METHODS.filter((m) => operationEntry(m).journaled),
);

export type OpOutcome = { ok: boolean; result?: unknown; error?: unknown };

export interface OpEntry {
  opId: string;
  method: OpMethod;
  /** The checked params (a prepare's holds its spec). */
  params: Record<string, unknown>;
  /** running: under way or cut off by a kill; done: ended with `outcome`; undone: reconcile removed what it made. */
  status: "running" | "done" | "undone";
  startedAt: string;
  /** For operations on a stack: the version the stack was at when the operation began. */
  stackVersionId?: string | null;
  outcome?: OpOutcome;
}

/** Ids are the server's (op_…): anything else is refused, never stored. */
const OP_ID = /^[a-z]+_[A-Za-z0-9_-]{1,80}$/;

interface Statements {
  upsert: StatementSync;
  get: StatementSync;
  running: StatementSync;
  prune: StatementSync;
}

export class OpJournal {
  private readonly stateDir: string;
  private readonly keep: number;
  private finishedSincePrune = 0;
  private db: DatabaseSync | undefined;
  private statements: Statements | undefined;

  constructor(stateDir: string, options: { keep?: number } = {}) {
    this.stateDir = stateDir;
    this.keep = options.keep ?? 2000;
  }

  async open(): Promise<void> {
    const db = await openStateDb(this.stateDir);
    try {
      db.exec(
        "CREATE TABLE IF NOT EXISTS ops (op_id TEXT PRIMARY KEY, status TEXT NOT NULL, started_at TEXT NOT NULL, json TEXT NOT NULL)",
      );
      this.statements = {
        upsert: db.prepare(
          "INSERT INTO ops (op_id, status, started_at, json) VALUES (?, ?, ?, ?) ON CONFLICT (op_id) DO UPDATE SET status = excluded.status, started_at = excluded.started_at, json = excluded.json",
        ),
        get: db.prepare("SELECT json FROM ops WHERE op_id = ?"),
        running: db.prepare("SELECT json FROM ops WHERE status = 'running' ORDER BY started_at, rowid"),
        // The oldest finished entries beyond `keep` entries in all; a running one is never dropped.
        prune: db.prepare(
          "DELETE FROM ops WHERE op_id IN (SELECT op_id FROM ops WHERE status != 'running' ORDER BY started_at, rowid LIMIT max(0, (SELECT count(*) FROM ops) - ?))",
        ),
      };
    } catch (err) {
      db.close();
      throw err;
    }
    this.db = db;
    await this.importFiles();
  }

  /** Closes the journal's connection; it is not used after this. */
  close(): void {
    if (this.db?.isOpen) this.db.close();
  }

  private get stmts(): Statements {
    if (!this.statements) throw new Error("the operation journal is not open");
    return this.statements;
  }

  private async write(entry: OpEntry): Promise<void> {
    // Refused, not skipped: an operation that cannot be written down is not run.
    if (!OP_ID.test(entry.opId))
      throw new DenvError("invalid_argument", "an operation id is op_ and up to 80 letters, digits, _ or -");
    this.stmts.upsert.run(entry.opId, entry.status, entry.startedAt, JSON.stringify(entry));
  }

  async get(opId: string): Promise<OpEntry | undefined> {
    if (!OP_ID.test(opId)) return undefined;
    const row = this.stmts.get.get(opId) as { json: string } | undefined;
    return row ? (JSON.parse(row.json) as OpEntry) : undefined;
  }

  /** Written before the operation acts. */
  begin(entry: Omit<OpEntry, "status" | "startedAt">): Promise<OpEntry> {
    const full: OpEntry = { ...entry, status: "running", startedAt: new Date().toISOString() };
    return this.write(full).then(() => full);
  }

  async finish(entry: OpEntry, outcome: OpOutcome): Promise<void> {
    await this.write({ ...entry, status: "done", outcome });
    if (++this.finishedSincePrune >= 100) {
      this.finishedSincePrune = 0;
      await this.prune();
    }
  }

  async undone(entry: OpEntry): Promise<void> {
    await this.write({ ...entry, status: "undone" });
  }

  /** Entries still marked running: at open, exactly the operations a kill cut off. */
  async running(): Promise<OpEntry[]> {
    return (this.stmts.running.all() as { json: string }[]).map((r) => JSON.parse(r.json) as OpEntry);
  }

  /** Drops the oldest finished entries beyond `keep`. */
  async prune(): Promise<void> {
    this.stmts.prune.run(this.keep);
  }

  /**
   * Entries an older denvd left as files under <state dir>/ops: each read in (a row already there
   * is newer and stays), then its file removed; a temp file a kill left is removed; a file that
   * does not parse as an entry under its own id is left where it is, never taken for a run.
   */
  private async importFiles(): Promise<void> {
    const dir = join(this.stateDir, "ops");
    const names = await readdir(dir).catch(() => [] as string[]);
    if (!names.length) {
      await rmdir(dir).catch(() => {});
      return;
    }
    let kept = 0;
    for (const name of names) {
      const path = join(dir, name);
      if (name.endsWith(".tmp")) {
        await rm(path, { force: true });
        continue;
      }
      const opId = name.endsWith(".json") ? name.slice(0, -5) : "";
      let entry: OpEntry | undefined;
      try {
        const parsed = JSON.parse(await readFile(path, "utf8")) as OpEntry;
        if (
          OP_ID.test(opId) &&
          parsed?.opId === opId &&
          ["running", "done", "undone"].includes(parsed.status) &&
          typeof parsed.startedAt === "string"
        )
          entry = parsed;
      } catch {
        // Not an entry: left in place below.
      }
      if (!entry) {
        kept++;
        continue;
      }
      if (!(await this.get(opId))) await this.write(entry);
      await rm(path, { force: true });
    }
    if (!kept) await rmdir(dir).catch(() => {});
  }
}
