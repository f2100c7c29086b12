/**
 * Runs deployments: records a new one with its phases, runs its body one at a time per
 * environment, and on failure skips what is left and ends it with the reason. A deploy or fork
 * that fails is rolled back: what it built is removed and the environment keeps its version.
 * Each deployment kind (deploy-kind.ts, fork-kind.ts, …) is a body run here.
 */
import { EventEmitter } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ComposeValidator } from "@denv/spec";
import { BuildContexts } from "../build-contexts.ts";
import type { Provisioner } from "../clouds/provisioner.ts";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { FetchPolicy } from "../fetch-policy.ts";
import { newId, now } from "../ids.ts";
import type { IngressDeps } from "../ingress/ingress-phase.ts";
import { serverLog, withTrace } from "../server-log.ts";
import type { DeploymentObserver } from "../server-metrics.ts";
import { deploymentById, insertDeployment, olderRunningElsewhere } from "../store/deployment-store.ts";
import { updateEnvironment } from "../store/environment-store.ts";
import type { Store } from "../store/open-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import type { StackLifecycle } from "../targets/stack-lifecycle.ts";
import { type DeploymentKind, PhaseRecorder } from "./phase-recorder.ts";
import type { GitHubSourceReader } from "./project-source.ts";

export interface DeployerOptions {
  store: Store;
  /** The team's hosts, through the lifecycle port (targets/stack-lifecycle.ts). */
  stacks: StackLifecycle;
  /** Checks compose files off the event loop, under a time and memory budget. */
  validator: ComposeValidator;
  /** Hosts the resolve phase may fetch from (registries, git sources). */
  fetchPolicy: FetchPolicy;
  /** Seals what is kept at rest that may hold a team's secrets (sources, resolved specs). */
  secrets: SecretBox;
  /** How long a deploy waits for a disconnected host to come back in its join phase. */
  joinWaitMs?: number;
  /** Creates machines in connected clouds when no host has capacity (the provision phase). */
  provisioner?: Provisioner;
  /** How long the join phase waits for a machine it created (default 15 minutes). */
  provisionJoinWaitMs?: number;
  /** Build contexts uploaded with local projects (default: a directory of its own under the temp dir). */
  buildContexts?: BuildContexts;
  /**
   * How long a request waiting for a verdict is held before it is answered `timeout` with the
   * deployment to follow (default ANSWER_WITHIN_MS, under the 300 s HTTP clients give up at).
   */
  answerWithinMs?: number;
  /** Told of every deployment's verdict, with its phases (the server's metrics). */
  observer?: DeploymentObserver;
  /** The lease each new deployment starts under (replicas/deployment-leases.ts renews it). */
  lease?: { owner: string; ms: number };
  /** Names for published ports (the ingress phase); absent or null: the phase is skipped, saying why. */
  ingress?: IngressDeps | null;
  /** Reads github: sources through the team's App (github/github-apps.ts). */
  github?: GitHubSourceReader;
}

/**
 * A deploy that made a version. `pool`: the size x-denv.pool declares, for a deploy of the
 * project's production environment; null for any other (the pool is left as it is).
 */
export interface Deployed {
  teamId: string;
  projectId: string;
  versionId: string;
  pool: number | null;
}

/** A deployment under way: its id, and a promise settled once it has its verdict. */
export interface Launched {
  deploymentId: string;
  done: Promise<void>;
}

/** Each deployment's changes, to whoever follows it on this replica; `relay` tells the others. */
export class DeploymentEvents extends EventEmitter {
  relay: ((deploymentId: string) => void) | null = null;

  override emit(event: string | symbol, ...args: unknown[]): boolean {
    if (typeof event === "string" && this.relay) this.relay(event);
    return super.emit(event, ...args);
  }

  /** Another replica changed the deployment: its followers here read it again. */
  wake(deploymentId: string): void {
    super.emit(deploymentId);
  }
}

/** How often a deployment waiting on another replica's deployment of its environment looks again. */
const ELSEWHERE_POLL_MS = 250;

export class DeploymentRunner {
  readonly events = new DeploymentEvents();
  /** Each deploy that made a version, to whoever keeps what follows from it (pools, replicas). */
  readonly deployed = new EventEmitter<{ deployed: [Deployed] }>();
  readonly store: Store;
  readonly stacks: StackLifecycle;
  readonly options: DeployerOptions;
  readonly buildContexts: BuildContexts;
  private readonly locks = new Map<string, Promise<unknown>>();

  constructor(options: DeployerOptions) {
    this.options = options;
    this.store = options.store;
    this.stacks = options.stacks;
    this.buildContexts =
      options.buildContexts ?? new BuildContexts(join(tmpdir(), `denv-server-${process.pid}`));
    this.events.setMaxListeners(0);
  }

  /** Records a new deployment, running, with its phases pending. */
  async begin(
    teamId: string,
    environmentId: string,
    kind: DeploymentKind,
    phases: readonly string[],
  ): Promise<PhaseRecorder> {
    const id = newId("dep");
    const rec = new PhaseRecorder(id, phases, {
      store: this.store,
      events: this.events,
      kind,
      leaseOwner: this.options.lease?.owner,
      observer: this.options.observer,
    });
    serverLog().info({ deployment_id: id, kind, environment_id: environmentId }, "deployment begun");
    await insertDeployment(this.store, {
      id,
      team_id: teamId,
      environment_id: environmentId,
      kind,
      status: "running",
      phases_json: JSON.stringify(rec.phases),
      reason: null,
      state_json: "{}",
      created_at: now(),
      finished_at: null,
      lease_owner: this.options.lease?.owner ?? null,
      lease_until: this.options.lease ? Date.now() + this.options.lease.ms : null,
    });
    return rec;
  }

  /** One deployment at a time per environment: each waits for the one before it. */
  serialize<T>(environmentId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(environmentId) ?? Promise.resolve();
    const next = prev.catch(() => {}).then(fn);
    this.locks.set(environmentId, next);
    void next
      .finally(() => {
        if (this.locks.get(environmentId) === next) this.locks.delete(environmentId);
      })
      .catch(() => {});
    return next;
  }

  /**
   * Runs a deployment's body in its environment's turn. A throw skips what is left and fails
   * the deployment with the reason; `onError` (a rollback) may end it otherwise.
   */
  launch(
    rec: PhaseRecorder,
    environmentId: string,
    body: () => Promise<void>,
    onError?: (err: unknown) => Promise<void>,
  ): Launched {
    // Its phases' log lines and host operations (its rollback's included) name the deployment.
    const done = this.serialize(environmentId, () =>
      withTrace({ deployment_id: rec.deploymentId }, async () => {
        try {
          await this.afterOlderElsewhere(rec.deploymentId, environmentId);
          await body();
        } catch (err) {
          if (onError) return onError(err);
          await rec.skipRest("skipped: an earlier phase failed");
          await rec.verdict("failed", err instanceof Error ? err.message : String(err), null);
        }
      }),
    );
    done.catch(() => {});
    return { deploymentId: rec.deploymentId, done };
  }

  /**
   * The environment's turn across server replicas: deployments of it that other replicas began
   * earlier (or that a dead one left, until they are taken over and ended) finish first. Within
   * this replica `serialize` keeps the order; the earlier of two never waits on the later.
   */
  private async afterOlderElsewhere(deploymentId: string, environmentId: string): Promise<void> {
    const owner = this.options.lease?.owner;
    if (!owner) return;
    const me = await deploymentById(this.store, deploymentId);
    if (!me) return;
    for (;;) {
      const older = await olderRunningElsewhere(this.store, environmentId, me, owner);
      if (!older) return;
      await new Promise((r) => setTimeout(r, ELSEWHERE_POLL_MS));
    }
  }

  /** A failed deploy or fork: remove what it built, keep the previous version serving, say why. */
  async rollBack(rec: PhaseRecorder, before: EnvironmentsTable, err: unknown): Promise<void> {
    const reason = err instanceof Error ? err.message : String(err);
    await rec.skipRest("skipped: an earlier phase failed");
    if (rec.state.machine_id && this.options.provisioner) {
      await this.options.provisioner.remove(rec.state.machine_id).catch(() => {});
    }
    const building = rec.state.building_stack_id;
    if (building && rec.state.host_id) {
      await this.stacks
        .destroy({ hostId: rec.state.host_id, stackId: building }, { timeoutMs: 120_000 })
        .catch(() => {});
    }
    // The GPUs it held before (place takes new ones at once, so no other deploy takes them too).
    await updateEnvironment(this.store, before.id, {
      gpus_json: before.gpus_json ?? null,
      ...(before.current_version_id ? {} : { status: "failed" }),
    });
    await rec.verdict("rolled_back", reason, {
      restored_version: before.current_version_id,
      still_serving: before.current_version_id !== null,
    });
  }

  /** Waits for a host to connect, when it is not; the join phase's evidence. */
  async joinPhase(rec: PhaseRecorder, hostId: string): Promise<void> {
    if (this.stacks.hostConnected(hostId)) {
      await rec.skip("join", "the host's sidecar is connected");
      return;
    }
    await rec.run("join", async () => {
      const t = performance.now();
      await this.stacks.waitForHost(hostId, this.options.joinWaitMs ?? 30_000);
      return { evidence: { waited_ms: Math.round(performance.now() - t) } };
    });
  }
}
