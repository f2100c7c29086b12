/**
 * Copies kept: a version whose spec says `x-denv.replicas: N` (or set with `denv version replicate
 * --copies N`) is held by N distinct hosts. A holder counts while it is connected or seen within
 * the lost deadline (a host restarting is not replaced), and not drained. When fewer hold it (a host
 * lost, or drained before maintenance), the keeper copies it from a holder that is connected to
 * the least busy host with room that lacks it, until N hold it again or no host can take it.
 *
 * `denv host drain` marks a host drained (placement skips it), copies off every version it holds
 * that would otherwise fall short (below its N, or with this as its only copy), and withdraws the
 * ready pool members there, so their pools refill on other hosts holding the version.
 */

import type { Deployer } from "../deployments/deployer.ts";
import type { Admission } from "../placement/admission.ts";
import { hostsWithRoom } from "../placement/fork-placement.ts";
import { serverLog } from "../server-log.ts";
import { setHostDraining, teamHosts } from "../store/host-store.ts";
import type { Store } from "../store/open-store.ts";
import { teamPoolIds, withdrawMembers } from "../store/pool-store.ts";
import type { HostsTable, VersionsTable } from "../store/schema.ts";
import { replicatedVersions, versionsOnHost } from "../store/version-store.ts";
import type { StackLifecycle } from "../targets/stack-lifecycle.ts";
import { DEFAULT_HOST_LOST_AFTER_MS } from "./host-watch.ts";
import { deleteLeftoverCopies, type Replicator, versionHolders } from "./replication.ts";

interface Deps {
  store: Store;
  stacks: StackLifecycle;
  admission: Admission;
  replicator: Replicator;
}

export interface ReplicaKeeperOptions {
  /** How often versions are looked at (default 15 s); a host's hello or a deploy looks at once. */
  everyMs?: number;
  /** A holder unseen this long no longer counts (the host watch's deadline). */
  lostAfterMs?: number;
}

/** Whether a holder still counts as a copy: not drained, and connected or seen within the deadline. */
function counts(h: HostsTable | undefined, connected: boolean, lostAfterMs: number, nowMs: number): boolean {
  if (!h || h.draining) return false;
  if (connected) return true;
  return h.last_seen !== null && nowMs - Date.parse(h.last_seen) < lostAfterMs;
}

export class ReplicaKeeper {
  private readonly deps: Deps;
  private readonly everyMs: number;
  private readonly lostAfterMs: number;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<string[]> | null = null;
  private again = false;
  private readonly log: (message: string, context: Record<string, unknown>) => void;

  constructor(
    deps: Deps,
    options: ReplicaKeeperOptions = {},
    log: (message: string, context: Record<string, unknown>) => void = (m, c) => serverLog().info(c, m),
  ) {
    this.deps = deps;
    this.everyMs = options.everyMs ?? 15_000;
    this.lostAfterMs = options.lostAfterMs ?? DEFAULT_HOST_LOST_AFTER_MS;
    this.log = log;
  }

  start(): void {
    this.timer = setInterval(() => this.kick(), this.everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** A pass now (one at a time; a kick during a pass runs another after it). */
  kick(): Promise<string[]> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = this.pass()
      .catch((err: unknown) => {
        this.log("replica keeper pass failed", { error: String(err) });
        return [] as string[];
      })
      .finally(() => {
        this.running = null;
        if (this.again) {
          this.again = false;
          void this.kick();
        }
      });
    return this.running;
  }

  /** Copies made this pass, as "VERSION → HOST". */
  private async pass(): Promise<string[]> {
    const { store } = this.deps;
    // Copies of deleted versions on hosts that were away go once their hosts are back.
    const cleared = await deleteLeftoverCopies(store, this.deps.stacks);
    if (cleared) this.log("copies of deleted versions removed", { count: cleared });
    const versions = await replicatedVersions(store);
    const made: string[] = [];
    for (const v of versions) made.push(...(await this.keep(v, v.replicas ?? 1)));
    if (made.length) this.log("replicas restored", { made });
    return made;
  }

  /** Brings a version up to `copies` holders that count; answers the copies made. */
  async keep(v: VersionsTable, copies: number): Promise<string[]> {
    const { store, stacks, replicator } = this.deps;
    const rows = new Map((await teamHosts(store, v.team_id)).map((h) => [h.id, h]));
    const nowMs = Date.now();
    const holders = await versionHolders(store, v);
    const present = holders.filter((h) =>
      counts(rows.get(h), stacks.hostConnected(h), this.lostAfterMs, nowMs),
    );
    let missing = copies - present.length;
    const made: string[] = [];
    if (missing <= 0) return made;
    for (const h of await hostsWithRoom(this.deps, v.team_id)) {
      if (missing <= 0) break;
      if (holders.includes(h)) continue;
      try {
        await replicator.replicate(v, h);
        made.push(`${v.id} → ${h}`);
        missing--;
      } catch (err) {
        this.log("a replica could not be made", { version: v.id, host: h, error: String(err) });
      }
    }
    return made;
  }

  /**
   * Drains a host: it takes nothing new; every version it holds keeps its copies elsewhere (at
   * least one other, or its N); its ready pool members are withdrawn and destroyed, so their pools
   * refill on other holders.
   */
  async drain(
    host: HostsTable,
    deployer: Deployer,
  ): Promise<{
    replicated: { version_id: string; to_host_id: string; bytes: number }[];
    not_replicated: { version_id: string; reason: string }[];
    pool_members_moved: number;
  }> {
    const { store, stacks, replicator } = this.deps;
    await setHostDraining(store, host.id, true);
    const held = await versionsOnHost(store, host.team_id, host.id);
    const replicated: { version_id: string; to_host_id: string; bytes: number }[] = [];
    const notReplicated: { version_id: string; reason: string }[] = [];
    for (const v of held) {
      const holders = await versionHolders(store, v);
      const others = holders.filter((h) => h !== host.id && stacks.hostConnected(h));
      const want = Math.max(v.replicas ?? 1, 1);
      if (others.length >= want) continue;
      let need = want - others.length;
      for (const h of await hostsWithRoom(this.deps, v.team_id)) {
        if (need <= 0) break;
        if (holders.includes(h)) continue;
        try {
          const r = await replicator.replicate(v, h);
          replicated.push({ version_id: v.id, to_host_id: h, bytes: r?.bytes ?? 0 });
          need--;
        } catch (err) {
          notReplicated.push({ version_id: v.id, reason: `to ${h}: ${(err as Error).message}` });
        }
      }
      if (need > 0 && !notReplicated.some((n) => n.version_id === v.id))
        notReplicated.push({ version_id: v.id, reason: "no other connected host with room can take it" });
    }
    // Ready members here go; their pools refill elsewhere (pool-keeper.ts skips drained hosts).
    let moved = 0;
    for (const poolId of await teamPoolIds(store, host.team_id)) {
      const withdrawn = await withdrawMembers(store, poolId, undefined, host.id);
      for (const m of withdrawn) await (await deployer.destroy(m)).done.catch(() => {});
      moved += withdrawn.length;
    }
    return { replicated, not_replicated: notReplicated, pool_members_moved: moved };
  }
}
