/**
 * Warm pools kept full. A pool holds `size` ready forks of one version, made exactly as a cold
 * fork is (the same fork deployment, phases and evidence) but kept aside; a create of that version
 * takes one over at once (a rename, no host call) and the pool refills behind it. An empty pool
 * is never an error: the create forks cold, and the pool counts a miss.
 *
 * Refills yield to the team's own creates: each takes a create turn on the host only when one is
 * free (admission.ts), and a pool whose forks keep failing backs off rather than churn.
 */
import { DenvError } from "@denv/protocol";
import type { Deployer } from "../deployments/deployer.ts";
import { versionHolders } from "../fleet/replication.ts";
import { newId } from "../ids.ts";
import type { Admission } from "../placement/admission.ts";
import { holdersWithRoom } from "../placement/fork-placement.ts";
import { deploymentById, environmentDeployments } from "../store/deployment-store.ts";
import { environmentNamed } from "../store/environment-store.ts";
import type { Store } from "../store/open-store.ts";
import {
  allPools,
  countPoolUse,
  deletePool,
  poolMembers,
  poolOfVersion,
  takeMember,
  upsertPool,
  withdrawMembers,
} from "../store/pool-store.ts";
import type { EnvironmentsTable, PoolsTable } from "../store/schema.ts";
import { findVersion, versionHost, versionRow } from "../store/version-store.ts";
import type { StackLifecycle } from "../targets/stack-lifecycle.ts";

/** The most members one pool keeps. */
export const MAX_POOL_SIZE = 256;

export interface PoolKeeperOptions {
  /** How often every pool is looked at, besides after each take (default 2 s). */
  intervalMs?: number;
  /** Refill forks in flight per pool (default 2). */
  parallel?: number;
}

interface PoolHealth {
  making: number;
  failures: number;
  retryAt: number;
  lastError: string | null;
}

export interface PoolView {
  pool: PoolsTable;
  ready: number;
  warming: number;
  last_error: string | null;
}

export class PoolKeeper {
  private readonly intervalMs: number;
  private readonly parallel: number;
  private readonly health = new Map<string, PoolHealth>();
  private timer: NodeJS.Timeout | null = null;
  private passing = false;
  private again = false;
  private stopped = false;
  private readonly deps: { store: Store; deployer: Deployer; stacks: StackLifecycle; admission: Admission };

  constructor(
    deps: { store: Store; deployer: Deployer; stacks: StackLifecycle; admission: Admission },
    options: PoolKeeperOptions = {},
  ) {
    this.deps = deps;
    this.intervalMs = options.intervalMs ?? 2000;
    this.parallel = options.parallel ?? 2;
  }

  start(): void {
    this.timer = setInterval(() => this.kick(), this.intervalMs);
    this.timer.unref();
    this.kick();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
  }

  /** A pass over every pool soon (now, or right after the one running). */
  kick(): void {
    if (this.stopped) return;
    if (this.passing) {
      this.again = true;
      return;
    }
    this.passing = true;
    void this.pass()
      .catch(() => {})
      .finally(() => {
        this.passing = false;
        if (this.again) {
          this.again = false;
          this.kick();
        }
      });
  }

  /**
   * A ready member of the version's pool, handed to the caller under its name; undefined when
   * there is no pool, or it has none ready (the caller forks cold, and the miss is counted).
   */
  async take(
    teamId: string,
    versionId: string,
    as: { name: string; sandbox: boolean },
  ): Promise<{ env: EnvironmentsTable; deploymentId: string } | undefined> {
    const { store, stacks } = this.deps;
    const pool = await poolOfVersion(store, teamId, versionId);
    if (!pool) return undefined;
    const version = await findVersion(store, teamId, versionId);
    // Members run on any host holding the version; with none of those connected, none is ready.
    if (!(await versionHolders(store, version)).some((h) => stacks.hostConnected(h))) return undefined;
    if (await environmentNamed(store, version.project_id, as.name))
      throw new DenvError("conflict", `an environment named ${as.name} already exists in this project`);
    const env = await takeMember(store, pool, as);
    await countPoolUse(store, pool.id, env !== undefined);
    this.kick();
    if (!env) return undefined;
    // A member's frozen clock waited at its version's time: it starts now, as a fresh fork's would.
    if (env.stack_id && env.host_id)
      await stacks.releaseClock({ hostId: env.host_id, stackId: env.stack_id }).catch((err: unknown) => {
        const h = this.health.get(pool.id);
        if (h) h.lastError = `member ${env.name}'s clock was not released: ${String(err)}`;
      });
    const fork = (await environmentDeployments(store, env.id)).find((d) => d.kind === "fork");
    return { env, deploymentId: fork?.id ?? "" };
  }

  /** Sets a version's pool to a size the host has room for (0 drains it; null: there was none). */
  async set(
    teamId: string,
    versionId: string,
    size: number,
    source: "api" | "x-denv",
    imageKey: string | null = null,
  ): Promise<PoolsTable | null> {
    const { store, admission } = this.deps;
    const version = await findVersion(store, teamId, versionId);
    if (!Number.isInteger(size) || size < 0 || size > MAX_POOL_SIZE)
      throw new DenvError(
        "invalid_argument",
        `size: a pool holds 0 to ${MAX_POOL_SIZE} environments, not ${size}`,
      );
    if (size === 0) {
      // Drained: the pool as it was, at size 0 (null when there was none).
      const existing = await poolOfVersion(store, teamId, versionId);
      if (!existing) return null;
      await this.drain(existing);
      return { ...existing, size: 0 };
    }
    const existing = await poolOfVersion(store, teamId, versionId);
    const have = existing ? (await poolMembers(store, existing.id)).length : 0;
    await admission.checkPoolSize(versionHost(version, "a warm pool"), version.id, size, have);
    const pool = await upsertPool(
      store,
      { team_id: version.team_id, project_id: version.project_id, version_id: version.id },
      size,
      source,
      imageKey,
    );
    // Smaller than it holds: the members past the size go (ready ones first).
    if (have > size) await this.destroyAll(await withdrawMembers(store, pool.id, have - size));
    this.kick();
    return pool;
  }

  /** The pool, then its members: gone. Members still being made go once they are. */
  async drain(pool: PoolsTable): Promise<number> {
    const { store } = this.deps;
    await deletePool(store, pool.id);
    this.health.delete(pool.id);
    const members = await withdrawMembers(store, pool.id);
    await this.destroyAll(members);
    return members.length;
  }

  private async destroyAll(members: EnvironmentsTable[]): Promise<void> {
    const { deployer } = this.deps;
    await Promise.all(members.map(async (m) => (await deployer.destroy(m)).done.catch(() => {})));
  }

  /** The pools of a project declared in its compose file other than the version's: drained. */
  async replaceDeclared(teamId: string, projectId: string, versionId: string, size: number): Promise<void> {
    const declared = (await allPools(this.deps.store)).filter(
      (p) =>
        p.team_id === teamId &&
        p.project_id === projectId &&
        p.source === "x-denv" &&
        p.version_id !== versionId,
    );
    for (const p of declared) await this.drain(p);
    if (size > 0) await this.set(teamId, versionId, size, "x-denv");
  }

  async view(pool: PoolsTable): Promise<PoolView> {
    const members = await poolMembers(this.deps.store, pool.id);
    const h = this.health.get(pool.id);
    return {
      pool,
      ready: members.filter((m) => m.status === "running").length,
      warming: members.filter((m) => m.status !== "running").length,
      last_error: h?.lastError ?? null,
    };
  }

  private async pass(): Promise<void> {
    const { store } = this.deps;
    for (const pool of await allPools(store)) {
      const h = this.healthOf(pool.id);
      if (performance.now() < h.retryAt) continue;
      const version = await versionRow(store, pool.version_id);
      if (!version?.host_id) continue;
      // A pool spans the hosts holding its version (replicas included): each refill goes to the
      // least busy of them, so a lost or drained host's members are made again elsewhere.
      const members = (await poolMembers(store, pool.id)).length;
      let missing = pool.size - members;
      while (missing > 0 && h.making < this.parallel) {
        const [hostId] = await holdersWithRoom(this.deps, version);
        if (!hostId || !(await this.refillOne(pool, hostId, h))) break;
        missing--;
      }
    }
  }

  /** One more member, when the host has a free create turn; false when it has none now. */
  private async refillOne(pool: PoolsTable, hostId: string, h: PoolHealth): Promise<boolean> {
    const { admission, deployer, store } = this.deps;
    let ticket: Awaited<ReturnType<Admission["admit"]>>;
    try {
      const memoryBytes = await admission.versionMemoryBytes(pool.version_id);
      ticket = await admission.admit(hostId, { memoryBytes, label: `pool ${pool.id}` }, { wait: false });
    } catch {
      return false;
    }
    h.making++;
    try {
      const made = await deployer.fork(pool.version_id, {
        teamId: pool.team_id,
        name: `pool-${newId("m").slice(2, 14)}`,
        sandbox: true,
        poolId: pool.id,
        placed: {
          hostId,
          evidence: { host_id: hostId, reason: "the least busy host holding the pool's version" },
        },
        admission: ticket.wait,
      });
      void made.done
        .then(async () => {
          const d = await deploymentById(store, made.deploymentId);
          if (d?.status === "succeeded") {
            h.failures = 0;
            h.lastError = null;
          } else {
            h.failures++;
            h.lastError = d?.reason ?? "the fork failed";
            // 2 s, 4 s, … up to a minute between tries while the version's forks keep failing.
            h.retryAt = performance.now() + Math.min(60_000, 1000 * 2 ** Math.min(h.failures, 6));
          }
        })
        .catch(() => {})
        .finally(() => {
          h.making--;
          ticket.release();
          this.kick();
        });
    } catch (err) {
      h.making--;
      ticket.release();
      h.failures++;
      h.lastError = (err as Error).message;
      h.retryAt = performance.now() + Math.min(60_000, 1000 * 2 ** Math.min(h.failures, 6));
      return false;
    }
    return true;
  }

  private healthOf(poolId: string): PoolHealth {
    let h = this.health.get(poolId);
    if (!h) {
      h = { making: 0, failures: 0, retryAt: 0, lastError: null };
      this.health.set(poolId, h);
    }
    return h;
  }
}
