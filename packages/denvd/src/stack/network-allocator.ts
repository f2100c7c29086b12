/**
 * Stack networks on /24s of denvd's own pool: the engine's default pools run out after about 31
 * networks. Networks are created concurrently: each create reserves its subnet in memory before
 * it calls the engine, so two forks never pick the same one. What the engine and the host already
 * use is read at most every USED_TTL_MS (one list per burst of forks, not one per fork under a
 * lock, which under a fan-out had forks queue for seconds). The pick is random among the free
 * subnets, not the first: other denvds on the engine, reading as stale a list, would otherwise all
 * pick the same one; a subnet taken meanwhile anyway is an overlap the engine refuses, and the
 * next try re-reads and picks again.
 */
import { DenvError } from "@denv/protocol";
import { hostRoutes } from "../host/host-routes.ts";
import type { ContainerRuntime, Labels } from "../runtime/container-runtime.ts";
import { pickSubnet } from "./subnet-allocator.ts";

/** How long a reading of the engine's and the host's subnets is used before it is read again. */
const USED_TTL_MS = 5000;
const ATTEMPTS = 10;
/** Where stack networks get their /24s unless denvd is told otherwise. */
export const DEFAULT_SUBNET_POOL = "172.16.0.0/12";

export class NetworkAllocator {
  private readonly runtime: ContainerRuntime;
  private readonly pool: string;
  /** Subnets being created now (picked, not yet in the engine's list). */
  private readonly reserved = new Set<string>();
  private used: { subnets: string[]; at: number } | null = null;
  private reading: Promise<string[]> | null = null;

  private readonly random: () => number;

  constructor(runtime: ContainerRuntime, pool = DEFAULT_SUBNET_POOL, random: () => number = Math.random) {
    this.runtime = runtime;
    this.pool = pool;
    this.random = random;
  }

  /** `avoid`: subnets not to pick though free (those a fork's restored processes bring with them). */
  async create(
    spec: { name: string; internal: boolean; labels: Labels },
    avoid: readonly string[] = [],
  ): Promise<string> {
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const used = [...(await this.usedSubnets(attempt > 0)), ...avoid];
      // No await between the pick and the reservation: concurrent creates see each other's picks.
      let pick = pickSubnet(this.pool, [...used, ...this.reserved], 24, this.random);
      if (!pick) {
        const fresh = [...(await this.usedSubnets(true)), ...avoid];
        pick = pickSubnet(this.pool, [...fresh, ...this.reserved], 24, this.random);
        if (!pick)
          throw new DenvError("unavailable", "no free subnet left for another stack network on this host");
      }
      const { subnet } = pick;
      this.reserved.add(subnet);
      try {
        const id = await this.runtime.createNetwork({ ...spec, subnet });
        this.used?.subnets.push(subnet);
        return id;
      } catch (err) {
        if (!(err instanceof DenvError && err.details?.subnet_overlap)) throw err;
        // Someone else took it: read again before the next pick.
      } finally {
        this.reserved.delete(subnet);
      }
    }
    throw new DenvError("unavailable", `could not find a free subnet for network ${spec.name}`);
  }

  /** The engine's networks' subnets and the host's routes, read once per USED_TTL_MS (or now). */
  private async usedSubnets(fresh: boolean): Promise<string[]> {
    if (!fresh && this.used && performance.now() - this.used.at < USED_TTL_MS) return this.used.subnets;
    this.reading ??= (async () => {
      try {
        const subnets = [...(await this.runtime.networkSubnets()), ...(await hostRoutes())];
        this.used = { subnets, at: performance.now() };
        return subnets;
      } finally {
        this.reading = null;
      }
    })();
    return this.reading;
  }
}
