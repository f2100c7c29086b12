/**
 * The sidecar hosts' connections as the composition root (`server.ts`) builds them: the
 * `HostOperations` port everything else is given, plus the two things only the server's listener
 * does with it (hand it a host's WebSocket upgrade, close it). The hub that implements it stays
 * private to this folder.
 */
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { Store } from "../../store/open-store.ts";
import { HostHub } from "./host-hub.ts";
import type { HostOperations } from "./host-operations.ts";

export interface HostConnections extends HostOperations {
  /** Takes a sidecar's WebSocket upgrade (its key checked) onto the hub. */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void>;
  /** How many hosts are connected now (the server's metrics). */
  connectedCount(): number;
  close(): void;
}

export function openHostConnections(
  store: Store,
  options: {
    /** How long a call waits for an absent host. */
    waitForHostMs?: number;
    /** This server replica (written as the holder of each host that connects). */
    replicaId?: string;
  } = {},
): HostConnections {
  return new HostHub(store, options);
}
