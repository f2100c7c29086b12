/**
 * A team's sidecar hosts as the composition root (`server.ts`) and the tests build them: the hub
 * that holds the hosts' WebSockets, and, where the server has peer replicas, the links to them and
 * the routing of calls for hosts another replica holds. Everything else is given `stacks`, the
 * lifecycle port (stack-lifecycle.ts): the hosts' typed operations stay in this folder.
 */
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { ReplicaRegistry } from "../../replicas/replica-registry.ts";
import type { Store } from "../../store/open-store.ts";
import { DenvdStacks } from "./denvd-stacks.ts";
import { type HostConnections, openHostConnections } from "./host-connections.ts";
import type { HostOperations } from "./host-operations.ts";
import { LINK_PATH, PeerLinks } from "./peer-links.ts";
import { RoutedHosts } from "./routed-hosts.ts";

export interface DenvdHostsOptions {
  /** How long a call waits for an absent host. */
  waitForHostMs?: number;
  /** Replicas on one PostgreSQL: each holds some hosts' connections and routes calls for the rest. */
  replicas?: { registry: ReplicaRegistry; linkKey: string };
}

export class DenvdHosts {
  /** The lifecycle port over these hosts: what the deployment kinds, keepers and routes use. */
  readonly stacks: DenvdStacks;
  /**
   * The hosts' typed operations, for the tests that speak the wire itself (a hostile host's
   * answers); the server's own code goes through `stacks`.
   */
  readonly operations: HostOperations;
  private readonly hub: HostConnections;
  private readonly links: PeerLinks | null;
  private readonly routed: RoutedHosts | null;

  constructor(store: Store, options: DenvdHostsOptions = {}) {
    const { replicas, waitForHostMs } = options;
    this.hub = openHostConnections(store, {
      waitForHostMs,
      ...(replicas ? { replicaId: replicas.registry.id } : {}),
    });
    this.links = replicas ? new PeerLinks({ hub: this.hub, key: replicas.linkKey }) : null;
    this.routed =
      replicas && this.links
        ? new RoutedHosts({
            local: this.hub,
            store,
            registry: replicas.registry,
            links: this.links,
            waitForHostMs,
          })
        : null;
    this.operations = this.routed ?? this.hub;
    this.stacks = new DenvdStacks(this.operations);
  }

  /** A sidecar's WebSocket upgrade onto the hub (its key checked), or a peer replica's link. */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (this.links && req.url?.startsWith(LINK_PATH)) {
      this.links.handleUpgrade(req, socket, head);
      return;
    }
    void this.hub.handleUpgrade(req, socket, head).catch(() => socket.destroy());
  }

  /** How many hosts are connected to this replica (the server's metrics). */
  connectedCount(): number {
    return this.hub.connectedCount();
  }

  /** Called each time a host says hello to this replica (first connection and every reconnect). */
  onLocalHello(listener: (hostId: string) => void): void {
    this.hub.onHostReady(listener);
  }

  /** Where hosts are connected, read again now (another replica said a host came). */
  async refresh(): Promise<void> {
    await this.routed?.refresh();
  }

  /** Starts reading where hosts are connected across replicas. */
  start(): void {
    this.routed?.start();
  }

  /** Stops routing calls to other replicas (the server is closing). */
  stop(): void {
    this.routed?.stop();
  }

  close(): void {
    this.routed?.stop();
    this.links?.close();
    this.hub.close();
  }
}
