/**
 * denvd's own records: the stacks and versions on this host, kept in one JSON file in the state
 * directory, written atomically (temp file + rename) and one write at a time.
 *
 * A stack (stk_…) is what one of the control plane's environments runs on this host: its
 * containers, networks and datasets. The control plane's environment ids never appear here.
 */
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { ResolvedSpec } from "@denv/protocol";

/**
 * creating and destroying: cut off by a kill, removed at the next open. restoring: a rollback under
 * way (restoreVersionId), finished at the next open: the stack is the environment, never removed
 * for it.
 */
export type StackStatus = "creating" | "running" | "restoring" | "failed" | "lost" | "destroying";

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
  /** The GPUs (UUIDs) the control plane gave each service; absent: none given. */
  gpus?: Record<string, string[]>;
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
}

interface StateFile {
  ownerId: string;
  stacks: Record<string, StackRecord>;
  versions: Record<string, VersionRecord>;
}

/** A state file written before stacks had their own name. */
interface LegacyStateFile {
  ownerId: string;
  environments?: Record<string, StackRecord>;
  stacks?: Record<string, StackRecord>;
  versions: Record<string, VersionRecord & { environmentId?: string }>;
}

export class StateStore {
  private state!: StateFile;
  private writing: Promise<void> = Promise.resolve();
  private readonly path: string;

  private constructor(dir: string) {
    this.path = join(dir, "state.json");
  }

  static async open(dir: string): Promise<StateStore> {
    const store = new StateStore(dir);
    await mkdir(dir, { recursive: true });
    try {
      const raw = JSON.parse(await readFile(store.path, "utf8")) as LegacyStateFile;
      const versions: Record<string, VersionRecord> = {};
      for (const [id, v] of Object.entries(raw.versions ?? {}))
        versions[id] = { ...v, stackId: v.stackId ?? v.environmentId ?? "" };
      store.state = { ownerId: raw.ownerId, stacks: raw.stacks ?? raw.environments ?? {}, versions };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      store.state = { ownerId: randomBytes(6).toString("hex"), stacks: {}, versions: {} };
      await store.flush();
    }
    return store;
  }

  get ownerId(): string {
    return this.state.ownerId;
  }

  stacks(): StackRecord[] {
    return Object.values(this.state.stacks);
  }

  /** Own properties only: an id such as "constructor" is no stack. */
  stack(id: string): StackRecord | undefined {
    return Object.hasOwn(this.state.stacks, id) ? this.state.stacks[id] : undefined;
  }

  versions(): VersionRecord[] {
    return Object.values(this.state.versions);
  }

  version(id: string): VersionRecord | undefined {
    return Object.hasOwn(this.state.versions, id) ? this.state.versions[id] : undefined;
  }

  async putStack(rec: StackRecord): Promise<void> {
    this.state.stacks[rec.id] = structuredClone(rec);
    await this.flush();
  }

  async deleteStack(id: string): Promise<void> {
    delete this.state.stacks[id];
    await this.flush();
  }

  async putVersion(rec: VersionRecord): Promise<void> {
    this.state.versions[rec.id] = structuredClone(rec);
    await this.flush();
  }

  async deleteVersion(id: string): Promise<void> {
    delete this.state.versions[id];
    await this.flush();
  }

  private flush(): Promise<void> {
    const snapshot = JSON.stringify(this.state);
    const next = this.writing.then(async () => {
      const tmp = `${this.path}.${process.pid}.tmp`;
      await writeFile(tmp, snapshot);
      await rename(tmp, this.path);
    });
    this.writing = next.catch(() => {});
    return next;
  }
}
