/**
 * The deployment engine: every change to an environment is a deployment, run in phases, each
 * recorded as it happens with its evidence. A deploy runs the seed's eleven phases; when one fails
 * the rest are skipped, the stack being built is removed, the environment keeps serving its previous
 * healthy version, and the deployment ends rolled_back. Deployments of one environment run one at a
 * time. A deployment the server was running when it died is rolled back when it comes back.
 */
import { EventEmitter } from "node:events";
import type { OpResult } from "@denv/protocol";
import { DenvError, type ResolvedSpec } from "@denv/protocol";
import { type ComposeValidator, pinSpec, RegistryPinner } from "@denv/spec";
import type { ProvisionedMachine, Provisioner } from "./clouds/provisioner.ts";
import type { SecretBox } from "./clouds/secret-box.ts";
import type { FetchPolicy } from "./fetch-policy.ts";
import { readGitSource } from "./git-source.ts";
import type { HostHub } from "./host-hub.ts";
import { newId, now } from "./ids.ts";
import { revokePortUrls } from "./port-tunnels.ts";
import type { Store } from "./store/open-store.ts";
import type { CloudsTable, DeploymentsTable, EnvironmentsTable, ProjectsTable } from "./store/schema.ts";

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

export interface DeploymentState {
  host_id?: string;
  /** A cloud machine this deployment created; deleted if its provisioning or join fails. */
  machine_id?: string;
  /** The stack this deployment is building on its host; removed if the deployment fails. */
  building_stack_id?: string;
}

/** Where a deployment goes: a connected host, or a new machine in a connected cloud. */
type Placement =
  | { host_id: string; host_name: string; reason: string }
  | { provision: true; cloud: CloudsTable; reason: string };

/** Raised by a phase to fail the deployment with a reason (and evidence). */
class PhaseFailure extends Error {
  readonly evidence: unknown;
  constructor(message: string, evidence?: unknown) {
    super(message);
    this.evidence = evidence;
  }
}

/** Records one deployment's phases in the store as they happen and announces each change. */
class PhaseRecorder {
  readonly phases: Phase[];
  state: DeploymentState = {};
  private readonly startedAt = new Map<string, number>();
  readonly deploymentId: string;
  private readonly deps: { store: Store; events: EventEmitter };

  constructor(deploymentId: string, names: readonly string[], deps: { store: Store; events: EventEmitter }) {
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

  private phase(name: string): Phase {
    const p = this.phases.find((x) => x.name === name);
    if (!p) throw new Error(`no phase ${name}`);
    return p;
  }

  async persist(extra: Partial<DeploymentsTable> = {}): Promise<void> {
    await this.deps.store
      .updateTable("deployments")
      .set({ phases_json: JSON.stringify(this.phases), state_json: JSON.stringify(this.state), ...extra })
      .where("id", "=", this.deploymentId)
      .execute();
    this.deps.events.emit(this.deploymentId, { phases: this.phases, ...extra });
  }

  async run<T>(name: string, fn: () => Promise<{ evidence: unknown; value?: T }>): Promise<T | undefined> {
    const p = this.phase(name);
    p.status = "running";
    p.started_at = now();
    this.startedAt.set(name, performance.now());
    await this.persist();
    try {
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
      p.finished_at = now();
      p.duration_ms = Math.round(performance.now() - (this.startedAt.get(name) ?? performance.now()));
      await this.persist();
    }
  }

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
  }
}

export interface DeployerOptions {
  store: Store;
  hub: HostHub;
  /** Checks compose files off the event loop, under a time and memory budget. */
  validator: ComposeValidator;
  /** Hosts the resolve phase may fetch from (registries, git sources). */
  fetchPolicy: FetchPolicy;
  /** Seals what is kept at rest that may hold a team's secrets (sources, resolved specs). */
  secrets: SecretBox;
  /** Seconds a deploy waits for a disconnected host to come back in its join phase. */
  joinWaitMs?: number;
  /** Creates machines in connected clouds when no host has capacity (the provision phase). */
  provisioner?: Provisioner;
  /** How long the join phase waits for a machine it created (default 15 minutes). */
  provisionJoinWaitMs?: number;
}

/** A host with less free storage than this has no capacity for another environment. */
const MIN_FREE_BYTES = 1024 ** 3;

export class Deployer {
  readonly events = new EventEmitter();
  private readonly locks = new Map<string, Promise<unknown>>();
  private readonly store: Store;
  private readonly hub: HostHub;
  private readonly options: DeployerOptions;

  constructor(options: DeployerOptions) {
    this.options = options;
    this.store = options.store;
    this.hub = options.hub;
    this.events.setMaxListeners(0);
  }

  /** One deployment at a time per environment: each waits for the one before it. */
  private serialize<T>(environmentId: string, fn: () => Promise<T>): Promise<T> {
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
   * Runs a deployment's body, one at a time per environment; a throw skips what is left and fails
   * the deployment with the reason.
   */
  private launch(
    rec: PhaseRecorder,
    environmentId: string,
    body: () => Promise<void>,
  ): { deploymentId: string; done: Promise<void> } {
    const done = this.serialize(environmentId, async () => {
      try {
        await body();
      } catch (err) {
        await rec.skipRest("skipped: an earlier phase failed");
        await rec.verdict("failed", err instanceof Error ? err.message : String(err), null);
      }
    });
    done.catch(() => {});
    return { deploymentId: rec.deploymentId, done };
  }

  private async createDeployment(
    teamId: string,
    environmentId: string,
    kind: DeploymentKind,
    phases: readonly string[],
  ) {
    const id = newId("dep");
    const rec = new PhaseRecorder(id, phases, { store: this.store, events: this.events });
    await this.store
      .insertInto("deployments")
      .values({
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
      })
      .execute();
    return rec;
  }

  async getDeployment(id: string): Promise<DeploymentsTable | undefined> {
    return this.store.selectFrom("deployments").selectAll().where("id", "=", id).executeTakeFirst();
  }

  // -----------------------------------------------------------------------------------------------
  // deploy

  /** Starts a deploy of a project to a named environment; returns the deployment id at once. */
  async deploy(
    project: ProjectsTable,
    envName: string,
  ): Promise<{ deploymentId: string; environmentId: string; done: Promise<void> }> {
    const env = await this.findOrCreateEnvironment(project, envName);
    const rec = await this.createDeployment(project.team_id, env.id, "deploy", DEPLOY_PHASES);
    const done = this.serialize(env.id, () => this.runDeploy(rec, project, env.id));
    done.catch(() => {});
    return { deploymentId: rec.deploymentId, environmentId: env.id, done };
  }

  private async findOrCreateEnvironment(
    project: ProjectsTable,
    name: string,
    sandbox = false,
  ): Promise<EnvironmentsTable> {
    const existing = await this.store
      .selectFrom("environments")
      .selectAll()
      .where("project_id", "=", project.id)
      .where("name", "=", name)
      .executeTakeFirst();
    if (existing) return existing;
    const env: EnvironmentsTable = {
      id: newId("env"),
      team_id: project.team_id,
      project_id: project.id,
      name,
      status: "pending",
      host_id: null,
      stack_id: null,
      current_version_id: null,
      parent_version_id: null,
      sandbox: sandbox ? 1 : 0,
      created_at: now(),
    };
    await this.store.insertInto("environments").values(env).execute();
    return env;
  }

  private async environment(id: string): Promise<EnvironmentsTable> {
    const env = await this.store
      .selectFrom("environments")
      .selectAll()
      .where("id", "=", id)
      .executeTakeFirst();
    if (!env) throw new DenvError("not_found", `no environment ${id}`);
    return env;
  }

  private async runDeploy(rec: PhaseRecorder, project: ProjectsTable, environmentId: string): Promise<void> {
    const before = await this.environment(environmentId);
    let hostId: string | undefined;
    try {
      const spec = (await rec.run("resolve", async () => {
        const { compose, dotenv, source } = await this.composeOf(project);
        // Off the event loop, under a time and memory budget: the file is a team's input.
        const r = await this.options.validator.validate(compose, {
          env: {},
          dotenv: dotenv ?? undefined,
          noBuild: true,
          projectName: project.name,
        });
        if (!r.ok) {
          throw new PhaseFailure(
            `the compose file was refused: ${r.errors.map((e) => `${e.path || "(file)"} (line ${e.line}) ${e.message}`).join("; ")}`,
            { errors: r.errors, warnings: r.warnings },
          );
        }
        if (r.spec.kind !== project.kind) {
          r.warnings.push({
            code: "x_denv_invalid",
            severity: "warning",
            message: `x-denv.kind is ${r.spec.kind} but the project's kind is ${project.kind}`,
            path: "x-denv.kind",
            line: 0,
            column: 0,
          });
        }
        const pinned = await pinSpec(
          r.spec,
          new RegistryPinner({ allowHost: (h) => this.options.fetchPolicy.allowsHost(h) }),
        );
        return {
          value: pinned,
          evidence: {
            source,
            spec_hash: pinned.hash,
            images: Object.fromEntries(Object.entries(pinned.services).map(([n, s]) => [n, s.image_pinned])),
            verifier_image: pinned.verifier?.image_pinned ?? null,
            warnings: r.warnings,
          },
        };
      })) as ResolvedSpec;

      const placed = (await rec.run("place", async () => {
        const p = await this.place(project, before);
        // The cloud row holds the sealed token: the evidence names the cloud only.
        const c = "provision" in p ? (p.cloud as CloudsTable) : null;
        const evidence = c
          ? { ...p, cloud: { name: c.name, provider: c.provider, location: c.location } }
          : p;
        return { value: p, evidence };
      })) as Placement;
      if ("host_id" in placed) {
        hostId = placed.host_id;
        rec.state.host_id = hostId;
        await rec.skip("provision", "a connected host has capacity; no machine to create");
        const id = hostId;
        if (this.hub.isConnected(id)) await rec.skip("join", "the host's sidecar is connected");
        else {
          await rec.run("join", async () => {
            const t = performance.now();
            await this.hub.waitConnected(id, this.options.joinWaitMs ?? 30_000);
            return { evidence: { waited_ms: Math.round(performance.now() - t) } };
          });
        }
      } else {
        const provisioner = this.options.provisioner as Provisioner;
        const machine = (await rec.run("provision", async () => {
          const { machine, evidence } = await provisioner.create(
            placed.cloud,
            rec.deploymentId,
            async (m) => {
              rec.state.machine_id = m.machine_id;
              await rec.persist();
            },
          );
          return { value: machine, evidence };
        })) as ProvisionedMachine;
        hostId = (await rec.run("join", async () => {
          const t = performance.now();
          const waitMs = this.options.provisionJoinWaitMs ?? 15 * 60_000;
          const id = await provisioner.waitJoined(project.team_id, machine.name, this.hub, waitMs);
          return {
            value: id,
            evidence: { host_id: id, name: machine.name, waited_ms: Math.round(performance.now() - t) },
          };
        })) as string;
        rec.state.host_id = hostId;
        // It joined: from here on the machine is a host like any other, kept if a later phase fails.
        delete rec.state.machine_id;
        await rec.persist();
      }
      const id = hostId as string;
      const stackId = (await rec.run("prepare", async () => {
        const r = await this.hub.call(id, "prepare", {
          spec,
          name: `${project.name}-${before.name}`,
          operation_id: rec.deploymentId,
        });
        rec.state.building_stack_id = r.stack_id;
        return { value: r.stack_id, evidence: r.evidence };
      })) as string;
      const started = (await rec.run("start", async () => {
        const r = await this.hub.call(id, "start", {
          stack_id: stackId,
        });
        return { value: r, evidence: { containers: r.evidence, ms: r.ms, egress: r.egress } };
      })) as { health: unknown };
      await rec.run("health", async () => ({ evidence: started.health }));
      await rec.run("warm", async () => {
        if (spec.warm.length === 0) return { evidence: { commands: [] } };
        return { evidence: await this.hub.call(id, "warm", { stack_id: stackId }) };
      });
      const versionId = await this.snapshotPhase(
        rec,
        { id: environmentId, team_id: project.team_id, project_id: project.id },
        id,
        stackId,
        async () => spec,
      );
      const published = Object.values(spec.services).some((s) => s.ports.length > 0);
      await rec.skip(
        "ingress",
        published
          ? "ingress names and TLS are not available yet: published ports are not exposed"
          : "no service publishes a port",
      );
      // The new stack replaces the old one only now, when it is whole.
      await this.store
        .updateTable("environments")
        .set({ status: "running", host_id: id, stack_id: stackId, current_version_id: versionId })
        .where("id", "=", environmentId)
        .execute();
      delete rec.state.building_stack_id;
      if (before.stack_id && before.host_id) {
        await this.hub.call(before.host_id, "destroy", { stack_id: before.stack_id }).catch(() => {});
      }
      await rec.verdict("succeeded", null, { version_id: versionId, environment: before.name, host_id: id });
    } catch (err) {
      await this.rollBack(rec, before, err);
    }
  }

  /** A failed deployment: remove what it built, keep the previous version serving, say why. */
  private async rollBack(rec: PhaseRecorder, before: EnvironmentsTable, err: unknown): Promise<void> {
    const reason = err instanceof Error ? err.message : String(err);
    await rec.skipRest(`skipped: an earlier phase failed`);
    if (rec.state.machine_id && this.options.provisioner) {
      await this.options.provisioner.remove(rec.state.machine_id).catch(() => {});
    }
    const building = rec.state.building_stack_id;
    if (building && rec.state.host_id) {
      await this.hub
        .call(rec.state.host_id, "destroy", { stack_id: building }, { timeoutMs: 120_000 })
        .catch(() => {});
    }
    if (!before.current_version_id) {
      await this.store
        .updateTable("environments")
        .set({ status: "failed" })
        .where("id", "=", before.id)
        .execute();
    }
    await rec.verdict("rolled_back", reason, {
      restored_version: before.current_version_id,
      still_serving: before.current_version_id !== null,
    });
  }

  /** Hosts holding the version's data first (snapshot locality), then the most free space. */
  private async place(
    project: ProjectsTable,
    env: EnvironmentsTable,
    versionHostId?: string,
  ): Promise<Placement & Record<string, unknown>> {
    const hosts = await this.store
      .selectFrom("hosts")
      .selectAll()
      .where("team_id", "=", project.team_id)
      .execute();
    const free = (h: (typeof hosts)[number]) =>
      h.capacity_json ? (JSON.parse(h.capacity_json).free_bytes as number) : 0;
    let candidates = hosts.filter((h) => this.hub.isConnected(h.id) && free(h) >= MIN_FREE_BYTES);
    const clouds = this.options.provisioner ? await this.options.provisioner.clouds(project.team_id) : [];
    let cloud: (typeof clouds)[number] | undefined;
    if (project.pinned_target) {
      cloud = clouds.find((c) => c.name === project.pinned_target);
      if (cloud) {
        // Pinned to a cloud: only that cloud's machines, and a new one when none has room.
        const names = new Set(await (this.options.provisioner as Provisioner).hostNamesOf(cloud.id));
        candidates = candidates.filter((h) => names.has(h.name));
      } else {
        candidates = candidates.filter(
          (h) => h.name === project.pinned_target || h.id === project.pinned_target,
        );
        if (!candidates.length) {
          throw new PhaseFailure(
            `the project is pinned to ${project.pinned_target}, which is neither a connected host with capacity nor a connected cloud`,
          );
        }
      }
    }
    if (!candidates.length) {
      cloud ??= clouds[0];
      if (cloud) {
        return {
          provision: true,
          cloud,
          reason: project.pinned_target
            ? `pinned to cloud ${cloud.name}, which has no connected machine with capacity: provisioning one`
            : `no connected host has capacity: provisioning a machine in cloud ${cloud.name}`,
          hosts: hosts.map((h) => ({
            id: h.id,
            name: h.name,
            connected: this.hub.isConnected(h.id),
            free_bytes: free(h),
          })),
        };
      }
      throw new PhaseFailure(
        "no connected host with capacity: mint a token with `denv host join-token` and run the installer on a machine with Docker, or connect a cloud (`denv cloud connect hetzner`)",
        {
          hosts: hosts.map((h) => ({
            id: h.id,
            name: h.name,
            connected: this.hub.isConnected(h.id),
            free_bytes: free(h),
          })),
        },
      );
    }
    const local = versionHostId ?? env.host_id;
    const ranked = [...candidates].sort(
      (a, b) => Number(b.id === local) - Number(a.id === local) || free(b) - free(a),
    );
    const chosen = ranked[0] as (typeof hosts)[number];
    return {
      host_id: chosen.id,
      host_name: chosen.name,
      reason:
        chosen.id === local
          ? "holds the environment's current data (snapshot locality)"
          : "most free storage among connected hosts",
      candidates: ranked.map((h) => ({ id: h.id, name: h.name, free_bytes: free(h), storage: h.storage })),
    };
  }

  private async composeOf(
    project: ProjectsTable,
  ): Promise<{ compose: string; dotenv: string | null; source: unknown }> {
    if (project.source_type === "local") {
      if (!project.compose_text) {
        throw new PhaseFailure(
          "the project's local source has not been uploaded: run `denv deploy` from its directory",
        );
      }
      return {
        compose: this.options.secrets.openText(project.compose_text),
        dotenv: this.options.secrets.openText(project.dotenv_text),
        source: { type: "local", path: project.source },
      };
    }
    if (project.source_type === "github") {
      throw new PhaseFailure(
        `${project.source}: the GitHub integration is not available yet; create the project with a git URL or a local directory`,
      );
    }
    // Any git URL: one commit of it, for this deploy only, read as hostile input.
    const g = await readGitSource(project.source, this.options.fetchPolicy);
    return {
      compose: g.compose,
      dotenv: g.dotenv,
      source: { type: "git", url: project.source, commit: g.commit, file: g.file },
    };
  }

  // -----------------------------------------------------------------------------------------------
  // snapshot, fork, rollback, destroy

  private requireRunning(env: EnvironmentsTable): { hostId: string; stackId: string } {
    if (env.status !== "running" || !env.host_id || !env.stack_id) {
      throw new DenvError("conflict", `environment ${env.name} is ${env.status}; deploy it first`);
    }
    return { hostId: env.host_id, stackId: env.stack_id };
  }

  /** Captures a running environment's live state as a new version. */
  async snapshot(env: EnvironmentsTable): Promise<{ deploymentId: string; done: Promise<void> }> {
    const rec = await this.createDeployment(env.team_id, env.id, "snapshot", ["snapshot", "verdict"]);
    return this.launch(rec, env.id, async () => {
      const { hostId, stackId } = this.requireRunning(await this.environment(env.id));
      const versionId = await this.snapshotPhase(rec, env, hostId, stackId, () => this.specOf(env));
      await this.store
        .updateTable("environments")
        .set({ current_version_id: versionId })
        .where("id", "=", env.id)
        .execute();
      await rec.verdict("succeeded", null, { version_id: versionId });
    });
  }

  /** A version the host just snapshotted, recorded with its spec, pinned images and evidence. */
  /** The snapshot phase: the host captures the stack, and the version is recorded with its spec. */
  private async snapshotPhase(
    rec: PhaseRecorder,
    env: Pick<EnvironmentsTable, "id" | "team_id" | "project_id">,
    hostId: string,
    stackId: string,
    spec: () => Promise<ResolvedSpec>,
  ): Promise<string> {
    return (await rec.run("snapshot", async () => {
      const r = await this.hub.call(hostId, "snapshot", { stack_id: stackId });
      await this.recordVersion(env, hostId, await spec(), r);
      return { value: r.version_id, evidence: r.evidence };
    })) as string;
  }

  private async recordVersion(
    env: Pick<EnvironmentsTable, "id" | "team_id" | "project_id">,
    hostId: string,
    spec: ResolvedSpec,
    snap: { version_id: string; images: Record<string, string>; evidence: unknown },
  ): Promise<void> {
    await this.store
      .insertInto("versions")
      .values({
        id: snap.version_id,
        team_id: env.team_id,
        project_id: env.project_id,
        environment_id: env.id,
        host_id: hostId,
        spec_json: this.options.secrets.sealText(JSON.stringify(spec)),
        spec_hash: spec.hash,
        images_json: JSON.stringify(snap.images),
        evidence_json: JSON.stringify(snap.evidence),
        created_at: now(),
      })
      .execute();
  }

  private async specOf(env: EnvironmentsTable): Promise<ResolvedSpec> {
    const v = env.current_version_id
      ? await this.store
          .selectFrom("versions")
          .select("spec_json")
          .where("id", "=", env.current_version_id)
          .executeTakeFirst()
      : undefined;
    if (!v) throw new DenvError("conflict", `environment ${env.name} has no version yet`);
    return JSON.parse(this.options.secrets.openText(v.spec_json)) as ResolvedSpec;
  }

  /** A new environment from a version, on the host that holds the version's data. */
  async fork(
    versionId: string,
    options: { teamId: string; name: string; sandbox?: boolean },
  ): Promise<{ deploymentId: string; environmentId: string; done: Promise<void> }> {
    const version = await this.store
      .selectFrom("versions")
      .selectAll()
      .where("id", "=", versionId)
      .where("team_id", "=", options.teamId)
      .executeTakeFirst();
    if (!version) throw new DenvError("not_found", `no version ${versionId}`);
    const project = await this.store
      .selectFrom("projects")
      .selectAll()
      .where("id", "=", version.project_id)
      .executeTakeFirstOrThrow();
    const taken = await this.store
      .selectFrom("environments")
      .select("id")
      .where("project_id", "=", project.id)
      .where("name", "=", options.name)
      .executeTakeFirst();
    if (taken)
      throw new DenvError(
        "conflict",
        `an environment named ${options.name} already exists in ${project.name}`,
      );
    const env = await this.findOrCreateEnvironment(project, options.name, options.sandbox);
    await this.store
      .updateTable("environments")
      .set({ parent_version_id: versionId })
      .where("id", "=", env.id)
      .execute();
    const rec = await this.createDeployment(options.teamId, env.id, "fork", [
      "place",
      "join",
      "prepare",
      "start",
      "health",
      "verdict",
    ]);
    const done = this.serialize(env.id, async () => {
      try {
        const hostId = await rec.run("place", async () => ({
          value: version.host_id,
          evidence: { host_id: version.host_id, reason: "holds the version's snapshots (snapshot locality)" },
        }));
        rec.state.host_id = hostId;
        const id = hostId as string;
        if (this.hub.isConnected(id)) await rec.skip("join", "the host's sidecar is connected");
        else
          await rec.run("join", async () => {
            await this.hub.waitConnected(id, this.options.joinWaitMs ?? 30_000);
            return { evidence: {} };
          });
        const r = (await rec.run("prepare", async () => {
          const out = await this.hub.call(id, "fork", {
            version_id: versionId,
            name: `${project.name}-${options.name}`,
            operation_id: rec.deploymentId,
          });
          rec.state.building_stack_id = out.stack_id;
          return {
            value: out,
            evidence: {
              stack_id: out.stack_id,
              clone_ms: out.evidence.clone_ms,
              from_version: versionId,
              quota: out.evidence.quota,
            },
          };
        })) as OpResult<"fork">;
        await rec.run("start", async () => ({
          evidence: { containers: r.evidence.start, ms: r.evidence.start_ms, egress: r.evidence.egress },
        }));
        await rec.run("health", async () => ({ evidence: r.evidence.health }));
        await this.store
          .updateTable("environments")
          .set({
            status: "running",
            host_id: id,
            stack_id: r.stack_id,
            current_version_id: versionId,
          })
          .where("id", "=", env.id)
          .execute();
        delete rec.state.building_stack_id;
        await rec.verdict("succeeded", null, {
          environment_id: env.id,
          from_version: versionId,
          total_ms: r.evidence.total_ms,
        });
      } catch (err) {
        await this.rollBack(rec, { ...env, current_version_id: null }, err);
      }
    });
    done.catch(() => {});
    return { deploymentId: rec.deploymentId, environmentId: env.id, done };
  }

  /** Restores an environment to one of its versions and re-checks health. */
  async rollback(
    env: EnvironmentsTable,
    versionId: string,
  ): Promise<{ deploymentId: string; done: Promise<void> }> {
    const version = await this.store
      .selectFrom("versions")
      .selectAll()
      .where("id", "=", versionId)
      .where("team_id", "=", env.team_id)
      .executeTakeFirst();
    if (!version) throw new DenvError("not_found", `no version ${versionId}`);
    // Only this environment's own versions, or the one it was forked from: another environment's
    // version is another world (another spec, other data), not a state this one was ever in.
    if (version.environment_id !== env.id && version.id !== env.parent_version_id) {
      throw new DenvError(
        "invalid_argument",
        `version ${versionId} is not a version of environment ${env.name}; fork it instead (denv fork --name NAME ${versionId})`,
      );
    }
    const rec = await this.createDeployment(env.team_id, env.id, "rollback", [
      "restore",
      "health",
      "verdict",
    ]);
    return this.launch(rec, env.id, async () => {
      const { hostId, stackId } = this.requireRunning(await this.environment(env.id));
      if (version.host_id !== hostId)
        throw new DenvError("conflict", `version ${versionId} is on another host`);
      const r = (await rec.run("restore", async () => {
        const out = await this.hub.call(hostId, "rollback", {
          stack_id: stackId,
          version_id: versionId,
        });
        return { value: out, evidence: { version_id: versionId, ms: out.ms } };
      })) as { health: unknown };
      await rec.run("health", async () => ({ evidence: r.health }));
      await this.store
        .updateTable("environments")
        .set({ current_version_id: versionId })
        .where("id", "=", env.id)
        .execute();
      await rec.verdict("succeeded", null, { version_id: versionId });
    });
  }

  /**
   * Verify: stop → collect → snapshot → clone → grade → verdict. The agent is frozen first and
   * stays frozen (unless resume); grading happens on a fork, as root, in the verifier's own
   * container. The deployment succeeds when grading ran; the reward (0 for refused collections, a
   * crashed or timed-out verifier) is in the verdict.
   */
  async verify(
    env: EnvironmentsTable,
    options: { resume: boolean },
  ): Promise<{ deploymentId: string; done: Promise<void> }> {
    const rec = await this.createDeployment(env.team_id, env.id, "verify", [
      "stop",
      "collect",
      "snapshot",
      "clone",
      "grade",
      "verdict",
    ]);
    const done = this.serialize(env.id, async () => {
      const current = await this.environment(env.id);
      const hostId = current.host_id;
      const stackId = current.stack_id;
      let graderEnvId: string | undefined;
      try {
        if (!hostId || !stackId || !["running", "frozen"].includes(current.status)) {
          throw new DenvError(
            "conflict",
            `environment ${env.name} is ${current.status}; verify needs a running environment`,
          );
        }
        await rec.run("stop", async () => ({
          evidence: await this.hub.call(hostId, "verify_stop", { stack_id: stackId }),
        }));
        await this.store
          .updateTable("environments")
          .set({ status: "frozen" })
          .where("id", "=", env.id)
          .execute();
        const collected = (await rec.run("collect", async () => {
          const c = await this.hub.call(hostId, "verify_collect", {
            stack_id: stackId,
            verify_id: rec.deploymentId,
          });
          return { value: c, evidence: c };
        })) as { refused: string | null; files: unknown[] };
        let grade: Record<string, unknown>;
        if (collected.refused) {
          for (const n of ["snapshot", "clone", "grade"])
            await rec.skip(n, "the collected paths were refused: the episode scores 0");
          grade = { reward: 0, reason: `refused: ${collected.refused}` };
        } else {
          const versionId = await this.snapshotPhase(rec, env, hostId, stackId, () => this.specOf(current));
          graderEnvId = (await rec.run("clone", async () => {
            const f = await this.hub.call(hostId, "fork", {
              version_id: versionId,
              name: `${env.name}-grader-${rec.deploymentId.slice(4, 10)}`,
              operation_id: `${rec.deploymentId}-clone`,
            });
            return {
              value: f.stack_id,
              evidence: {
                stack_id: f.stack_id,
                from_version: versionId,
                total_ms: f.evidence.total_ms,
                egress: f.evidence.egress,
              },
            };
          })) as string;
          grade = (await rec.run("grade", async () => {
            const g = await this.hub.call(hostId, "verify_grade", {
              stack_id: graderEnvId as string,
              verify_id: rec.deploymentId,
            });
            return { value: g, evidence: g };
          })) as Record<string, unknown>;
        }
        if (options.resume) {
          await this.hub.call(hostId, "resume", { stack_id: stackId });
          await this.store
            .updateTable("environments")
            .set({ status: "running" })
            .where("id", "=", env.id)
            .execute();
        }
        await rec.verdict("succeeded", null, {
          reward: grade.reward,
          reason: grade.reason ?? null,
          exit_code: grade.exit_code ?? null,
          agent: options.resume ? "resumed" : "frozen for inspection",
        });
      } catch (err) {
        await rec.skipRest("skipped: an earlier phase failed");
        await rec.verdict("failed", err instanceof Error ? err.message : String(err), null);
      } finally {
        if (hostId) {
          if (graderEnvId) await this.hub.call(hostId, "destroy", { stack_id: graderEnvId }).catch(() => {});
          await this.hub.call(hostId, "verify_cleanup", { verify_id: rec.deploymentId }).catch(() => {});
        }
      }
    });
    done.catch(() => {});
    return { deploymentId: rec.deploymentId, done };
  }

  /** Removes an environment's stack and data. Its versions stay. */
  async destroy(env: EnvironmentsTable): Promise<{ deploymentId: string; done: Promise<void> }> {
    const rec = await this.createDeployment(env.team_id, env.id, "destroy", ["destroy", "verdict"]);
    return this.launch(rec, env.id, async () => {
      const current = await this.environment(env.id);
      await rec.run("destroy", async () => {
        if (current.host_id && current.stack_id) {
          await this.hub.call(current.host_id, "destroy", { stack_id: current.stack_id });
        }
        return { evidence: { host_id: current.host_id, stack_id: current.stack_id } };
      });
      // A destroyed environment is gone for good: its port URLs are revoked, and its name is freed
      // (kept, marked, on the record) so that a new environment of that name is a new identity,
      // which nothing minted for the old one can reach.
      const revoked = await revokePortUrls(this.store, env.id);
      await this.store
        .updateTable("environments")
        .set({ status: "destroyed", stack_id: null, name: `${current.name}~${env.id}` })
        .where("id", "=", env.id)
        .execute();
      await rec.verdict("succeeded", null, { port_urls_revoked: revoked });
    });
  }

  /**
   * After a restart: deployments that were running when the server died are rolled back — the
   * stack they were building is removed (once its host is connected) and the reason recorded.
   */
  async recover(): Promise<string[]> {
    const stuck = await this.store
      .selectFrom("deployments")
      .selectAll()
      .where("status", "=", "running")
      .execute();
    for (const d of stuck) {
      const rec = new PhaseRecorder(d.id, [], { store: this.store, events: this.events });
      (rec.phases as Phase[]).push(...(JSON.parse(d.phases_json) as Phase[]));
      rec.state = JSON.parse(d.state_json) as DeploymentState;
      for (const p of rec.phases) {
        if (p.status === "running")
          Object.assign(p, {
            status: "failed",
            reason: "the server stopped during this phase",
            finished_at: now(),
          });
      }
      const env = await this.environment(d.environment_id).catch(() => undefined);
      if (rec.state.machine_id && this.options.provisioner) {
        // A machine created for this deployment that never joined: delete it in its cloud.
        await this.options.provisioner.remove(rec.state.machine_id).catch(() => {});
      }
      const building = rec.state.building_stack_id;
      const hostId = rec.state.host_id;
      if (building && hostId) {
        // The host may still be reconnecting; the destroy is queued until it does.
        void this.hub
          .call(
            hostId,
            "destroy",
            { stack_id: building },
            { timeoutMs: 10 * 60_000, waitForHostMs: 10 * 60_000 },
          )
          .catch(() => {});
      }
      await rec.skipRest("skipped: the server stopped during the deployment");
      if (env && !env.current_version_id && env.status === "pending") {
        await this.store
          .updateTable("environments")
          .set({ status: "failed" })
          .where("id", "=", env.id)
          .execute();
      }
      await rec.verdict(
        "rolled_back",
        "the server stopped during the deployment; what it was building was removed",
        {
          restored_version: env?.current_version_id ?? null,
        },
      );
    }
    return stuck.map((d) => d.id);
  }
}
