/**
 * Each deployment is held by the replica running it under a lease in its row (lease_owner,
 * lease_until). The holder renews all its leases in one write every third of the lease; a replica
 * that dies stops renewing, and once a lease has lapsed another replica claims the deployment (a
 * compare-and-set on the row: exactly one claimant wins) and ends it as a restarted server does
 * (deployment-recovery.ts): finished if the switch happened, else rolled back, nothing left on the
 * host. On SQLite the one replica claims every running deployment when it starts.
 */
import type { Deployer } from "../deployments/deployer.ts";
import { serverLog } from "../server-log.ts";
import {
  claimDeploymentLease,
  renewDeploymentLeases,
  takeableDeployments,
} from "../store/deployment-store.ts";
import type { Store } from "../store/open-store.ts";
import type { DeploymentsTable } from "../store/schema.ts";
import type { ReplicaRegistry } from "./replica-registry.ts";

/** How old a deployment of a replica with no row must be before it is taken over. */
const UNREGISTERED_GRACE_MS = 2000;

export class DeploymentLeases {
  readonly leaseMs: number;
  private timer: NodeJS.Timeout | null = null;
  private readonly store: Store;
  private readonly registry: ReplicaRegistry;
  private readonly deployer: Deployer;

  constructor(deps: { store: Store; registry: ReplicaRegistry; deployer: Deployer }, leaseMs = 15_000) {
    this.store = deps.store;
    this.registry = deps.registry;
    this.deployer = deps.deployer;
    this.leaseMs = leaseMs;
  }

  start(): void {
    this.timer = setInterval(() => void this.pass(), Math.max(250, Math.floor(this.leaseMs / 3)));
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** Renews this replica's leases, then takes over the deployments whose leases lapsed. */
  async pass(): Promise<string[]> {
    try {
      await this.renew();
      return await this.takeOver(false);
    } catch (err) {
      serverLog().warn({ error: String(err) }, "deployment leases were not renewed");
      return [];
    }
  }

  async renew(): Promise<void> {
    await renewDeploymentLeases(this.store, this.registry.id, Date.now() + this.leaseMs);
  }

  /** Claims the running deployments whose leases lapsed (all of them with `all`), and ends them. */
  async takeOver(all: boolean): Promise<string[]> {
    const t = Date.now();
    // Lapsed, or held by a replica gone from the registry (it stopped, or restarted at the same
    // address under another id): those need not wait for the lease to run out.
    const lapsed = await takeableDeployments(this.store, t, {
      all,
      unregisteredBefore: new Date(t - UNREGISTERED_GRACE_MS).toISOString(),
    });
    const claimed: DeploymentsTable[] = [];
    for (const d of lapsed) {
      if (d.lease_owner === this.registry.id && !all) continue;
      if (await claimDeploymentLease(this.store, d, this.registry.id, Date.now() + this.leaseMs))
        claimed.push(d);
    }
    if (!claimed.length) return [];
    if (!all)
      serverLog().warn(
        { deployments: claimed.map((d) => d.id), from: [...new Set(claimed.map((d) => d.lease_owner))] },
        "took over deployments whose replica stopped renewing their leases",
      );
    return this.deployer.recover(claimed);
  }
}
