/**
 * deploy: the seed's eleven phases. resolve (validate and pin), place, provision and join (when a
 * machine must be made or a host is away), prepare, start, health, warm, snapshot, ingress,
 * verdict. When a phase fails the rest are skipped, the stack being built is removed, and the
 * environment keeps serving its previous version (runner.rollBack).
 */
import { type ResolvedSpec, stackName } from "@denv/protocol";
import { pinSpec, RegistryPinner, withContextDigests } from "@denv/spec";
import { normalizedTar } from "../build-contexts.ts";
import type { ProvisionedMachine, Provisioner } from "../clouds/provisioner.ts";
import { now } from "../ids.ts";
import { ingressEvidence } from "../ingress/ingress-phase.ts";
import { onTeamsBehalf } from "../outbound-guard.ts";
import type { AdmissionWait } from "../placement/admission.ts";
import { type GpuAssignment, type GpuNeed, gpuNeedOf } from "../placement/gpu-placement.ts";
import { type Placement, place } from "../placement/placement.ts";
import { environmentById, findOrCreateEnvironment, updateEnvironment } from "../store/environment-store.ts";
import type { CloudsTable, EnvironmentsTable, ProjectsTable } from "../store/schema.ts";
import { hostHoldsVersion, versionRow } from "../store/version-store.ts";
import { resolveSeeds, seedDatasets } from "./bind-seeds.ts";
import { clockHistory, clockIssues } from "./clock-history.ts";
import type { DeploymentRunner, Launched } from "./deployment-runner.ts";
import { hostedDeployPhases, retireHosted } from "./hosted-deploy.ts";
import { buildImages } from "./image-builds.ts";
import { DEPLOY_PHASES, PhaseFailure, type PhaseRecorder } from "./phase-recorder.ts";
import { type ProjectSource, projectSource } from "./project-source.ts";
import { snapshotPhase } from "./snapshot-kind.ts";

/** What a deploy reads and builds on besides its project (a webhook's push or pull request). */
export interface DeployOptions {
  /** The commit of a git or GitHub source to deploy (default: its branch's head). */
  commit?: string;
  /** The branch the commit is on (a GitHub source's, read where no commit is given). */
  ref?: string;
  /**
   * A version whose volumes the new stack starts from, volume by volume (a pull request's preview
   * onto alpha's data); recorded as the environment's parent.
   */
  dataFromVersionId?: string;
  /** What started it, recorded in the resolve phase's evidence (a push: commit, ref, who pushed). */
  trigger?: Record<string, unknown>;
  /** The create turn it waited for (an image sandbox's, admission.ts), recorded in the place phase. */
  admission?: AdmissionWait;
}

export async function runDeploy(
  runner: DeploymentRunner,
  project: ProjectsTable,
  envName: string,
  options: DeployOptions = {},
): Promise<Launched & { environmentId: string }> {
  const env = await findOrCreateEnvironment(runner.store, project, envName);
  const rec = await runner.begin(project.team_id, env.id, "deploy", DEPLOY_PHASES);
  // The environment as it was when this deployment's turn came: what a failure restores.
  let before = env;
  const launched = runner.launch(
    rec,
    env.id,
    async () => {
      before = await environmentById(runner.store, env.id);
      await deployPhases(runner, rec, project, before, options);
    },
    (err) => runner.rollBack(rec, before, err),
  );
  return { ...launched, environmentId: env.id };
}

async function deployPhases(
  runner: DeploymentRunner,
  rec: PhaseRecorder,
  project: ProjectsTable,
  before: EnvironmentsTable,
  options: DeployOptions,
): Promise<void> {
  let spec = await resolvePhase(runner, rec, project, options);
  const gpuNeed = gpuNeedOf(spec);
  const where = await placeAndJoin(runner, rec, project, before, spec.target, gpuNeed, options.admission);
  if (typeof where !== "string") {
    // A hosted target: the one service as the provider's sandbox (prepare refuses what it cannot run).
    await hostedDeployPhases(runner, rec, project, before, spec, where);
    return;
  }
  const hostId = where;
  // The GPUs place gave each service (held on the environment's row from then on).
  const gpus = gpuNeed
    ? (JSON.parse(
        (await environmentById(runner.store, before.id)).gpus_json ?? "null",
      ) as GpuAssignment | null)
    : null;
  const stackId = (await rec.run("prepare", async () => {
    // Services with build: are built (or found built) on the host first, and pinned to the result.
    const built = await buildImages(runner, rec, {
      teamId: project.team_id,
      projectId: project.id,
      projectName: project.name,
      hostId,
      spec,
    });
    spec = built.spec;
    const from = await dataFrom(runner, options.dataFromVersionId, hostId);
    const r = await runner.stacks.prepare(hostId, {
      spec,
      name: stackName(project.name, before.name),
      operationId: rec.deploymentId,
      newStackId: await rec.building(),
      ...(from.versionId ? { dataFromVersionId: from.versionId } : {}),
      ...(gpus ? { gpus } : {}),
    });
    const builds = Object.keys(built.builds).length ? { builds: built.builds, spec_hash: spec.hash } : {};
    // The project's files its bind mounts name, into their fresh datasets before anything starts.
    const seeded = await seedDatasets(runner, project.team_id, hostId, r.stack_id, spec);
    const seeds = Object.keys(seeded).length ? { seeded } : {};
    const skipped = from.skipped ? { data_from: from.skipped } : {};
    return { value: r.stack_id, evidence: { ...r.evidence, ...builds, ...seeds, ...skipped } };
  })) as string;
  const started = (await rec.run("start", async () => {
    const r = await runner.stacks.start({ hostId, stackId });
    return {
      value: r,
      evidence: { containers: r.evidence, ms: r.ms, egress: r.egress, clock: r.clock ?? null },
    };
  })) as { health: unknown };
  // Services start as soon as what they depend on is healthy, so start and health interleave on
  // the host; the health phase records what the start step measured of each service.
  await rec.run("health", async () => ({ evidence: started.health }));
  await rec.carve("start", "health", (started.health as { ms?: number }).ms ?? 0);
  await rec.run("warm", async () => {
    if (spec.warm.length === 0) return { evidence: { commands: [] } };
    return { evidence: await runner.stacks.warm({ hostId, stackId }) };
  });
  // x-denv.live: the deploy's version keeps every service's processes too.
  const versionId = await snapshotPhase(runner, rec, before, hostId, stackId, async () => spec, spec.live);
  // From the switch on, a cancel stops nothing: the environment serves its new stack.
  rec.commit();
  // The new stack replaces the old one only now, when it is whole. The old one is written down
  // first: a restart between the switch and its removal still removes it (deployment-recovery.ts).
  if (before.stack_id) {
    if (before.host_id) rec.state.retiring_stack_id = before.stack_id;
    else if (before.target_id !== "denvd")
      rec.state.retiring_sandbox = { target: before.target_id, sandbox_id: before.stack_id };
    await rec.persist();
  }
  await updateEnvironment(runner.store, before.id, {
    status: "running",
    host_id: hostId,
    target_id: "denvd",
    stack_id: stackId,
    current_version_id: versionId,
    ...(options.dataFromVersionId ? { parent_version_id: options.dataFromVersionId } : {}),
    // x-denv.idle_pause_s: the timer counts from now (idle-pause.ts).
    idle_pause_s: spec.idle_pause_s ?? null,
    active_at: now(),
  });
  delete rec.state.building_stack_id;
  await rec.persist();
  if (before.stack_id && before.host_id)
    await runner.stacks.destroy({ hostId: before.host_id, stackId: before.stack_id }).catch(() => {});
  // An environment a hosted target served until now: its sandbox there ends too.
  await retireHosted(runner, before);
  delete rec.state.retiring_stack_id;
  delete rec.state.retiring_sandbox;
  await ingressPhase(runner, rec, project, before, spec);
  await rec.verdict("succeeded", null, { version_id: versionId, environment: before.name, host_id: hostId });
  runner.deployed.emit("deployed", {
    teamId: project.team_id,
    projectId: project.id,
    versionId,
    pool: followsPool(before.name, spec, options) ? (spec.pool ?? 0) : null,
  });
}

/**
 * Whether a deploy sets the project's warm pool (x-denv.pool): only a deploy of its production
 * environment (x-denv.pool.environment, alpha by default) made by the team itself. A branch's or a
 * pull request's deploy (a webhook's) never sets, replaces or drains it, whatever its file says:
 * its file is the branch's, or an outsider's.
 */
export function followsPool(envName: string, spec: ResolvedSpec, options: DeployOptions): boolean {
  const trigger = options.trigger?.trigger;
  if (trigger === "branch" || trigger === "preview") return false;
  return envName === (spec.pool_environment ?? "alpha");
}

/**
 * ingress: names for the published ports, run once the environment serves from its new stack (the
 * probe goes through the names to it). The deploy stands whatever a probe finds: what each name
 * answered is the evidence, and a name that could not be had is said with its reason.
 */
async function ingressPhase(
  runner: DeploymentRunner,
  rec: PhaseRecorder,
  project: ProjectsTable,
  env: EnvironmentsTable,
  spec: ResolvedSpec,
): Promise<void> {
  const published = Object.values(spec.services).some((s) => s.ports.length > 0);
  const ingress = runner.options.ingress ?? null;
  if (!published) return rec.skip("ingress", "no service publishes a port");
  if (!ingress)
    return rec.skip(
      "ingress",
      "the server has no ingress domain (denv server --ingress-domain): published ports are reached by port URLs",
    );
  try {
    await rec.run("ingress", async () => ({
      evidence: await ingressEvidence(runner.store, ingress, env, project.name, spec),
    }));
  } catch {
    // Recorded as the phase's failure; the environment already serves its new version.
  }
}

/** A git source's files the compose file reads: at most this many, each at most this large. */
const MAX_GIT_FILES = 64;
const MAX_GIT_FILE_BYTES = 1024 * 1024;

/** resolve: the compose file validated off the event loop (it is a team's input), images pinned. */
/**
 * The version a deploy's volumes start from, where the host it was placed on holds it (its own or
 * a replica); elsewhere the volumes start empty and the prepare phase says why.
 */
async function dataFrom(
  runner: DeploymentRunner,
  versionId: string | undefined,
  hostId: string,
): Promise<{ versionId?: string; skipped?: { version_id: string; cloned: string[]; reason: string } }> {
  if (!versionId) return {};
  if (await hostHoldsVersion(runner.store, versionId, hostId)) return { versionId };
  const v = await versionRow(runner.store, versionId);
  return {
    skipped: {
      version_id: versionId,
      cloned: [],
      reason: v
        ? `the version is on host ${v.host_id}, not ${hostId}: the volumes start empty`
        : "the version is gone",
    },
  };
}

async function resolvePhase(
  runner: DeploymentRunner,
  rec: PhaseRecorder,
  project: ProjectsTable,
  options: DeployOptions = {},
) {
  return (await rec.run("resolve", async () => {
    const src = await projectSource(project, runner.options, options);
    if (options.trigger) src.source = { ...(src.source as object), ...options.trigger };
    try {
      return await resolveSource(runner, project, src);
    } finally {
      await src.close();
    }
  })) as ResolvedSpec;
}

/** The source validated, each build context found (uploaded, or archived from git), images pinned. */
async function resolveSource(runner: DeploymentRunner, project: ProjectsTable, src: ProjectSource) {
  const { validator, fetchPolicy } = runner.options;
  const { compose, dotenv, source, buildContexts, files } = src;
  const validate = () =>
    validator.validate(compose, {
      env: {},
      dotenv: dotenv ?? undefined,
      noBuild: false,
      projectName: project.name,
      files,
    });
  let r = await validate();
  // A git source's env_file and secret files: read from the commit once the file names them.
  const wanted = src.readText ? (r.missing_files ?? []).slice(0, MAX_GIT_FILES) : [];
  for (const path of wanted) {
    const text = await (src.readText as NonNullable<ProjectSource["readText"]>)(path, MAX_GIT_FILE_BYTES);
    if (text !== null) files[path] = text;
  }
  if (wanted.some((p) => files[p] !== undefined)) r = await validate();
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
  // Each build: names the context uploaded with the file; a context never uploaded is refused here.
  const digests: Record<string, string> = {};
  for (const [name, svc] of Object.entries(r.spec.services)) {
    if (!svc.build) continue;
    let d = buildContexts[svc.build.context];
    if (!d && src.archive) {
      // A git source: the context is the commit's directory, kept beside uploaded ones.
      const archive = normalizedTar(src.archive(svc.build.context));
      d = (await runner.buildContexts.putStream(project.team_id, archive)).digest;
      buildContexts[svc.build.context] = d;
    }
    if (!d)
      throw new PhaseFailure(
        `service ${name} builds from ${svc.build.context}, whose context was not uploaded: deploy with the CLI from the project's directory (it uploads each build context)`,
        { errors: [], warnings: r.warnings },
      );
    digests[name] = d;
  }
  const seeded = await resolveSeeds(
    runner,
    project.team_id,
    src,
    withContextDigests(r.spec, digests),
    r.warnings,
  );
  // The registries' connections (a manifest, a token realm) are held to the policy too.
  const pinned = await onTeamsBehalf(fetchPolicy, "the image pinner", () =>
    pinSpec(seeded.spec, new RegistryPinner({ allowHost: (h) => fetchPolicy.allowsHost(h) })),
  );
  // An image an earlier start found on the real clock: said now, refused with frozen-strict.
  const clock = clockIssues(pinned, await clockHistory(runner.store, project.id));
  const strict = clock.filter((i) => i.severity === "error");
  if (strict.length > 0)
    throw new PhaseFailure(`x-denv.clock is frozen-strict but ${strict.map((i) => i.message).join("; ")}`, {
      errors: strict,
      warnings: r.warnings,
    });
  r.warnings.push(...clock);
  return {
    value: pinned,
    evidence: {
      source,
      spec_hash: pinned.hash,
      images: Object.fromEntries(Object.entries(pinned.services).map(([n, s]) => [n, s.image_pinned])),
      ...(Object.keys(digests).length
        ? {
            builds: Object.fromEntries(
              Object.entries(pinned.services)
                .filter(([, s]) => s.build)
                .map(([n, s]) => [
                  n,
                  {
                    context: s.build?.context,
                    context_digest: s.build?.context_digest,
                    dockerfile: s.build?.dockerfile,
                  },
                ]),
            ),
          }
        : {}),
      ...(seeded.evidence.length ? { project_mounts: seeded.evidence } : {}),
      verifier_image: pinned.verifier?.image_pinned ?? null,
      warnings: r.warnings,
    },
  };
}

/**
 * place, then provision and join: the host the stack is built on, connected; or the hosted target
 * the project is pinned to (no machine to make or join).
 */
async function placeAndJoin(
  runner: DeploymentRunner,
  rec: PhaseRecorder,
  project: ProjectsTable,
  before: EnvironmentsTable,
  fileTarget: string | undefined,
  gpuNeed: GpuNeed | null = null,
  admission?: AdmissionWait,
): Promise<string | { hosted: CloudsTable; pinnedBy: string }> {
  const placed = (await rec.run("place", async () => {
    const { store, stacks, options } = runner;
    const p = await place(
      { store, hosts: stacks, provisioner: options.provisioner },
      project,
      before,
      fileTarget,
      gpuNeed,
    );
    // Held from now: a deploy beside this one cannot be given the same GPUs.
    if ("host_id" in p && p.gpus)
      await updateEnvironment(store, before.id, { gpus_json: JSON.stringify(p.gpus) });
    // The cloud row holds the sealed token: the evidence names the cloud only.
    const c = ("provision" in p ? p.cloud : "hosted" in p ? p.hosted : null) as CloudsTable | null;
    const named = c ? { name: c.name, provider: c.provider, location: c.location } : null;
    const evidence =
      "provision" in p
        ? { ...p, cloud: named }
        : "hosted" in p
          ? { ...p, hosted: undefined, target: named }
          : p;
    return { value: p, evidence: admission ? { ...evidence, admission } : evidence };
  })) as Placement;
  if ("hosted" in placed) {
    const why = `${placed.hosted.name} is a hosted target: no machine to create or join`;
    await rec.skip("provision", why);
    await rec.skip("join", why);
    return { hosted: placed.hosted, pinnedBy: placed.pinned_by };
  }
  if ("host_id" in placed) {
    rec.state.host_id = placed.host_id;
    await rec.skip("provision", "a connected host has capacity; no machine to create");
    await runner.joinPhase(rec, placed.host_id);
    return placed.host_id;
  }
  const provisioner = runner.options.provisioner as Provisioner;
  const machine = (await rec.run("provision", async () => {
    const { machine, evidence } = await provisioner.create(placed.cloud, rec.deploymentId, async (m) => {
      rec.state.machine_id = m.machine_id;
      await rec.persist();
    });
    return { value: machine, evidence };
  })) as ProvisionedMachine;
  const hostId = (await rec.run("join", async () => {
    const t = performance.now();
    const waitMs = runner.options.provisionJoinWaitMs ?? 15 * 60_000;
    const id = await provisioner.waitJoined(project.team_id, machine.name, runner.stacks, waitMs);
    return {
      value: id,
      evidence: { host_id: id, name: machine.name, waited_ms: Math.round(performance.now() - t) },
    };
  })) as string;
  rec.state.host_id = hostId;
  // It joined: from here on the machine is a host like any other, kept if a later phase fails.
  delete rec.state.machine_id;
  await rec.persist();
  return hostId;
}
