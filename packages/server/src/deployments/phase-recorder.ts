/**
 * One deployment's phase log: each phase recorded in the store as it starts and ends, with its
 * evidence or its reason, and announced to whoever follows the deployment (SSE, ?wait=true).
 */
import type { EventEmitter } from "node:events";
import { DenvError } from "@denv/protocol";
import { newId, now } from "../ids.ts";
import { currentTrace, serverLog } from "../server-log.ts";
import type { DeploymentObserver } from "../server-metrics.ts";
import { writeDeploymentProgress } from "../store/deployment-store.ts";
import type { Store } from "../store/open-store.ts";
import type { DeploymentsTable } from "../store/schema.ts";

/** The seed's eleven phases of a deploy. */
export const DEPLOY_PHASES = [
  "resolve",
  "place",
  "provision",
  "join",
  "prepare",
  "start",
  "health",
  "warm",
  "snapshot",
  "ingress",
  "verdict",
] as const;

export type DeploymentKind = "deploy" | "snapshot" | "fork" | "rollback" | "promote" | "destroy" | "verify";
export type PhaseStatus = "pending" | "running" | "succeeded" | "failed" | "skipped";

export interface Phase {
  name: string;
  status: PhaseStatus;
  started_at: string | null;
  finished_at: string | null;
  duration_ms: number | null;
  evidence: unknown;
  reason: string | null;
}

/** What a deployment must undo if it fails, kept in the store so a restart can undo it too. */
/** A sandbox at a hosted target, by the target's name and the provider's id of it. */
export interface HostedSandboxRef {
  target: string;
  sandbox_id: string;
}

export interface DeploymentState {
  host_id?: string;
  /** A cloud machine this deployment created; deleted if its provisioning or join fails. */
  machine_id?: string;
  /**
   * The stack this deployment is building on its host; removed if the deployment fails. Its id is
   * chosen here and written down before the host is asked, so a restart can always name it.
   */
  building_stack_id?: string;
  /** A version this deployment is snapshotting, chosen and written down before the host is asked. */
  building_version_id?: string;
  /** The stack a deploy replaces: removed once the environment points at the new one. */
  retiring_stack_id?: string;
  /** A verify's grader fork (its clone phase), removed whatever happens. */
  grader_stack_id?: string;
  /**
   * A sandbox a deploy made at a hosted target, written down as soon as the provider answered its id
   * (it cannot be chosen before): ended if the deployment does not finish.
   */
  building_sandbox?: HostedSandboxRef;
  /** The hosted sandbox a deploy replaces: ended once the environment no longer points at it. */
  retiring_sandbox?: HostedSandboxRef;
  /** Set once a verify froze an agent that was running before it: a stopped server's verify thaws it. */
  froze_agent?: boolean;
  /** A rollback's target: a stopped server finishes the restore the host already began. */
  target_version_id?: string;
}

/** Raised by a phase to fail the deployment with a reason (and evidence). */
export class PhaseFailure extends Error {
  readonly evidence: unknown;
  constructor(message: string, evidence?: unknown) {
    super(message);
    this.evidence = evidence;
  }
}

export interface RecorderDeps {
  store: Store;
  events: EventEmitter;
  /** The deployment's kind, for its observer. */
  kind?: string;
  /** Told of the verdict, with the phases (the server's metrics). */
  observer?: DeploymentObserver | undefined;
  /**
   * The replica holding the deployment's lease (replicas/deployment-leases.ts): every write is
   * made only while it still does, so a replica that lost it (paused past the lease, then taken
   * over) stops at its next write instead of overwriting the one that took over.
   */
  leaseOwner?: string | undefined;
}

export class PhaseRecorder {
  readonly phases: Phase[];
  state: DeploymentState = {};
  private readonly startedAt = new Map<string, number>();
  /** Who asked this deployment to stop, as its last write read back; null: nobody. */
  private cancelRequestedBy: string | null = null;
  /** Past its point of no return (commit()): a cancel asked now stops nothing. */
  private committed = false;
  readonly deploymentId: string;
  private readonly deps: RecorderDeps;

  constructor(deploymentId: string, names: readonly string[], deps: RecorderDeps) {
    this.deploymentId = deploymentId;
    this.deps = deps;
    this.phases = names.map((name) => ({
      name,
      status: "pending",
      started_at: null,
      finished_at: null,
      duration_ms: null,
      evidence: null,
      reason: null,
    }));
  }

  /** A recorder for a deployment already in the store (recovery after a restart). */
  static resume(row: DeploymentsTable, deps: RecorderDeps): PhaseRecorder {
    const rec = new PhaseRecorder(row.id, [], { ...deps, kind: row.kind });
    rec.phases.push(...(JSON.parse(row.phases_json) as Phase[]));
    rec.state = JSON.parse(row.state_json) as DeploymentState;
    return rec;
  }

  private phase(name: string): Phase {
    const p = this.phases.find((x) => x.name === name);
    if (!p) throw new Error(`no phase ${name}`);
    return p;
  }

  async persist(
    extra: Partial<Pick<DeploymentsTable, "status" | "reason" | "finished_at">> = {},
  ): Promise<void> {
    const { written, cancelRequestedBy } = await writeDeploymentProgress(
      this.deps.store,
      this.deploymentId,
      {
        phases_json: JSON.stringify(this.phases),
        state_json: JSON.stringify(this.state),
        ...extra,
      },
      this.deps.leaseOwner,
    );
    this.cancelRequestedBy = cancelRequestedBy;
    if (!written)
      throw new DenvError(
        "conflict",
        `deployment ${this.deploymentId} was taken over by another server replica (this one's lease lapsed); it goes on there`,
      );
    this.deps.events.emit(this.deploymentId, { phases: this.phases, ...extra });
  }

  /**
   * The id of the stack this deployment is about to have its host make, chosen and written down
   * before the host is asked (so whatever dies next, the stack can be named and removed).
   */
  async building(): Promise<string> {
    const id = newId("stk");
    this.state.building_stack_id = id;
    await this.persist();
    return id;
  }

  /** Runs a phase: running, then succeeded with its evidence, or failed with the reason. */
  async run<T>(name: string, fn: () => Promise<{ evidence: unknown; value?: T }>): Promise<T | undefined> {
    const p = this.phase(name);
    p.status = "running";
    p.started_at = now();
    this.startedAt.set(name, performance.now());
    await this.persist();
    try {
      // Asked to stop (read back as the phase was written): this phase does not begin, and the
      // deployment fails as if it had, undoing what it made (its kind's own failure path).
      if (this.cancelRequestedBy && !this.committed)
        throw new PhaseFailure(`cancelled by ${this.cancelRequestedBy} before ${name} began`, {
          cancelled_by: this.cancelRequestedBy,
        });
      const { evidence, value } = await fn();
      p.status = "succeeded";
      p.evidence = evidence;
      return value;
    } catch (err) {
      p.status = "failed";
      p.reason = err instanceof Error ? err.message : String(err);
      p.evidence =
        err instanceof PhaseFailure
          ? err.evidence
          : err instanceof DenvError
            ? { code: err.code, details: err.details ?? null }
            : null;
      throw err;
    } finally {
      clearTimeout(this.progressPending);
      this.progressPending = undefined;
      p.finished_at = now();
      p.duration_ms = Math.round(performance.now() - (this.startedAt.get(name) ?? performance.now()));
      await this.persist();
    }
  }

  /**
   * Time one host step measured for two phases, given to each: the host starts services and waits
   * for their health in one operation, so `from` (start) ran `ms` of `to`'s (health) waiting. The
   * last `ms` of `from` become `to`'s, and the timeline and durations say what each took.
   */
  async carve(from: string, to: string, ms: number): Promise<void> {
    const a = this.phase(from);
    const b = this.phase(to);
    if (a.status !== "succeeded" || !a.finished_at || a.duration_ms === null || !(ms > 0)) return;
    const taken = Math.min(Math.round(ms), a.duration_ms);
    const end = Date.parse(a.finished_at);
    a.duration_ms -= taken;
    a.finished_at = new Date(end - taken).toISOString();
    b.started_at = a.finished_at;
    b.finished_at = new Date(end + (b.duration_ms ?? 0)).toISOString();
    b.duration_ms = taken + (b.duration_ms ?? 0);
    await this.persist();
  }

  /**
   * The deployment is past its point of no return (the environment switched, a restore done): the
   * phases left record what happened, and a cancel asked from now on does not stop them, since
   * stopping could not undo it.
   */
  commit(): void {
    this.committed = true;
  }

  /**
   * What a running phase has to show before it ends (a build's log as it comes): set as its
   * evidence and announced, written to the store at most every 500 ms.
   */
  async progress(name: string, evidence: unknown): Promise<void> {
    const p = this.phase(name);
    if (p.status !== "running") return;
    p.evidence = evidence;
    const t = performance.now();
    if (t - this.lastProgressAt < 500) {
      this.progressPending ??= setTimeout(() => {
        this.progressPending = undefined;
        void this.progress(name, p.evidence).catch(() => {});
      }, 500);
      return;
    }
    this.lastProgressAt = t;
    await this.persist();
  }
  private lastProgressAt = 0;
  private progressPending: NodeJS.Timeout | undefined;

  async skip(name: string, reason: string, evidence: unknown = null): Promise<void> {
    const p = this.phase(name);
    Object.assign(p, {
      status: "skipped",
      reason,
      evidence,
      started_at: now(),
      finished_at: now(),
      duration_ms: 0,
    });
    await this.persist();
  }

  /** Phases still running when the server stopped are failed, with that as the reason. */
  failRunning(reason: string): void {
    for (const p of this.phases)
      if (p.status === "running") Object.assign(p, { status: "failed", reason, finished_at: now() });
  }

  async skipRest(reason: string): Promise<void> {
    for (const p of this.phases) {
      if (p.status === "pending" && p.name !== "verdict") Object.assign(p, { status: "skipped", reason });
    }
    await this.persist();
  }

  async verdict(
    status: "succeeded" | "rolled_back" | "failed",
    reason: string | null,
    evidence: unknown,
  ): Promise<void> {
    const p = this.phase("verdict");
    Object.assign(p, {
      status: status === "succeeded" ? "succeeded" : "failed",
      started_at: p.started_at ?? now(),
      finished_at: now(),
      duration_ms: 0,
      evidence,
      reason,
    });
    await this.persist({ status, reason, finished_at: now() });
    this.deps.observer?.deploymentEnded(this.deps.kind ?? "unknown", status, this.phases);
    // What an operator reads in the server's log: which deployment, how it ended, where it failed.
    // Not the reason: it may quote a service's output (the deployment's record keeps it).
    const failed = this.phases.find((x) => x.status === "failed" && x.name !== "verdict");
    const code = (failed?.evidence as { code?: unknown } | null | undefined)?.code;
    serverLog().info(
      {
        // Named once: a verdict written in the deployment's own trace has its id on the line already.
        ...(currentTrace()?.deployment_id === this.deploymentId ? {} : { deployment_id: this.deploymentId }),
        kind: this.deps.kind,
        status,
        ms: this.phases.reduce((n, x) => n + (x.duration_ms ?? 0), 0),
        ...(failed ? { failed_phase: failed.name, ...(typeof code === "string" ? { code } : {}) } : {}),
      },
      "deployment ended",
    );
  }
}
