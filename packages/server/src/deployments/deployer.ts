/**
 * The deployment engine: every change to an environment is a deployment, run in phases, each
 * recorded as it happens with its evidence (phase-recorder.ts), one at a time per environment
 * (deployment-runner.ts). One module per kind: deploy, fork, snapshot, rollback, verify, destroy,
 * and the recovery of deployments a stopped server left running.
 */

import type { BuildContexts } from "../build-contexts.ts";
import type { Admission } from "../placement/admission.ts";
import { deploymentById } from "../store/deployment-store.ts";
import type { DeploymentsTable, EnvironmentsTable, ProjectsTable, VersionsTable } from "../store/schema.ts";
import type { LiveMode } from "../targets/stack-lifecycle.ts";
import { ANSWER_WITHIN_MS, awaitVerdict } from "./answer-deadline.ts";
import { type DeployOptions, runDeploy } from "./deploy-kind.ts";
import { recoverDeployments } from "./deployment-recovery.ts";
import {
  type Deployed,
  type DeployerOptions,
  type DeploymentEvents,
  DeploymentRunner,
  type Launched,
} from "./deployment-runner.ts";
import { runDestroy } from "./destroy-kind.ts";
import { type EgressPolicy, readEgress, runSetEgress } from "./egress-change.ts";
import { type ForkOptions, runFork } from "./fork-kind.ts";
import { syncHostStatuses } from "./host-sync.ts";
import { IdlePauses } from "./idle-pause.ts";
import { type PromoteOptions, runPromote } from "./promote-kind.ts";
import { runPause, runResume } from "./resume-kind.ts";
import { runRollback } from "./rollback-kind.ts";
import { runSnapshot } from "./snapshot-kind.ts";
import { runVerify } from "./verify-kind.ts";

export type { DeployerOptions } from "./deployment-runner.ts";
export { DEPLOY_PHASES } from "./phase-recorder.ts";

export class Deployer {
  private readonly runner: DeploymentRunner;
  /** x-denv.idle_pause_s: activity noted, idle environments paused, the next request resuming them. */
  readonly idle: IdlePauses;

  constructor(options: DeployerOptions) {
    this.runner = new DeploymentRunner(options);
    this.idle = new IdlePauses(this.runner);
  }

  /**
   * Waits for a deployment's verdict, at most as long as a request may be held: past that it
   * throws `timeout` with the deployment's id (answer-deadline.ts).
   */
  awaitVerdict(made: { deploymentId: string; done: Promise<unknown> }, what: string): Promise<void> {
    return awaitVerdict(made, what, this.runner.options.answerWithinMs ?? ANSWER_WITHIN_MS);
  }

  /** Build contexts uploaded with local projects, read by the prepare phase. */
  get buildContexts(): BuildContexts {
    return this.runner.buildContexts;
  }

  /** Told of each deploy that made a version (after its verdict): pools and replicas follow it. */
  onDeployed(listener: (d: Deployed) => void): void {
    this.runner.deployed.on("deployed", listener);
  }

  /** Each deployment's id is an event name, emitted on every change to it. */
  get events(): DeploymentEvents {
    return this.runner.events;
  }

  getDeployment(id: string): Promise<DeploymentsTable | undefined> {
    return deploymentById(this.runner.store, id);
  }

  /** Deploys a project to a named environment (made when new); returns at once. */
  deploy(
    project: ProjectsTable,
    envName: string,
    options: DeployOptions = {},
  ): Promise<Launched & { environmentId: string }> {
    return runDeploy(this.runner, project, envName, options);
  }

  /** A new environment from a version, on the host that holds the version's data (or a pool's member). */
  fork(versionId: string, options: ForkOptions): Promise<Launched & { environmentId: string }> {
    return runFork(this.runner, versionId, options);
  }

  /** Captures a running environment's live state as a new version. */
  snapshot(env: EnvironmentsTable, options: { live?: LiveMode } = {}): Promise<Launched> {
    return runSnapshot(this.runner, env, options);
  }

  /** Restores an environment to one of its versions and re-checks health. */
  rollback(env: EnvironmentsTable, versionId: string): Promise<Launched> {
    return runRollback(this.runner, env, versionId);
  }

  /** Grades an environment on a fork, as a separate principal (verify-kind.ts). */
  verify(env: EnvironmentsTable, options: { resume?: boolean }): Promise<Launched> {
    return runVerify(this.runner, env, options);
  }

  /** Pause that keeps memory (resume-kind.ts); answers it paused. */
  pause(env: EnvironmentsTable): Promise<EnvironmentsTable> {
    return runPause(this.runner, env);
  }

  /** An environment's egress policy replaced while it runs (egress-change.ts). */
  setEgress(env: EnvironmentsTable, policy: EgressPolicy) {
    return runSetEgress(this.runner, env, policy);
  }

  /** An environment's egress policy now and its log. */
  egress(env: EnvironmentsTable, limit?: number) {
    return readEgress(this.runner, env, limit);
  }

  /**
   * Thaws an environment a verify froze for inspection, or resumes a paused one from its
   * checkpoints (resume-kind.ts); answers it running.
   */
  resume(env: EnvironmentsTable): Promise<EnvironmentsTable> {
    return runResume(this.runner, env);
  }

  /** Moves a version to an environment through the promote gates (promote-kind.ts). */
  promote(
    admission: Admission,
    args: { project: ProjectsTable; version: VersionsTable; fromName: string | null; target: string },
    options: PromoteOptions,
  ): Promise<Launched & { environmentId: string }> {
    return runPromote(this.runner, this, admission, args, options);
  }

  /** Removes an environment's stack and data. Its versions stay. */
  destroy(env: EnvironmentsTable): Promise<Launched> {
    return runDestroy(this.runner, env);
  }

  /**
   * Ends deployments a stopped server (or a replica that died) left running (deployment-recovery.ts):
   * the ones given, or every running one.
   */
  recover(deployments?: DeploymentsTable[]): Promise<string[]> {
    return recoverDeployments(this.runner, deployments);
  }

  /** A host said hello: its environments' statuses are set to what it holds (host-sync.ts). */
  syncHost(hostId: string): Promise<string[]> {
    return syncHostStatuses(this.runner, hostId);
  }
}
