/**
 * The operations that change engine state, written down before they act and again when they end,
 * one small file each under <state dir>/ops. A denvd killed mid-operation finds at its next open
 * what was in flight (reconcile.ts finishes or undoes each), and one the server sends again after
 * that is answered from what is written (its outcome, or "run it again" once undone) instead of
 * being run twice: the in-memory result cache (op-result-cache.ts) dies with the process, this
 * does not.
 *
 * Files are written whole (temp file + rename), so a kill leaves the old text or the new, never a
 * torn one; a file that does not parse is treated as an interrupted run of an unknown operation.
 * Finished entries are kept for the newest `keep` operations, which covers any re-send (the
 * server stops re-sending an operation after its deadline).
 */
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { DenvError, OP_METHODS, type OpMethod, operationEntry } from "@denv/protocol";

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

/** Ids are the server's (op_…): anything else never becomes a file name. */
const OP_ID = /^[a-z]+_[A-Za-z0-9_-]{1,80}$/;

export class OpJournal {
  private readonly dir: string;
  private readonly keep: number;
  private finishedSincePrune = 0;

  constructor(stateDir: string, options: { keep?: number } = {}) {
    this.dir = join(stateDir, "ops");
    this.keep = options.keep ?? 2000;
  }

  async open(): Promise<void> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
  }

  private path(opId: string): string | null {
    return OP_ID.test(opId) ? join(this.dir, `${opId}.json`) : null;
  }

  private async write(entry: OpEntry): Promise<void> {
    const path = this.path(entry.opId);
    // Refused, not skipped: an operation that cannot be written down is not run.
    if (!path)
      throw new DenvError("invalid_argument", "an operation id is op_ and up to 80 letters, digits, _ or -");
    const tmp = `${path}.${process.pid}.tmp`;
    await writeFile(tmp, JSON.stringify(entry), { mode: 0o600 });
    await rename(tmp, path);
  }

  async get(opId: string): Promise<OpEntry | undefined> {
    const path = this.path(opId);
    if (!path) return undefined;
    try {
      return JSON.parse(await readFile(path, "utf8")) as OpEntry;
    } catch {
      return undefined;
    }
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
      await this.prune().catch(() => {});
    }
  }

  async undone(entry: OpEntry): Promise<void> {
    await this.write({ ...entry, status: "undone" });
  }

  /** Entries still marked running: at open, exactly the operations a kill cut off. */
  async running(): Promise<OpEntry[]> {
    const out: OpEntry[] = [];
    for (const name of await readdir(this.dir).catch(() => [] as string[])) {
      if (!name.endsWith(".json")) {
        // A temp file a kill left behind.
        if (name.endsWith(".tmp")) await rm(join(this.dir, name), { force: true });
        continue;
      }
      const e = await this.get(name.slice(0, -5));
      if (e?.status === "running") out.push(e);
    }
    return out.sort((a, b) => a.startedAt.localeCompare(b.startedAt));
  }

  /** Drops the oldest finished entries beyond `keep`. */
  async prune(): Promise<void> {
    const names = (await readdir(this.dir)).filter((n) => n.endsWith(".json"));
    if (names.length <= this.keep) return;
    const entries = (await Promise.all(names.map((n) => this.get(n.slice(0, -5))))).filter(
      (e): e is OpEntry => e !== undefined && e.status !== "running",
    );
    entries.sort((a, b) => a.startedAt.localeCompare(b.startedAt));
    for (const e of entries.slice(0, Math.max(0, names.length - this.keep)))
      await rm(join(this.dir, `${e.opId}.json`), { force: true });
  }
}
