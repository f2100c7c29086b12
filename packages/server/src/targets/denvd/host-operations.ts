/**
 * A team's sidecar hosts as the rest of the server reaches them: typed operations (`@denv/protocol`
 * operations.ts) sent to one host, with byte streams where an operation moves bytes. The WebSocket
 * hub (host-hub.ts) is its one implementation and stays inside the denvd target: the deployment
 * kinds, pools, replay, promote, port URLs and routes depend on this port, never on the hosts, so a
 * fleet's relay or a test's stand-in can take its place.
 */
import type { Duplex } from "node:stream";
import type { MuxStream, OpMethod, OpParams, OpResult } from "@denv/protocol";

export interface HostCallOptions {
  /** The operation's id; the same id sent again is run at most once by the host. */
  opId?: string;
  /** Instead of the operation's own deadline (`operationDeadlineMs`). */
  timeoutMs?: number;
  /** How long to wait for an absent host before failing with host_unavailable. */
  waitForHostMs?: number;
}

export interface HostOperations {
  /** Runs an operation on a host and resolves to its result (sent again, same id, on a reconnect). */
  call<M extends OpMethod>(
    hostId: string,
    method: M,
    params: OpParams<M>,
    options?: HostCallOptions,
  ): Promise<OpResult<M>>;
  /**
   * An operation that moves bytes: `count` streams opened on the host's connection, the params
   * built from their ids; resolves once sent, with the streams and the result to come.
   */
  streamCall<M extends OpMethod>(
    hostId: string,
    method: M,
    count: number,
    build: (ids: number[]) => OpParams<M>,
    options?: HostCallOptions & { streamsOutliveOp?: boolean },
  ): Promise<{ streams: MuxStream[]; result: Promise<OpResult<M>> }>;
  /**
   * A byte stream to a port inside an environment's service. With `early`, the stream is given as
   * soon as the open is sent (what is written waits on the host until the port is reached), and a
   * failed open destroys it with the host's error: one round trip less for a request relayed on it.
   */
  openTunnel(
    hostId: string,
    params: { stack_id: string; service?: string | undefined; port: number },
    options?: { early?: boolean },
  ): Promise<Duplex>;
  isConnected(hostId: string): boolean;
  /** Resolves when the host is connected, or rejects after timeoutMs. */
  waitConnected(hostId: string, timeoutMs: number): Promise<void>;
  /** Called each time a host says hello (first connection and every reconnect). */
  onHostReady(listener: (hostId: string) => void): void;
}

/**
 * A tunnel's stream once its open has answered, or at once (`early`) with a failed open destroying
 * it with the host's error.
 */
export async function tunnelStream(
  stream: MuxStream,
  opened: Promise<unknown>,
  early: boolean,
): Promise<Duplex> {
  if (early) {
    opened.catch((err: Error) => stream.destroy(err));
    return stream;
  }
  try {
    await opened;
  } catch (err) {
    stream.destroy();
    throw err;
  }
  return stream;
}
