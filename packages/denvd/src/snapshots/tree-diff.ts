/**
 * What changed between two trees: a version's snapshot of a volume (before) and a later state of
 * it (after: a fork's live dataset, or another snapshot). Both trees are a container's writing, so
 * they are walked as verify collects: every directory held open and the next name opened relative
 * to it with O_NOFOLLOW, names kept as bytes; a link is read as a link, never followed, and a FIFO
 * or device is never opened.
 *
 * Why it is fast where a clone shares its snapshot's inodes (btrfs and zfs): an inode with the
 * same number and the same ctime in both trees is the snapshot's own, untouched. The kernel sets
 * ctime on every change of content or metadata, to the real time (a container cannot set it back,
 * nor move the host's clock), so only the inodes that changed are compared. Of those, a file whose
 * size is the same is compared byte for byte (so a chmod alone is a mode change, and content
 * rewritten with its mtime set back is still content), except a large one whose mtime moved: it
 * was written, and is reported so without reading it. Elsewhere (the dir driver's copies, other
 * numbers) every file of equal size is compared, within a budget; one left uncompared is reported
 * so (content_compared: false), never as unchanged.
 */
import { type BigIntStats, constants, lstatSync } from "node:fs";
import { type FileHandle, open, readdir, readlink } from "node:fs/promises";
import type { DiffCounts, DiffEntry, NotDiffed } from "@denv/protocol";
import { createTwoFilesPatch } from "diff";
import { escapeName } from "../stack/escape-name.ts";
import { type LeftOutRule, leftOutFor } from "./volume-digest.ts";

export type { DiffCounts, DiffEntry };

type DiffEntryType = DiffEntry["type"];
type DiffAspect = NonNullable<DiffEntry["changed"]>[number];

export interface DiffBounds {
  /** Entries listed; the rest are counted in the summary (default 10,000). */
  maxEntries: number;
  /** Directories deeper than this are left out, named (default 256). */
  maxDepth: number;
  /** Names looked at, both sides, before the rest of the walk is left out (default 2,000,000). */
  maxWalked: number;
  /** How long the walk may take before the rest is left out, in ms (default 120 s). */
  maxWalkMs: number;
  /** A file gets a unified diff when both sides are at most this many bytes (default 64 KiB). */
  maxTextBytes: number;
  /** The unified diffs' total (default 1 MiB). */
  maxDiffBytes: number;
  /** Bytes read to compare files of equal size whose inodes differ (default 1 GiB). */
  maxCompareBytes: number;
}

export const DEFAULT_DIFF_BOUNDS: DiffBounds = {
  maxEntries: 10_000,
  maxDepth: 256,
  maxWalked: 2_000_000,
  maxWalkMs: 120_000,
  maxTextBytes: 64 * 1024,
  maxDiffBytes: 1024 * 1024,
  maxCompareBytes: 1024 ** 3,
};

/** The most subtrees left out that a diff lists (it counts them all). */
const MAX_NOT_DIFFED_LISTED = 100;

/** The budgets one diff spends, shared by all of its volumes. */
export class DiffBudget {
  readonly bounds: DiffBounds;
  readonly entries: DiffEntry[] = [];
  /** Subtrees left out, with why (the first MAX_NOT_DIFFED_LISTED). */
  readonly notDiffed: NotDiffed[] = [];
  notDiffedCount = 0;
  truncated = false;
  diffBytes = 0;
  compareBytes = 0;
  /** Names looked at so far. */
  walked = 0;
  private readonly deadline: number;

  constructor(bounds: Partial<DiffBounds> = {}, nowMs: () => number = () => performance.now()) {
    this.bounds = { ...DEFAULT_DIFF_BOUNDS, ...bounds };
    this.now = nowMs;
    this.deadline = nowMs() + this.bounds.maxWalkMs;
  }

  private readonly now: () => number;

  /** Why the walk may not go into another directory now, or null. */
  spent(): "entries" | "time" | null {
    if (this.walked >= this.bounds.maxWalked) return "entries";
    return this.now() >= this.deadline ? "time" : null;
  }

  leaveOut(volume: string, parts: Buffer[], why: NotDiffed["why"]): void {
    this.notDiffedCount++;
    if (this.notDiffed.length >= MAX_NOT_DIFFED_LISTED) return;
    const raw = Buffer.concat(parts.flatMap((p, i) => (i ? [Buffer.from("/"), p] : [p])));
    const { text, escaped } = escapeName(raw);
    this.notDiffed.push({
      volume,
      path: text || ".",
      ...(escaped ? { path_base64: raw.toString("base64") } : {}),
      why,
    });
  }
}

/**
 * A diff leaves out what a database rewrites by merely running (the digest's rules, volume-digest.ts),
 * and the control file every start and checkpoint rewrites: an untouched fork's diff is empty. The
 * rows are reported from the database itself (stack-diff.ts), and what is left out is counted.
 */
const POSTGRES_DIFF_LEFT_OUT: LeftOutRule[] = [
  {
    test: (p) => p === "global/pg_control",
    why: "global/pg_control: rewritten by every start and checkpoint",
  },
];

const READ_CHUNK = 1024 * 1024;
const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;
const FILE_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK | constants.O_NOCTTY;
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * What a live tree changing under the walk answers (a name gone, or become a link or another type
 * between its lstat and its use): that entry is read as far as it could be, never followed, and the
 * walk goes on.
 */
const RACED = new Set(["ENOENT", "ELOOP", "ENOTDIR", "EINVAL"]);
const raced = (err: unknown) => RACED.has((err as NodeJS.ErrnoException)?.code ?? "");

/** A directory held open: names under it are reached through its descriptor, never a path. */
class HeldDir {
  private readonly handle: FileHandle;
  private readonly prefix: Buffer;

  private constructor(handle: FileHandle) {
    this.handle = handle;
    this.prefix = Buffer.from(`/proc/self/fd/${handle.fd}/`);
  }

  static async open(path: string | Buffer): Promise<HeldDir> {
    return new HeldDir(await open(path, DIR_FLAGS));
  }

  /** A subdirectory; null when it went, or became a link or a file, after its lstat. */
  static async openAt(parent: HeldDir, name: Buffer): Promise<HeldDir | null> {
    return HeldDir.open(parent.at(name)).catch((err: unknown) => {
      if (raced(err)) return null;
      throw err;
    });
  }

  at(name: Buffer): Buffer {
    return Buffer.concat([this.prefix, name]);
  }

  names(): Promise<Buffer[]> {
    return readdir(this.prefix, { encoding: "buffer" });
  }

  async close(): Promise<void> {
    await this.handle.close().catch(() => {});
  }
}

function typeOf(st: BigIntStats): DiffEntryType {
  if (st.isFile()) return "file";
  if (st.isDirectory()) return "directory";
  if (st.isSymbolicLink()) return "symlink";
  if (st.isFIFO()) return "fifo";
  if (st.isSocket()) return "socket";
  return st.isCharacterDevice() ? "char_device" : "block_device";
}

function isText(buf: Buffer): string | null {
  if (buf.includes(0)) return null;
  try {
    return utf8.decode(buf);
  } catch {
    return null;
  }
}

async function readAll(path: Buffer, limit: number): Promise<Buffer | null> {
  const fh = await open(path, FILE_FLAGS);
  try {
    const st = await fh.stat();
    if (!st.isFile() || st.size > limit) return null;
    const buf = Buffer.alloc(st.size);
    let off = 0;
    while (off < buf.length) {
      const { bytesRead } = await fh.read(buf, off, buf.length - off, off);
      if (bytesRead === 0) break;
      off += bytesRead;
    }
    return buf.subarray(0, off);
  } finally {
    await fh.close();
  }
}

/** Whether two regular files of equal size hold the same bytes (both opened without following). */
async function sameBytes(a: Buffer, b: Buffer): Promise<boolean> {
  const fa = await open(a, FILE_FLAGS);
  try {
    const fb = await open(b, FILE_FLAGS);
    try {
      const ba = Buffer.allocUnsafe(READ_CHUNK);
      const bb = Buffer.allocUnsafe(READ_CHUNK);
      for (let pos = 0; ; pos += READ_CHUNK) {
        const [ra, rb] = await Promise.all([
          fa.read(ba, 0, READ_CHUNK, pos),
          fb.read(bb, 0, READ_CHUNK, pos),
        ]);
        if (ra.bytesRead !== rb.bytesRead) return false;
        if (ra.bytesRead === 0) return true;
        if (!ba.subarray(0, ra.bytesRead).equals(bb.subarray(0, rb.bytesRead))) return false;
      }
    } finally {
      await fb.close();
    }
  } finally {
    await fa.close();
  }
}

/** Names stat'ed between two turns of the event loop. */
const LSTAT_SLICE = 256;

/**
 * The lstat of every name in a directory (null where none is), synchronously in slices: a slice's
 * system calls cost less than the promises and thread-pool hops of asynchronous ones would (a diff
 * is mostly lstats), and denvd's event loop gets a turn between slices.
 */
async function lstatAll(dir: HeldDir | null, names: Buffer[]): Promise<(BigIntStats | null)[]> {
  const out: (BigIntStats | null)[] = [];
  for (const [i, name] of names.entries()) {
    if (i > 0 && i % LSTAT_SLICE === 0) await new Promise((r) => setImmediate(r));
    out.push(dir ? (lstatSync(dir.at(name), { bigint: true, throwIfNoEntry: false }) ?? null) : null);
  }
  return out;
}

/** One volume's walk: both sides in step, names in byte order, so the same trees give the same answer. */
class VolumeDiff {
  readonly counts: DiffCounts = { created: 0, deleted: 0, modified: 0, bytes_added: 0, bytes_removed: 0 };
  /** Pairs found untouched by their inode and ctime alone (the clone's own). */
  shared = 0;
  /** Why → changed entries left out for it (a directory left out counts once). */
  readonly leftOut = new Map<string, number>();
  private readonly volume: string;
  private readonly budget: DiffBudget;
  private readonly rules: LeftOutRule[];

  constructor(volume: string, budget: DiffBudget, rules: LeftOutRule[]) {
    this.volume = volume;
    this.budget = budget;
    this.rules = rules;
  }

  /** Whether a changed entry is an engine's bookkeeping; counted when it is. */
  private isLeftOut(parts: Buffer[]): boolean {
    if (this.rules.length === 0) return false;
    const path = escapeName(Buffer.concat(parts.flatMap((p, i) => (i ? [Buffer.from("/"), p] : [p])))).text;
    const rule = this.rules.find((r) => r.test(path));
    if (rule) this.leftOut.set(rule.why, (this.leftOut.get(rule.why) ?? 0) + 1);
    return rule !== undefined;
  }

  private entry(
    parts: Buffer[],
    fields: Omit<DiffEntry, "volume" | "path" | "path_base64">,
  ): DiffEntry | null {
    this.counts[fields.change]++;
    if (this.budget.entries.length >= this.budget.bounds.maxEntries) {
      this.budget.truncated = true;
      return null;
    }
    const raw = Buffer.concat(parts.flatMap((p, i) => (i ? [Buffer.from("/"), p] : [p])));
    const { text, escaped } = escapeName(raw);
    const e: DiffEntry = {
      volume: this.volume,
      path: text,
      ...(escaped ? { path_base64: raw.toString("base64") } : {}),
      ...fields,
    };
    this.budget.entries.push(e);
    return e;
  }

  private async target(dir: HeldDir, name: Buffer): Promise<string> {
    try {
      return escapeName(await readlink(dir.at(name), { encoding: "buffer" })).text;
    } catch (err) {
      if (raced(err)) return "(changed while read)";
      throw err;
    }
  }

  /** A unified diff of a regular file's two sides (either may be absent), within the bounds. */
  private async patch(
    e: DiffEntry,
    path: string,
    before: { dir: HeldDir; name: Buffer; size: number } | null,
    after: { dir: HeldDir; name: Buffer; size: number } | null,
  ): Promise<void> {
    const { maxTextBytes, maxDiffBytes } = this.budget.bounds;
    if ((before?.size ?? 0) > maxTextBytes || (after?.size ?? 0) > maxTextBytes) {
      e.diff_omitted = "too_large";
      return;
    }
    if (this.budget.diffBytes >= maxDiffBytes) {
      e.diff_omitted = "budget";
      return;
    }
    let a: Buffer | null;
    let b: Buffer | null;
    try {
      a = before ? await readAll(before.dir.at(before.name), maxTextBytes) : Buffer.alloc(0);
      b = after ? await readAll(after.dir.at(after.name), maxTextBytes) : Buffer.alloc(0);
    } catch (err) {
      if (!raced(err)) throw err;
      e.diff_omitted = "changed_while_read";
      return;
    }
    const ta = a && isText(a);
    const tb = b && isText(b);
    if (ta === null || tb === null) {
      e.diff_omitted = "binary";
      return;
    }
    // An empty file made or removed has no lines to show.
    if (ta === tb) return;
    const text = createTwoFilesPatch(
      before ? `a/${path}` : "/dev/null",
      after ? `b/${path}` : "/dev/null",
      ta,
      tb,
      undefined,
      undefined,
      { context: 3 },
    ).replace(/^=+\n/, "");
    if (this.budget.diffBytes + text.length > maxDiffBytes) {
      e.diff_omitted = "budget";
      this.budget.diffBytes = maxDiffBytes;
      return;
    }
    this.budget.diffBytes += text.length;
    e.diff = text;
  }

  /**
   * Whether a directory is walked: one past the depth bound (each level holds two descriptors), or
   * met once the walk's names or time are spent, is left out and named, and the walk goes on.
   */
  private enters(parts: Buffer[], depth: number): boolean {
    const why = depth > this.budget.bounds.maxDepth ? "depth" : this.budget.spent();
    if (why === null) return true;
    this.budget.leaveOut(this.volume, parts, why);
    return false;
  }

  /** Everything under a directory that exists on one side only: all created, or all deleted. */
  async oneSide(dir: HeldDir, parts: Buffer[], change: "created" | "deleted", depth: number): Promise<void> {
    if (!this.enters(parts, depth)) return;
    const names = (await dir.names()).sort(Buffer.compare);
    this.budget.walked += names.length;
    const stats = await lstatAll(dir, names);
    for (const [i, name] of names.entries()) {
      const st = stats[i];
      if (st) await this.single(dir, name, st, [...parts, name], change, depth);
    }
  }

  private async single(
    dir: HeldDir,
    name: Buffer,
    st: BigIntStats,
    parts: Buffer[],
    change: "created" | "deleted",
    depth: number,
  ): Promise<void> {
    if (this.isLeftOut(parts)) return;
    const type = typeOf(st);
    const side = change === "created" ? "after" : "before";
    const size = Number(st.size);
    const e = this.entry(parts, {
      change,
      type,
      ...(type === "file" ? { [`bytes_${side}`]: size } : {}),
      [`mode_${side}`]: Number(st.mode) & 0o7777,
      [`owner_${side}`]: `${st.uid}:${st.gid}`,
      ...(type === "symlink" ? { [`target_${side}`]: await this.target(dir, name) } : {}),
    });
    if (type === "file") {
      if (change === "created") this.counts.bytes_added += size;
      else this.counts.bytes_removed += size;
      if (e) {
        const path = e.path;
        const held = { dir, name, size };
        await this.patch(e, path, change === "deleted" ? held : null, change === "created" ? held : null);
      }
    }
    if (type === "directory") await this.under(dir, name, parts, change, depth);
  }

  /** What a directory on one side only held, listed under it as created or deleted. */
  private async under(
    dir: HeldDir,
    name: Buffer,
    parts: Buffer[],
    change: "created" | "deleted",
    depth: number,
  ): Promise<void> {
    const sub = await HeldDir.openAt(dir, name);
    if (!sub) return;
    try {
      await this.oneSide(sub, parts, change, depth + 1);
    } finally {
      await sub.close();
    }
  }

  /** Both sides of a directory, name by name. */
  async both(before: HeldDir, after: HeldDir, parts: Buffer[], depth: number): Promise<void> {
    if (!this.enters(parts, depth)) return;
    const [a, b] = await Promise.all([before.names(), after.names()]);
    this.budget.walked += a.length + b.length;
    const names = [...a, ...b]
      .sort(Buffer.compare)
      .filter((n, i, all) => i === 0 || !n.equals(all[i - 1] as Buffer));
    const [os, ns] = [await lstatAll(before, names), await lstatAll(after, names)];
    for (const [i, name] of names.entries()) {
      const [o, n] = [os[i] ?? null, ns[i] ?? null];
      const path = [...parts, name];
      if (!o && n) await this.single(after, name, n, path, "created", depth);
      else if (o && !n) await this.single(before, name, o, path, "deleted", depth);
      else if (o && n) await this.pair(before, after, name, o, n, path, depth);
    }
  }

  private async pair(
    before: HeldDir,
    after: HeldDir,
    name: Buffer,
    o: BigIntStats,
    n: BigIntStats,
    parts: Buffer[],
    depth: number,
  ): Promise<void> {
    const to = typeOf(o);
    const tn = typeOf(n);
    const untouched = o.ino === n.ino && o.ctimeNs === n.ctimeNs;
    if (untouched) this.shared++;
    else if (this.isLeftOut(parts)) return;
    if (to !== tn) {
      this.entry(parts, {
        change: "modified",
        type: tn,
        type_before: to,
        changed: ["type"],
        ...(to === "file" ? { bytes_before: Number(o.size) } : {}),
        ...(tn === "file" ? { bytes_after: Number(n.size) } : {}),
        mode_before: Number(o.mode) & 0o7777,
        mode_after: Number(n.mode) & 0o7777,
        owner_before: `${o.uid}:${o.gid}`,
        owner_after: `${n.uid}:${n.gid}`,
        ...(to === "symlink" ? { target_before: await this.target(before, name) } : {}),
        ...(tn === "symlink" ? { target_after: await this.target(after, name) } : {}),
      });
      if (to === "file") this.counts.bytes_removed += Number(o.size);
      if (tn === "file") this.counts.bytes_added += Number(n.size);
      // What a directory held is listed as gone, or as new, under it.
      if (to === "directory") await this.under(before, name, parts, "deleted", depth);
      if (tn === "directory") await this.under(after, name, parts, "created", depth);
      return;
    }
    if (!untouched) {
      const changed: DiffAspect[] = [];
      let compared = true;
      if (tn === "file") {
        const size = Number(n.size);
        if (o.size !== n.size) changed.push("content");
        else if (o.ino === n.ino && o.mtimeNs !== n.mtimeNs && size > this.budget.bounds.maxTextBytes) {
          // The clone's own file, written since (its mtime moved): a large one is not read to learn
          // whether the bytes written were the same ones (rsync -c would read both sides whole).
          compared = false;
          changed.push("content");
        } else if (o.size > 0n) {
          if (this.budget.compareBytes + 2 * size > this.budget.bounds.maxCompareBytes) {
            compared = false;
            changed.push("content");
          } else {
            this.budget.compareBytes += 2 * size;
            const same = await sameBytes(before.at(name), after.at(name)).catch((err: unknown) => {
              if (raced(err)) return null;
              throw err;
            });
            if (same === null) compared = false;
            if (!same) changed.push("content");
          }
        }
      }
      if ((o.mode & 0o7777n) !== (n.mode & 0o7777n)) changed.push("mode");
      if (o.uid !== n.uid || o.gid !== n.gid) changed.push("owner");
      let targets: { target_before: string; target_after: string } | undefined;
      if (tn === "symlink") {
        const tb = await this.target(before, name);
        const ta = await this.target(after, name);
        if (tb !== ta) {
          changed.unshift("target");
          targets = { target_before: tb, target_after: ta };
        }
      }
      if ((tn === "char_device" || tn === "block_device") && o.rdev !== n.rdev) changed.push("device");
      if (changed.length > 0) {
        const bytes = tn === "file" ? { bytes_before: Number(o.size), bytes_after: Number(n.size) } : {};
        const metadata =
          changed.includes("mode") || changed.includes("owner")
            ? {
                mode_before: Number(o.mode) & 0o7777,
                mode_after: Number(n.mode) & 0o7777,
                owner_before: `${o.uid}:${o.gid}`,
                owner_after: `${n.uid}:${n.gid}`,
              }
            : {};
        const e = this.entry(parts, {
          change: "modified",
          type: tn,
          changed,
          ...bytes,
          ...metadata,
          ...targets,
          ...(compared ? {} : { content_compared: false }),
        });
        if (tn === "file") {
          const delta = Number(n.size - o.size);
          if (delta > 0) this.counts.bytes_added += delta;
          else this.counts.bytes_removed -= delta;
        }
        if (e && changed.includes("content") && compared)
          await this.patch(
            e,
            e.path,
            { dir: before, name, size: Number(o.size) },
            { dir: after, name, size: Number(n.size) },
          );
      }
    }
    if (tn === "directory") {
      const [sb, sa] = await Promise.all([HeldDir.openAt(before, name), HeldDir.openAt(after, name)]);
      try {
        if (sb && sa) await this.both(sb, sa, parts, depth + 1);
      } finally {
        await Promise.all([sb?.close(), sa?.close()]);
      }
    }
  }
}

/**
 * One volume: before (a snapshot's root; null when the version had no such volume) against after
 * (null when the volume is gone). Entries go into the budget's list, in path order; the counts
 * cover every change, listed or not.
 */
export async function diffTrees(
  volume: string,
  beforeRoot: string | null,
  afterRoot: string | null,
  budget: DiffBudget,
): Promise<DiffCounts & { method: "inode-ctime" | "bytes"; left_out: { why: string; entries: number }[] }> {
  const root = afterRoot ?? beforeRoot;
  const rules = root && (await leftOutFor(root));
  const walk = new VolumeDiff(
    volume,
    budget,
    rules && rules.length > 0 ? [...rules, ...POSTGRES_DIFF_LEFT_OUT] : [],
  );
  const before = beforeRoot ? await HeldDir.open(beforeRoot) : null;
  try {
    const after = afterRoot ? await HeldDir.open(afterRoot) : null;
    try {
      if (before && after) await walk.both(before, after, [], 0);
      else if (after) await walk.oneSide(after, [], "created", 0);
      else if (before) await walk.oneSide(before, [], "deleted", 0);
    } finally {
      await after?.close();
    }
  } finally {
    await before?.close();
  }
  return {
    ...walk.counts,
    method: walk.shared > 0 ? "inode-ctime" : "bytes",
    left_out: [...walk.leftOut].map(([why, entries]) => ({ why, entries })),
  };
}
