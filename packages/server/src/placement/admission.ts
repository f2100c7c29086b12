/**
 * Admission control: every create (a fork, a sandbox, a pool's refill) is checked against its
 * host's capacity before anything is made. A host runs a few creates at once (the engine and the
 * storage serialize the rest anyway); more wait in a bounded queue, in order, their positions
 * visible; past the queue, or past what the host holds (the caps of what runs there, its free
 * memory and disk), a create is refused with `capacity` and a Retry-After, never half-made.
 */
import { DenvError, type ResolvedSpec } from "@denv/protocol";
import type { SecretBox } from "../clouds/secret-box.ts";
import { hostLiveEnvironmentVersions } from "../store/environment-store.ts";
import { hostCapacityJson } from "../store/host-store.ts";
import type { Store } from "../store/open-store.ts";
import { versionSpecJson } from "../store/version-store.ts";
import { MIN_FREE_BYTES, storageShortage } from "./placement.ts";

export interface AdmissionOptions {
  /** Creates a host runs at once (default 8). */
  parallelPerHost?: number;
  /** Creates that may wait for a turn on one host; past it, refused (default 64). */
  queuePerHost?: number;
  /**
   * How far the memory caps of what runs on a host may add up past its memory (default 64):
   * caps are ceilings, not reservations, and most sandboxes use a sliver of theirs. The physical
   * guard is the free memory floor.
   */
  memoryOvercommit?: number;
  /** Memory a host keeps free: below it, creates are refused (default 512 MiB). */
  memoryFloorBytes?: number;
}

const DEFAULTS = {
  parallelPerHost: 8,
  queuePerHost: 64,
  memoryOvercommit: 64,
  memoryFloorBytes: 512 * 1024 ** 2,
};

/** Environments that hold (or are about to hold) their caps on a host. */
const LIVE = ["pending", "running"];

export interface Ticket {
  hostId: string;
  memoryBytes: number;
  /** How long the create waited for this turn, and behind how many: its deployment's evidence. */
  wait: AdmissionWait;
  release(): void;
}

/**
 * A create's wait for its turn on a host, recorded in its place phase's evidence: a deployment's
 * record begins once its turn comes, so without it a create that queued shows phases that add up to
 * less than the caller waited.
 */
export interface AdmissionWait {
  host_id: string;
  waited_ms: number;
  /** Creates running or queued ahead of it when it asked; 0: it had a turn at once. */
  queued_behind: number;
}

interface Waiter {
  label: string;
  memoryBytes: number;
  since: number;
  /** The creates running and queued ahead of it when it joined the queue. */
  behind: number;
  admit: (t: Ticket) => void;
}

interface HostLine {
  running: Set<Ticket>;
  queue: Waiter[];
}

export interface HostAdmission {
  host_id: string;
  running: number;
  parallel: number;
  queued: { label: string; position: number; waited_ms: number }[];
  queue_limit: number;
  committed_memory_bytes: number;
  memory_budget_bytes: number;
  memory_free_bytes: number | null;
  free_bytes: number;
}

/** The sum of a resolved spec's memory caps. */
export function specMemoryBytes(spec: Pick<ResolvedSpec, "services">): number {
  return Object.values(spec.services).reduce((sum, s) => sum + s.caps.memory_bytes, 0);
}

export class Admission {
  private readonly options: typeof DEFAULTS;
  private readonly lines = new Map<string, HostLine>();
  private readonly versionMemory = new Map<string, number>();
  private readonly deps: { store: Store; secrets: SecretBox };

  constructor(deps: { store: Store; secrets: SecretBox }, options: AdmissionOptions = {}) {
    this.deps = deps;
    this.options = { ...DEFAULTS, ...options };
  }

  /** The memory caps of a version's services (versions never change: read once). */
  async versionMemoryBytes(versionId: string): Promise<number> {
    const known = this.versionMemory.get(versionId);
    if (known !== undefined) return known;
    const spec = await versionSpecJson(this.deps.store, versionId);
    const bytes = spec ? specMemoryBytes(JSON.parse(this.deps.secrets.openText(spec)) as ResolvedSpec) : 0;
    this.versionMemory.set(versionId, bytes);
    return bytes;
  }

  /**
   * A turn to create on the host: at once when it has one free, else after the creates queued
   * before it. Refused with `capacity` when the queue is full or the host has no room.
   * `wait: false` (a pool's refill) never queues: it takes a free turn or gets none.
   */
  async admit(
    hostId: string,
    need: { memoryBytes: number; label: string },
    options: { wait?: boolean } = {},
  ): Promise<Ticket> {
    await this.checkRoom(hostId, need.memoryBytes);
    const line = this.line(hostId);
    if (line.running.size < this.options.parallelPerHost && line.queue.length === 0)
      return this.ticket(hostId, line, need.memoryBytes, { host_id: hostId, waited_ms: 0, queued_behind: 0 });
    if (options.wait === false) throw this.refusal(hostId, "every create turn on the host is taken", line);
    if (line.queue.length >= this.options.queuePerHost)
      throw this.refusal(
        hostId,
        `${line.running.size} creates are running on the host and ${line.queue.length} are waiting (the most it queues)`,
        line,
      );
    const ticket = await new Promise<Ticket>((admit) =>
      line.queue.push({
        label: need.label,
        memoryBytes: need.memoryBytes,
        since: performance.now(),
        behind: line.running.size + line.queue.length,
        admit,
      }),
    );
    // The host may have filled up while this one waited: checked again now that it has its turn.
    try {
      await this.checkRoom(hostId, 0);
    } catch (err) {
      ticket.release();
      throw err;
    }
    return ticket;
  }

  /** Creates running and waiting on a host now, and how many it runs at once: where a fork has room. */
  load(hostId: string): { busy: number; parallel: number } {
    const line = this.lines.get(hostId);
    return {
      busy: (line?.running.size ?? 0) + (line?.queue.length ?? 0),
      parallel: this.options.parallelPerHost,
    };
  }

  /** A create that is refused by the caller's own size check, before it is made. */
  async checkRoom(hostId: string, memoryBytes: number): Promise<void> {
    const s = await this.hostState(hostId);
    if (s.memory_free_bytes !== null && s.memory_free_bytes < this.options.memoryFloorBytes)
      throw this.refusal(
        hostId,
        `the host has ${mib(s.memory_free_bytes)} MiB of memory free, under its floor of ${mib(this.options.memoryFloorBytes)} MiB`,
      );
    // Full is not a wait: nothing frees space by itself, so it is said as what to free.
    if (s.free_bytes < MIN_FREE_BYTES)
      throw new DenvError(
        "insufficient_storage",
        storageShortage([{ name: hostId, freeBytes: s.free_bytes }]),
        {
          details: { host_id: hostId, free_bytes: s.free_bytes, needed_bytes: MIN_FREE_BYTES },
        },
      );
    if (s.committed_memory_bytes + memoryBytes > s.memory_budget_bytes)
      throw this.refusal(
        hostId,
        `the memory caps of what runs on the host add up to ${mib(s.committed_memory_bytes)} MiB; another ${mib(memoryBytes)} MiB would pass its budget of ${mib(s.memory_budget_bytes)} MiB (${this.options.memoryOvercommit}× its memory)`,
      );
  }

  /** How much room a host has for a pool of `count` forks of a version. */
  async checkPoolSize(hostId: string, versionId: string, count: number, alreadyThere: number): Promise<void> {
    const each = await this.versionMemoryBytes(versionId);
    const s = await this.hostState(hostId);
    const more = Math.max(0, count - alreadyThere) * each;
    if (s.committed_memory_bytes + more > s.memory_budget_bytes)
      throw new DenvError(
        "capacity",
        `a pool of ${count} needs ${mib(count * each)} MiB of memory caps; the host's budget is ${mib(s.memory_budget_bytes)} MiB and ${mib(s.committed_memory_bytes)} MiB of it is taken`,
        { details: { host_id: hostId } },
      );
  }

  /** What each host runs, queues and holds, for people and for the bench. */
  async hosts(hostIds: string[]): Promise<HostAdmission[]> {
    return Promise.all(hostIds.map((h) => this.hostState(h)));
  }

  private async hostState(hostId: string): Promise<HostAdmission> {
    const capacityJson = await hostCapacityJson(this.deps.store, hostId);
    const cap = capacityJson
      ? (JSON.parse(capacityJson) as {
          memory_bytes: number;
          memory_free_bytes?: number;
          free_bytes: number;
        })
      : { memory_bytes: 0, free_bytes: 0 };
    const envs = await hostLiveEnvironmentVersions(this.deps.store, hostId, LIVE);
    let committed = 0;
    for (const e of envs) {
      const v = e.current_version_id ?? e.parent_version_id;
      if (v) committed += await this.versionMemoryBytes(v);
    }
    const line = this.line(hostId);
    for (const t of line.running) committed += t.memoryBytes;
    const nowMs = performance.now();
    return {
      host_id: hostId,
      running: line.running.size,
      parallel: this.options.parallelPerHost,
      queued: line.queue.map((w, i) => ({
        label: w.label,
        position: i + 1,
        waited_ms: Math.round(nowMs - w.since),
      })),
      queue_limit: this.options.queuePerHost,
      committed_memory_bytes: committed,
      memory_budget_bytes: cap.memory_bytes * this.options.memoryOvercommit,
      memory_free_bytes: cap.memory_free_bytes ?? null,
      free_bytes: cap.free_bytes,
    };
  }

  private line(hostId: string): HostLine {
    let l = this.lines.get(hostId);
    if (!l) {
      l = { running: new Set(), queue: [] };
      this.lines.set(hostId, l);
    }
    return l;
  }

  private ticket(hostId: string, line: HostLine, memoryBytes: number, wait: AdmissionWait): Ticket {
    let released = false;
    const t: Ticket = {
      hostId,
      memoryBytes,
      wait,
      release: () => {
        if (released) return;
        released = true;
        line.running.delete(t);
        this.next(hostId, line);
      },
    };
    line.running.add(t);
    return t;
  }

  /** The next waiter's turn, when a turn is free (its ticket taken here, so no turn is given twice). */
  private next(hostId: string, line: HostLine): void {
    if (line.running.size >= this.options.parallelPerHost) return;
    const w = line.queue.shift();
    if (w)
      w.admit(
        this.ticket(hostId, line, w.memoryBytes, {
          host_id: hostId,
          waited_ms: Math.round(performance.now() - w.since),
          queued_behind: w.behind,
        }),
      );
  }

  private refusal(hostId: string, why: string, line?: HostLine): DenvError {
    // A turn frees up about every create's time divided by the turns; a second is a fair guess
    // here, more when the queue is long.
    const retryAfterMs =
      1000 * Math.max(1, Math.ceil((line?.queue.length ?? 0) / this.options.parallelPerHost));
    return new DenvError(
      "capacity",
      `the host has no room for another environment now: ${why}; retry later`,
      {
        details: { host_id: hostId, retry_after_ms: retryAfterMs },
      },
    );
  }
}

const mib = (b: number) => Math.round(b / 1024 ** 2);
