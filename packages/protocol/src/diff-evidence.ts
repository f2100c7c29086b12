/**
 * An episode's diff: what changed in an environment's volumes (and, where it is cheap to ask, its
 * databases) since a version. The host's answer to the `diff` operation, the API's answer to
 * GET /v1/envs/{id}/diff, and a verify's `diff` phase evidence are this one shape.
 */
import { z } from "zod";

export const diffEntryType = z.enum([
  "file",
  "directory",
  "symlink",
  "fifo",
  "socket",
  "char_device",
  "block_device",
]);

export const diffEntry = z.object({
  volume: z.string(),
  /** Relative to the volume's root, "/"-separated; control bytes, bytes that are not UTF-8 and
   * characters that reorder text escaped (\n, \xNN, \u{…}), a backslash doubled. */
  path: z.string(),
  /** The path's exact bytes, base64, present only when escaping changed it. */
  path_base64: z.string().optional(),
  change: z.enum(["created", "deleted", "modified"]),
  /** The type now (a deleted entry's: what it was). */
  type: diffEntryType,
  type_before: diffEntryType.optional(),
  /** For modified: what changed. */
  changed: z.array(z.enum(["content", "mode", "owner", "type", "target", "device"])).optional(),
  bytes_before: z.number().int().nonnegative().optional(),
  bytes_after: z.number().int().nonnegative().optional(),
  /** Permission bits (0o7777). */
  mode_before: z.number().int().optional(),
  mode_after: z.number().int().optional(),
  /** "uid:gid". */
  owner_before: z.string().optional(),
  owner_after: z.string().optional(),
  /** A link's target text (escaped as paths are): reported, never followed. */
  target_before: z.string().optional(),
  target_after: z.string().optional(),
  /** False when the bytes were not compared: a file larger than the text bound that the clone
   * shares (same inode) and that was written since (its mtime moved), or one past the compare
   * budget. It was written; it may hold the same bytes. */
  content_compared: z.boolean().optional(),
  /** A unified diff of a text file. */
  diff: z.string().optional(),
  /** Why a changed file has no text diff; changed_while_read: the tree changed under the walk. */
  diff_omitted: z.enum(["binary", "too_large", "budget", "changed_while_read"]).optional(),
});

export const diffCounts = z.object({
  created: z.number().int().nonnegative(),
  deleted: z.number().int().nonnegative(),
  modified: z.number().int().nonnegative(),
  bytes_added: z.number().int().nonnegative(),
  bytes_removed: z.number().int().nonnegative(),
});

/**
 * A subtree the diff did not walk, and why: deeper than its depth bound, past the entries it walks,
 * or past its time. Its changes are in no count and no entry; the rest of the volume was diffed.
 */
export const notDiffed = z.object({
  volume: z.string(),
  /** The directory left out, relative to the volume's root, escaped as entries' paths are. */
  path: z.string(),
  path_base64: z.string().optional(),
  why: z.enum(["depth", "entries", "time"]),
});

export const diffBoundsSchema = z.object({
  max_entries: z.number().int().positive(),
  max_text_bytes: z.number().int().nonnegative(),
  max_diff_bytes: z.number().int().nonnegative(),
  max_compare_bytes: z.number().int().nonnegative(),
});

/** A table's rows changed, as PostgreSQL's statistics count them. */
export const tableChanges = z.object({
  table: z.string(),
  inserted: z.number().int().nonnegative(),
  updated: z.number().int().nonnegative(),
  deleted: z.number().int().nonnegative(),
});

export const databaseDiff = z.object({
  service: z.string(),
  engine: z.enum(["postgres"]),
  database: z.string(),
  /** Counted, not compared: see `how`. */
  approximate: z.literal(true),
  how: z.string(),
  tables: z.array(tableChanges),
  /** Why it could not be asked (the service was not running, the query failed). */
  error: z.string().optional(),
});

export const diffEvidence = z.object({
  /** The version compared against. */
  against: z.string(),
  /** What was compared with it: a stack's live datasets, read through a snapshot taken for the diff. */
  of: z.string(),
  /** How each volume was compared. */
  volumes: z.record(
    z.string(),
    diffCounts.extend({
      method: z
        .enum(["inode-ctime", "bytes"])
        .describe(
          "inode-ctime: the clone shares its snapshot's inodes, and only those whose ctime moved were compared; bytes: every file of equal size compared byte for byte",
        ),
      /** A database engine's bookkeeping that changes by its merely running (its WAL, caches, pid
       * file, control file), counted and not listed: its rows are in `databases`. */
      left_out: z.array(z.object({ why: z.string(), entries: z.number().int().nonnegative() })),
    }),
  ),
  summary: diffCounts,
  /** The changes listed, in volume and path order, up to bounds.max_entries. */
  entries: z.array(diffEntry),
  /** More changes were counted than listed. */
  truncated: z.boolean(),
  /**
   * Subtrees left out (at most 100 listed; not_diffed_count has them all), each with why: a tree
   * past the diff's bounds never fails the diff as a whole. Absent from a host that walks all.
   */
  not_diffed: z.array(notDiffed).optional(),
  not_diffed_count: z.number().int().nonnegative().optional(),
  bounds: diffBoundsSchema,
  databases: z.array(databaseDiff),
  ms: z.number(),
});

export type DiffEntry = z.infer<typeof diffEntry>;
export type NotDiffed = z.infer<typeof notDiffed>;
export type DiffCounts = z.infer<typeof diffCounts>;
export type DatabaseDiff = z.infer<typeof databaseDiff>;
export type DiffEvidence = z.infer<typeof diffEvidence>;
