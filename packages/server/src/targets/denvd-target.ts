/**
 * A team's sidecar hosts as one target: what denvd can do (every cell of the row, with the storage
 * its hosts report deciding how snapshots and forks are made), and sandboxes deployed through the
 * deployment runner on the host with the most free storage (handed in as `createSandbox`).
 */

import { teamHosts } from "../store/host-store.ts";
import type { Store } from "../store/open-store.ts";
import type { MadeEnvironment, SandboxSpec, Target, TargetCapabilities, TargetStatus } from "./target.ts";

export interface DenvdTargetDeps {
  store: Store;
  isConnected(hostId: string): boolean;
  createSandbox(teamId: string, spec: SandboxSpec): Promise<MadeEnvironment>;
}

export class DenvdTarget implements Target {
  readonly name = "denvd";
  readonly kind = "denvd" as const;
  private readonly deps: DenvdTargetDeps;

  constructor(deps: DenvdTargetDeps) {
    this.deps = deps;
  }

  async capabilities(teamId: string): Promise<TargetCapabilities> {
    const storages = new Set((await teamHosts(this.deps.store, teamId)).map((h) => h.storage));
    const cow = storages.has("zfs") || storages.has("btrfs");
    const yes = (detail: string) => ({ supported: true, detail });
    return {
      multiServiceStack: yes("yes"),
      consistentSnapshot: yes(
        storages.has("zfs") ? "ZFS" : storages.has("btrfs") ? "btrfs" : "pause + copy (dir)",
      ),
      fork: yes("yes"),
      forkTime: yes(cow ? "~1 s" : "grows with data (copies)"),
      egressDenyVerified: yes("yes"),
      capsEnforced: yes("yes"),
      gpu: { supported: false, detail: "planned" },
      verify: yes("yes"),
    };
  }

  async status(teamId: string): Promise<TargetStatus> {
    const hosts = (await teamHosts(this.deps.store, teamId)).filter((h) => this.deps.isConnected(h.id));
    return {
      available: hosts.length > 0,
      hosts: hosts.length,
      note: hosts.length
        ? null
        : "no host connected: `denv host join-token`, then the installer on a machine",
    };
  }

  createSandbox(teamId: string, spec: SandboxSpec): Promise<MadeEnvironment> {
    return this.deps.createSandbox(teamId, spec);
  }
}
