/**
 * What an operator's Prometheus scrapes at `/metrics` (prom-client), one registry per server:
 * deployments by kind and verdict, each phase's duration, the API's requests by route and their
 * latency (fork, sandbox and exec among them), hosts connected, warm pools' ready members and their
 * hits and misses, and the process's own figures (prom-client's defaults). A label is a route's
 * template, a kind, a phase or a status, never an id: the series stay bounded, and nothing in them
 * names a team or its objects.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

/** Where the gauges read their figures at each scrape. */
export interface MetricSources {
  hostsConnected(): number;
  pools(): Promise<{ ready: number; hits: number; misses: number }>;
  /**
   * What the connected hosts last reported over their connections (hello and heartbeats), summed
   * over them: disk and memory, total and free, and CPUs. Absent: not served.
   */
  hostFigures?(): Promise<HostFigures>;
}

export interface HostFigures {
  disk_total_bytes: number;
  disk_free_bytes: number;
  memory_total_bytes: number;
  memory_free_bytes: number;
  cpus: number;
}

/** What a deployment reports as it ends. */
export interface DeploymentObserver {
  deploymentEnded(
    kind: string,
    status: string,
    phases: readonly { name: string; status: string; duration_ms: number | null }[],
  ): void;
}

/** What a version's copy to another host reports as it ends (replication.ts). */
export interface ReplicationObserver {
  replicationEnded(status: "succeeded" | "failed", format: string, bytes: number, seconds: number): void;
}

/** Seconds, from a tenth of a millisecond (an exec's round trip) to ten minutes (a first deploy). */
const BUCKETS_S = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

export class ServerMetrics implements DeploymentObserver, ReplicationObserver {
  readonly registry = new Registry();
  private readonly deployments: Counter<"kind" | "status">;
  private readonly phaseSeconds: Histogram<"kind" | "phase" | "status">;
  private readonly requestSeconds: Histogram<"method" | "route" | "status">;
  private readonly replications: Counter<"format" | "status">;
  private readonly replicationBytes: Counter<"format">;
  private readonly replicationSeconds: Histogram<"format" | "status">;

  constructor(sources: MetricSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: "denv_server_" });
    this.deployments = new Counter({
      name: "denv_deployments_total",
      help: "Deployments ended, by kind (deploy, fork, snapshot, verify, ...) and verdict",
      labelNames: ["kind", "status"],
      registers,
    });
    this.phaseSeconds = new Histogram({
      name: "denv_deployment_phase_seconds",
      help: "How long each phase of an ended deployment ran, by kind, phase and the phase's status",
      labelNames: ["kind", "phase", "status"],
      buckets: BUCKETS_S,
      registers,
    });
    this.requestSeconds = new Histogram({
      name: "denv_http_request_seconds",
      help: "API requests answered, by method, route template and status code (a stream: until its head)",
      labelNames: ["method", "route", "status"],
      buckets: BUCKETS_S,
      registers,
    });
    this.replications = new Counter({
      name: "denv_replications_total",
      help: "Copies of versions made on other hosts (or failed), by stream format (btrfs-send, zfs-send, tar)",
      labelNames: ["format", "status"],
      registers,
    });
    this.replicationBytes = new Counter({
      name: "denv_replication_bytes_total",
      help: "Bytes of snapshots relayed host to host for the copies made, by stream format",
      labelNames: ["format"],
      registers,
    });
    this.replicationSeconds = new Histogram({
      name: "denv_replication_seconds",
      help: "How long a copy took, from the first request to the host adopting it (or the failure)",
      labelNames: ["format", "status"],
      buckets: BUCKETS_S,
      registers,
    });
    new Gauge({
      name: "denv_hosts_connected",
      help: "Sidecar hosts connected to this server now",
      registers,
      collect() {
        this.set(sources.hostsConnected());
      },
    });
    if (sources.hostFigures) {
      const read = sources.hostFigures;
      let hostFigures: Promise<HostFigures> | null = null;
      const figuresNow = () => {
        hostFigures ??= read().finally(() => {
          hostFigures = null;
        });
        return hostFigures;
      };
      new Gauge({
        name: "denv_hosts_capacity_bytes",
        help: "What the connected hosts last reported over their connections, summed: disk and memory, total and free",
        labelNames: ["resource", "state"],
        registers,
        async collect() {
          const f = await figuresNow();
          this.set({ resource: "disk", state: "total" }, f.disk_total_bytes);
          this.set({ resource: "disk", state: "free" }, f.disk_free_bytes);
          this.set({ resource: "memory", state: "total" }, f.memory_total_bytes);
          this.set({ resource: "memory", state: "free" }, f.memory_free_bytes);
        },
      });
      new Gauge({
        name: "denv_hosts_cpus",
        help: "CPUs of the connected hosts, summed",
        registers,
        async collect() {
          this.set((await figuresNow()).cpus);
        },
      });
    }
    // One read of the pools serves the three gauges of a scrape (collected together): it is
    // shared until it settles, and the next scrape reads afresh.
    let figures: Promise<{ ready: number; hits: number; misses: number }> | null = null;
    const poolFigures = () => {
      figures ??= sources.pools().finally(() => {
        figures = null;
      });
      return figures;
    };
    new Gauge({
      name: "denv_pool_ready_members",
      help: "Warm pool members ready to be handed out, over every pool",
      registers,
      async collect() {
        this.set((await poolFigures()).ready);
      },
    });
    new Gauge({
      name: "denv_pool_hits",
      help: "Creates served from a warm pool since each pool was made (hit rate: hits / (hits + misses))",
      registers,
      async collect() {
        this.set((await poolFigures()).hits);
      },
    });
    new Gauge({
      name: "denv_pool_misses",
      help: "Creates that found their version's pool empty and forked cold",
      registers,
      async collect() {
        this.set((await poolFigures()).misses);
      },
    });
  }

  deploymentEnded(
    kind: string,
    status: string,
    phases: readonly { name: string; status: string; duration_ms: number | null }[],
  ): void {
    this.deployments.inc({ kind, status });
    for (const p of phases)
      if (p.duration_ms !== null && (p.status === "succeeded" || p.status === "failed"))
        this.phaseSeconds.observe({ kind, phase: p.name, status: p.status }, p.duration_ms / 1000);
  }

  replicationEnded(status: "succeeded" | "failed", format: string, bytes: number, seconds: number): void {
    this.replications.inc({ format, status });
    if (bytes > 0) this.replicationBytes.inc({ format }, bytes);
    this.replicationSeconds.observe({ format, status }, seconds);
  }

  request(method: string, route: string, status: number, seconds: number): void {
    this.requestSeconds.observe({ method, route, status: String(status) }, seconds);
  }

  /** The exposition text and its content type. */
  async scrape(): Promise<{ body: string; contentType: string }> {
    return { body: await this.registry.metrics(), contentType: this.registry.contentType };
  }
}
