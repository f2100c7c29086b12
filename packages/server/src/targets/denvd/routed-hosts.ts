/**
 * The hosts as every replica sees them: a host connected here is called on this replica's hub; a
 * host whose connection another live replica holds (hosts.replica_id, written by that replica when
 * the host said hello) is called through the link to it (peer-links.ts). A host connected nowhere
 * is waited for, wherever it reconnects. A call whose link drops (its replica died) is routed
 * again, under the same operation id: denvd answers a repeated id from its first run, so the host
 * runs it at most once. Calls with streams are not sent again (their bytes went with the link).
 *
 * Where hosts are is read from the database every `refreshMs` (and at once when a call finds a
 * host in no replica): the store is how replicas learn of each other's connections.
 */
import type { Duplex } from "node:stream";
import { DenvError, type MuxStream, type OpMethod, type OpParams, type OpResult } from "@denv/protocol";
import { newId } from "../../ids.ts";
import type { LiveReplica, ReplicaRegistry } from "../../replicas/replica-registry.ts";
import { hostsOnOtherReplicas } from "../../store/host-store.ts";
import type { Store } from "../../store/open-store.ts";
import type { HostConnections } from "./host-connections.ts";
import { type HostCallOptions, type HostOperations, tunnelStream } from "./host-operations.ts";
import { isLinkDown, type PeerLinks } from "./peer-links.ts";

/** A call routed through links that drop this many times fails. */
const MAX_ROUTES = 3;
const POLL_MS = 200;

export class RoutedHosts implements HostOperations {
  private holders = new Map<string, LiveReplica>();
  /**
   * Replicas a link to just failed, until when: not routed to while their rows may still look
   * alive (a replica SIGKILLed is taken for dead only once its row is deadAfterMs old), so a call
   * waits for the host to show up elsewhere instead of failing at once against the dead one.
   */
  private readonly down = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private readonly local: HostConnections;
  private readonly store: Store;
  private readonly registry: ReplicaRegistry;
  private readonly links: PeerLinks;
  private readonly waitForHostMs: number;

  constructor(deps: {
    local: HostConnections;
    store: Store;
    registry: ReplicaRegistry;
    links: PeerLinks;
    waitForHostMs?: number;
  }) {
    this.local = deps.local;
    this.store = deps.store;
    this.registry = deps.registry;
    this.links = deps.links;
    this.waitForHostMs = deps.waitForHostMs ?? 10_000;
  }

  start(refreshMs = 1000): void {
    void this.refresh();
    this.timer = setInterval(() => void this.refresh(), refreshMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** Reads which live replica (other than this one) holds each connected host. */
  async refresh(): Promise<void> {
    const rows = await hostsOnOtherReplicas(
      this.store,
      this.registry.id,
      Date.now() - this.registry.deadAfterMs,
    ).catch(() => null);
    if (!rows) return;
    const t = Date.now();
    for (const [id, until] of this.down) if (until <= t) this.down.delete(id);
    this.holders = new Map(
      rows.filter((r) => !this.down.has(r.id)).map((r) => [r.host_id, { id: r.id, url: r.url }]),
    );
  }

  /**
   * Where a call for the host goes now: null for this replica's hub, else the replica holding it.
   * A host connected nowhere is waited for up to waitMs, then host_unavailable.
   */
  private async route(hostId: string, method: string, waitMs: number): Promise<LiveReplica | null> {
    const deadline = Date.now() + waitMs;
    for (let fresh = false; ; fresh = true) {
      if (this.local.isConnected(hostId)) return null;
      const holder = this.holders.get(hostId);
      if (holder) return holder;
      if (fresh && Date.now() >= deadline)
        throw new DenvError(
          "host_unavailable",
          `the environment's host is not connected (waited ${Math.round(waitMs / 1000)} s for ${method}); check it with denv host list`,
        );
      if (fresh) await new Promise((r) => setTimeout(r, POLL_MS));
      await this.refresh();
    }
  }

  async call<M extends OpMethod>(
    hostId: string,
    method: M,
    params: OpParams<M>,
    options: HostCallOptions = {},
  ): Promise<OpResult<M>> {
    const opId = options.opId ?? newId("op");
    const waitMs = options.waitForHostMs ?? this.waitForHostMs;
    for (let routes = 1; ; routes++) {
      const holder = await this.route(hostId, method, waitMs);
      if (!holder) return this.local.call(hostId, method, params, { ...options, opId });
      try {
        const link = await this.links.to(holder);
        return (await link.call(hostId, method, params, { ...options, opId })) as OpResult<M>;
      } catch (err) {
        if (!(err instanceof DenvError && err.code === "host_unavailable") || routes >= MAX_ROUTES) throw err;
        // The holder went away (or could not be reached): the host reconnects elsewhere. Or the
        // host left the holder: it is looked for again.
        if (isLinkDown(err)) this.markDown(holder);
        this.holders.delete(hostId);
      }
    }
  }

  async streamCall<M extends OpMethod>(
    hostId: string,
    method: M,
    count: number,
    build: (ids: number[]) => OpParams<M>,
    options: HostCallOptions & { streamsOutliveOp?: boolean } = {},
  ): Promise<{ streams: MuxStream[]; result: Promise<OpResult<M>> }> {
    const holder = await this.route(hostId, method, options.waitForHostMs ?? this.waitForHostMs);
    if (!holder) return this.local.streamCall(hostId, method, count, build, options);
    const link = await this.links.to(holder).catch((err: unknown) => {
      this.markDown(holder);
      this.holders.delete(hostId);
      throw err;
    });
    const streams = link.openStreams(count);
    const result = link.call(
      hostId,
      method,
      build(streams.map((s) => s.streamId)),
      { ...options, opId: options.opId ?? newId("op") },
      streams,
    ) as Promise<OpResult<M>>;
    result.then(
      () => {
        if (options.streamsOutliveOp) return;
        for (const s of streams) if (!s.destroyed && s.readableEnded) s.destroy();
      },
      (err) => {
        for (const s of streams) s.destroy(err);
      },
    );
    return { streams, result };
  }

  async openTunnel(
    hostId: string,
    params: { stack_id: string; service?: string | undefined; port: number },
    options?: { early?: boolean },
  ): Promise<Duplex> {
    const holder = await this.route(hostId, "open_tunnel", 0);
    if (!holder) return this.local.openTunnel(hostId, params, options);
    const { streams, result } = await this.streamCall(
      hostId,
      "open_tunnel",
      1,
      ([id]) => ({ ...params, stream_id: id as number }),
      { timeoutMs: 30_000, waitForHostMs: 0, streamsOutliveOp: true },
    );
    return tunnelStream(streams[0] as MuxStream, result, options?.early === true);
  }

  /** A link to the holder failed: it is not routed to for a while. */
  private markDown(holder: LiveReplica): void {
    this.down.set(holder.id, Date.now() + this.registry.deadAfterMs);
    for (const [h, r] of this.holders) if (r.id === holder.id) this.holders.delete(h);
  }

  isConnected(hostId: string): boolean {
    return this.local.isConnected(hostId) || this.holders.has(hostId);
  }

  async waitConnected(hostId: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (this.isConnected(hostId)) return;
      if (Date.now() >= deadline)
        throw new DenvError("host_unavailable", `host ${hostId} did not connect within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, POLL_MS));
      await this.refresh();
    }
  }

  /** Hellos on this replica's hub (each replica syncs the hosts that connect to it). */
  onHostReady(listener: (hostId: string) => void): void {
    this.local.onHostReady(listener);
  }
}
