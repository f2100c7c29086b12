/**
 * The server replicas sharing one store. Each replica writes a row (its id, the URL its peers reach
 * it at) and refreshes it every `heartbeatMs`; a replica whose row is older than `deadAfterMs` is
 * taken for dead: the hosts it held count as away, and its deployments' leases lapse
 * (deployment-leases.ts). There is no new service: the database is where replicas find each other.
 *
 * On SQLite only one process can own the data directory, so a replica starting there removes the
 * rows of replicas that ran before it (`exclusive`): what they held is its now. On PostgreSQL a
 * replica starting removes the row of the one that ran at its address before (a restart).
 */
import { newId } from "../ids.ts";
import { serverLog } from "../server-log.ts";
import type { Store } from "../store/open-store.ts";
import {
  clearReplicas,
  deleteReplica,
  insertReplica,
  liveReplicas,
  olderLiveReplica,
  replicaSeen,
} from "../store/replica-store.ts";

/** How often a heartbeat that keeps failing is said again. */
const MISSED_SAY_EVERY_MS = 60_000;

export interface ReplicaRegistryOptions {
  /** How often the row is refreshed (default 2 s). */
  heartbeatMs?: number;
  /** How old a row may be before its replica is taken for dead (default 10 s). */
  deadAfterMs?: number;
}

export interface LiveReplica {
  id: string;
  url: string;
}

export class ReplicaRegistry {
  readonly id = newId("rep");
  readonly heartbeatMs: number;
  readonly deadAfterMs: number;
  private url = "";
  private startedAt = 0;
  private leading = false;
  /** Heartbeats not written since the warning last said so, and when it did (0: they are written). */
  private missed = 0;
  private missedSaidAt = 0;
  private readonly onLead: (() => void)[] = [];
  private timer: NodeJS.Timeout | null = null;
  private readonly store: Store;

  constructor(store: Store, options: ReplicaRegistryOptions = {}) {
    this.store = store;
    this.heartbeatMs = options.heartbeatMs ?? 2000;
    this.deadAfterMs = options.deadAfterMs ?? 10_000;
  }

  /** Writes this replica's row and keeps it fresh. */
  async start(url: string, options: { exclusive: boolean }): Promise<void> {
    this.url = url;
    // Alone, every row goes; else two live replicas cannot share an address: a row with ours is
    // this replica's last run.
    await clearReplicas(this.store, options.exclusive ? undefined : url);
    const t = Date.now();
    this.startedAt = t;
    await insertReplica(this.store, { id: this.id, url, started_at: t, seen_at: t });
    this.timer = setInterval(() => void this.beat(), this.heartbeatMs);
    this.timer.unref();
    await this.checkLead();
  }

  /**
   * Runs fn once this replica leads: it is the oldest live one. The fleet-wide passes (warm pools,
   * x-denv.replicas) run on the leader only, so two replicas never fill one pool at once; when the
   * leader dies the next oldest takes them up.
   */
  whenLeader(fn: () => void): void {
    if (this.leading) fn();
    else this.onLead.push(fn);
  }

  private async checkLead(): Promise<void> {
    if (this.leading) return;
    const older = await olderLiveReplica(
      this.store,
      { id: this.id, startedAt: this.startedAt },
      Date.now() - this.deadAfterMs,
    );
    if (older) return;
    this.leading = true;
    for (const fn of this.onLead.splice(0)) fn();
  }

  private async beat(): Promise<void> {
    try {
      // Removed by a replica that took this one for gone (a pause longer than deadAfterMs): back.
      if (!(await replicaSeen(this.store, this.id, Date.now())))
        await insertReplica(this.store, {
          id: this.id,
          url: this.url,
          started_at: this.startedAt,
          seen_at: Date.now(),
        });
      await this.checkLead();
    } catch (err) {
      // Said when it starts failing and then once a minute, with how many failed between: a store
      // that is full or away for an hour is not 1,800 lines of the same warning.
      this.missed++;
      if (Date.now() - this.missedSaidAt >= MISSED_SAY_EVERY_MS) {
        serverLog().warn(
          { error: String(err), missed: this.missed },
          "the replica's heartbeat was not written",
        );
        this.missedSaidAt = Date.now();
        this.missed = 0;
      }
      return;
    }
    if (this.missedSaidAt) serverLog().info("the replica's heartbeat is written again");
    this.missedSaidAt = 0;
    this.missed = 0;
  }

  /** Replicas other than this one whose rows are fresh. */
  async peers(): Promise<LiveReplica[]> {
    return liveReplicas(this.store, Date.now() - this.deadAfterMs, this.id);
  }

  /** The ids of every replica taken for alive now, this one included. */
  async liveIds(): Promise<Set<string>> {
    const rows = await liveReplicas(this.store, Date.now() - this.deadAfterMs);
    return new Set([this.id, ...rows.map((r) => r.id)]);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await deleteReplica(this.store, this.id).catch(() => {});
  }
}
