/**
 * diff: what changed in a stack since a version — every volume's files (tree-diff.ts), and the
 * rows PostgreSQL services count as changed. The live datasets are walked as they are, beside the
 * version's snapshots: never following a link, so a container changing its tree under the walk can
 * make the answer reflect one moment or the next, never read outside the tree. A verify reads its
 * diff while the agent is frozen. (A read-only snapshot of each dataset for the diff was tried: it
 * cost 50-110 ms a diff, and its files' pages, new inodes to the kernel, were read cold.)
 */
import { type DatabaseDiff, DenvError, type DiffEvidence } from "@denv/protocol";
import type { StackRecord } from "../host/state-store.ts";
import { escapeName } from "../stack/escape-name.ts";
import type { StackContext } from "../stack/stack-context.ts";
import { type DiffBounds, DiffBudget, diffTrees } from "./tree-diff.ts";

export interface DiffStackOptions {
  /** The version to compare with (default: the one the stack was forked from or rolled back to). */
  against?: string;
  bounds?: Partial<DiffBounds>;
}

const POSTGRES_IMAGE = /(^|\/)postgres[^/]*(:|@|$)/;
/** A table's name comes back as hex: a name with a tab or a newline in it cannot break the lines. */
const STATS_QUERY =
  "SELECT encode(convert_to(schemaname || '.' || relname, 'UTF8'), 'hex'), n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY schemaname, relname";
const STATS_HOW =
  "PostgreSQL's statistics (pg_stat_user_tables) since the database started: a fork's start is a recovery from its version's snapshot, which begins them at zero; they count rows written by transactions that rolled back too, and a backend still in a session reports within a second or so";

export async function diffStack(
  ctx: StackContext,
  stackId: string,
  options: DiffStackOptions,
): Promise<DiffEvidence> {
  const started = performance.now();
  const stack = ctx.stack(stackId);
  const againstId = options.against ?? stack.versionId;
  if (!againstId)
    throw new DenvError(
      "invalid_argument",
      `stack ${stack.name} was not forked from a version and has none of its own yet: name the version to compare with`,
    );
  const against = ctx.version(againstId);
  // No checkpoint is asked for: a live diff shows the files as they are on disk, and a database's
  // rows are counted from its own statistics below. A CHECKPOINT would write out what the
  // checkpoint's own connection changed (hint bits set on catalog pages as it starts), which is
  // not the episode's (a verify reads its diff before its snapshot checkpoints for that reason).
  const budget = new DiffBudget(options.bounds);
  const volumes: DiffEvidence["volumes"] = {};
  // The databases are asked while the files are walked.
  const databases = databaseChanges(ctx, stack);
  databases.catch(() => {}); // awaited below; a walk that fails first must not leave it unhandled
  const names = [...new Set([...Object.keys(stack.datasets), ...Object.keys(against.snapshots)])].sort();
  for (const vol of names) {
    const snap = against.snapshots[vol];
    const ds = stack.datasets[vol];
    const before = snap ? await ctx.storage.snapshotTree(snap) : null;
    volumes[vol] = await diffTrees(vol, before, ds ? ctx.storage.datasetPath(ds) : null, budget);
  }
  const summary = { created: 0, deleted: 0, modified: 0, bytes_added: 0, bytes_removed: 0 };
  for (const v of Object.values(volumes))
    for (const k of Object.keys(summary) as (keyof typeof summary)[]) summary[k] += v[k];
  const { bounds } = budget;
  return {
    against: against.id,
    of: `${stack.id} (live)`,
    volumes,
    summary,
    entries: budget.entries,
    truncated: budget.truncated,
    // What the walk left out (past its depth, names or time), named: never the diff as a whole.
    not_diffed: budget.notDiffed,
    not_diffed_count: budget.notDiffedCount,
    bounds: {
      max_entries: bounds.maxEntries,
      max_text_bytes: bounds.maxTextBytes,
      max_diff_bytes: bounds.maxDiffBytes,
      max_compare_bytes: bounds.maxCompareBytes,
    },
    databases: await databases,
    ms: Math.round(performance.now() - started),
  };
}

/** Rows changed per table, from each running PostgreSQL service's own statistics. */
async function databaseChanges(ctx: StackContext, stack: StackRecord): Promise<DatabaseDiff[]> {
  const out: DatabaseDiff[] = [];
  for (const [svc, s] of Object.entries(stack.spec.services).sort(([a], [b]) => a.localeCompare(b))) {
    if (!POSTGRES_IMAGE.test(s.image)) continue;
    const database = s.environment?.POSTGRES_DB ?? s.environment?.POSTGRES_USER ?? "postgres";
    const row: DatabaseDiff = {
      service: svc,
      engine: "postgres",
      database,
      approximate: true,
      how: STATS_HOW,
      tables: [],
    };
    out.push(row);
    const container = stack.containers[svc];
    if (!container) {
      row.error = "the service has no container";
      continue;
    }
    const r = await ctx
      .runIn(container, {
        command: [
          "sh",
          "-c",
          'exec psql -U "${POSTGRES_USER:-postgres}" -d "$1" -XAtF "\t" -c "$2"',
          "sh",
          database,
          STATS_QUERY,
        ],
        user: "postgres",
        timeoutMs: 30_000,
        maxOutputBytes: 4 * 1024 * 1024,
      })
      .catch((err: unknown) => err as Error);
    if (r instanceof Error || r.exitCode !== 0) {
      row.error =
        r instanceof Error
          ? r.message
          : `psql exited ${r.exitCode}: ${r.stderr.toString("utf8").slice(-500)}`;
      continue;
    }
    row.tables = parseTableCounts(r.stdout.toString("utf8"));
  }
  return out;
}

/** psql's rows (hex name, inserted, updated, deleted; tab-separated): a line that is not one is skipped. */
export function parseTableCounts(out: string): DatabaseDiff["tables"] {
  const tables: DatabaseDiff["tables"] = [];
  const count = (s: string | undefined) => (s !== undefined && /^\d{1,15}$/.test(s) ? Number(s) : null);
  for (const line of out.split("\n")) {
    const [hex, ins, upd, del, ...rest] = line.split("\t");
    const [inserted, updated, deleted] = [count(ins), count(upd), count(del)];
    if (!hex || !/^(?:[0-9a-f]{2})+$/.test(hex) || rest.length > 0) continue;
    if (inserted === null || updated === null || deleted === null) continue;
    tables.push({ table: escapeName(Buffer.from(hex, "hex")).text, inserted, updated, deleted });
  }
  return tables;
}
