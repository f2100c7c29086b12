/**
 * denvd's own records: environments and versions on this host, kept in one JSON file in the state
 * directory, written atomically (temp file + rename) and one write at a time.
 */
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { ResolvedSpec } from "@denv/protocol";

export type EnvironmentStatus = "creating" | "running" | "failed" | "lost" | "destroying";

export interface EnvironmentRecord {
  id: string;
  name: string;
  status: EnvironmentStatus;
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
}

export interface VersionRecord {
  id: string;
  environmentId: string;
  specHash: string;
  spec: ResolvedSpec;
  /** Service → image digest. */
  images: Record<string, string>;
  /** Volume name → snapshot id. */
  snapshots: Record<string, string>;
  frozenMs: number;
  createdAt: string;
}

interface StateFile {
  ownerId: string;
  environments: Record<string, EnvironmentRecord>;
  versions: Record<string, VersionRecord>;
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
      store.state = JSON.parse(await readFile(store.path, "utf8")) as StateFile;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      store.state = { ownerId: randomBytes(6).toString("hex"), environments: {}, versions: {} };
      await store.flush();
    }
    return store;
  }

  get ownerId(): string {
    return this.state.ownerId;
  }

  environments(): EnvironmentRecord[] {
    return Object.values(this.state.environments);
  }

  environment(id: string): EnvironmentRecord | undefined {
    return Object.hasOwn(this.state.environments, id) ? this.state.environments[id] : undefined;
  }

  versions(): VersionRecord[] {
    return Object.values(this.state.versions);
  }

  version(id: string): VersionRecord | undefined {
    return Object.hasOwn(this.state.versions, id) ? this.state.versions[id] : undefined;
  }

  async putEnvironment(rec: EnvironmentRecord): Promise<void> {
    this.state.environments[rec.id] = structuredClone(rec);
    await this.flush();
  }

  async deleteEnvironment(id: string): Promise<void> {
    delete this.state.environments[id];
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
