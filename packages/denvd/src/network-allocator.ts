/**
 * Stack networks on /24s of denvd's own pool: the engine's default pools run out after about 31
 * networks. One at a time, so two forks never pick the same subnet; a subnet taken meanwhile by
 * someone else is skipped on the next try.
 */
import { DenvError } from "@denv/protocol";
import { hostRoutes } from "./host-routes.ts";
import type { ContainerRuntime, Labels } from "./runtime/container-runtime.ts";
import { pickSubnet } from "./subnet-allocator.ts";

export class NetworkAllocator {
  private readonly runtime: ContainerRuntime;
  private readonly pool: string;
  private lock: Promise<unknown> = Promise.resolve();

  constructor(runtime: ContainerRuntime, pool = "172.16.0.0/12") {
    this.runtime = runtime;
    this.pool = pool;
  }

  create(spec: { name: string; internal: boolean; labels: Labels }): Promise<string> {
    const run = this.lock.then(async () => {
      const used = [...(await this.runtime.networkSubnets()), ...(await hostRoutes())];
      for (let attempt = 0; attempt < 5; attempt++) {
        const pick = pickSubnet(this.pool, used);
        if (!pick)
          throw new DenvError("unavailable", "no free subnet left for another stack network on this host");
        try {
          return await this.runtime.createNetwork({ ...spec, subnet: pick.subnet });
        } catch (err) {
          if (!(err instanceof DenvError && err.details?.subnet_overlap)) throw err;
          used.push(pick.subnet);
        }
      }
      throw new DenvError("unavailable", `could not find a free subnet for network ${spec.name}`);
    });
    this.lock = run.catch(() => {});
    return run;
  }
}
