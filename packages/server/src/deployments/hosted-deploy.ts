/**
 * A deploy's phases after place on a hosted target (E2B, Daytona, Modal, Prime): the file's one
 * service as the provider's sandbox. prepare makes it from the pinned image (refusing what the
 * target cannot run: several services, a build, the project's own files, file secrets), start runs
 * its command in the background, health runs its healthcheck until it passes, warm runs the file's
 * warm commands, snapshot takes the provider's snapshot as the version where the target's row has
 * one, and the environment then serves from the new sandbox (the old one ended). A failure after
 * prepare ends the new sandbox; the environment keeps what it served.
 */
import type { ResolvedService, ResolvedSpec } from "@denv/protocol";
import { hostedRefusal } from "../placement/placement.ts";
import { updateEnvironment } from "../store/environment-store.ts";
import type { CloudsTable, EnvironmentsTable, ProjectsTable } from "../store/schema.ts";
import type { HostedSandboxTarget } from "../targets/hosted-sandbox-target.ts";
import { hostedTarget, hostedTargetNamed } from "../targets/hosted-targets.ts";
import { HOSTED_SERVICE, type PlacedEnvironment } from "../targets/target.ts";
import type { DeploymentRunner } from "./deployment-runner.ts";
import { PhaseFailure, type PhaseRecorder } from "./phase-recorder.ts";
import { recordHostedVersion } from "./snapshot-kind.ts";

/** How often a healthcheck is tried while the service is not healthy yet. */
const HEALTH_POLL_MS = 500;
/** How much of a failed command's output a phase's reason carries. */
const OUTPUT_CHARS = 400;

/** What of the one service a hosted target cannot run, in the prepare phase's words; null: nothing. */
export function hostedServiceRefusal(target: string, name: string, spec: ResolvedSpec): string | null {
  const s = spec.services[name] as ResolvedService;
  if (s.build)
    return `service ${name} is built from a Dockerfile, and builds run on a denvd host: push the image and name it, or deploy to denvd`;
  const seeded = s.volumes.filter((v) => spec.datasets[v.dataset]?.seed);
  if (seeded.length)
    return `service ${name} mounts the project's own files (${seeded.map((v) => v.target).join(", ")}), which are not carried to target ${target} yet`;
  if (s.secrets?.length)
    return `service ${name} has file secrets (${s.secrets.map((x) => x.name).join(", ")}), which are not carried to target ${target} yet`;
  // Enforced by denvd's proxy on the host: a hosted sandbox would run it as deny, saying nothing.
  if (spec.egress_policy)
    return `x-denv.egress is a policy, which denv's egress proxy enforces on a denvd host: target ${target} takes egress deny or allow`;
  return null;
}

export async function hostedDeployPhases(
  runner: DeploymentRunner,
  rec: PhaseRecorder,
  project: ProjectsTable,
  before: EnvironmentsTable,
  spec: ResolvedSpec,
  where: { hosted: CloudsTable; pinnedBy: string },
): Promise<void> {
  const { store, options } = runner;
  const cloud = where.hosted;
  const names = Object.keys(spec.services);
  const name = names[0] as string;
  const service = spec.services[name] as ResolvedService;
  const targetWords = { name: cloud.name, provider: cloud.provider };
  const target: HostedSandboxTarget = hostedTarget(
    { store, secrets: options.secrets, fetchPolicy: options.fetchPolicy },
    cloud,
  );
  const sandboxId = (await rec.run("prepare", async () => {
    if (names.length !== 1)
      throw new PhaseFailure(hostedRefusal(cloud, names, where.pinnedBy), {
        target: targetWords,
        services: names,
      });
    const refusal = hostedServiceRefusal(cloud.name, name, spec);
    if (refusal) throw new PhaseFailure(refusal, { target: targetWords, service: name });
    const image = service.image_pinned ?? service.image;
    const t = performance.now();
    const id = await target.deployService(project.team_id, before.name, {
      image,
      env: service.environment,
      egress: spec.egress,
      ...(service.user ? { user: service.user } : {}),
      ...(service.volumes.length ? { volumes: service.volumes.map((v) => v.target) } : {}),
    });
    // Written down at once: a server that dies from here on has its restart end the sandbox.
    rec.state.building_sandbox = { target: cloud.name, sandbox_id: id };
    await rec.persist();
    return {
      value: id,
      evidence: {
        target: targetWords,
        service: name,
        image,
        sandbox_id: id,
        egress: spec.egress,
        ms: Math.round(performance.now() - t),
      },
    };
  })) as string;
  const placed: PlacedEnvironment = { id: before.id, name: before.name, hostId: null, stackId: sandboxId };
  let versionId: string | null;
  try {
    await startAndWarm(rec, target, placed, name, service, spec);
    versionId = await snapshot(runner, rec, target, before, placed, name, service, spec);
    await rec.skip(
      "ingress",
      service.ports.length
        ? "port URLs are not available on hosted targets yet: published ports are not exposed"
        : "no service publishes a port",
    );
  } catch (err) {
    // The new sandbox never served: it goes, and the environment keeps what it had.
    await target.killService(sandboxId).catch(() => {});
    delete rec.state.building_sandbox;
    await rec.persist();
    throw err;
  }
  // What served before is written down before the switch: a restart after it still ends it.
  if (before.stack_id && !before.host_id && before.target_id !== "denvd")
    rec.state.retiring_sandbox = { target: before.target_id, sandbox_id: before.stack_id };
  else if (before.stack_id && before.host_id) {
    rec.state.retiring_stack_id = before.stack_id;
    rec.state.host_id = before.host_id;
  }
  await rec.persist();
  await updateEnvironment(store, before.id, {
    status: "running",
    host_id: null,
    stack_id: sandboxId,
    target_id: cloud.name,
    // No version where the target keeps none: what runs now is not any earlier version.
    current_version_id: versionId,
  });
  delete rec.state.building_sandbox;
  await rec.persist();
  // What served before ends only now that the new sandbox serves.
  await retireHosted(runner, before);
  if (before.stack_id && before.host_id)
    await runner.stacks.destroy({ hostId: before.host_id, stackId: before.stack_id }).catch(() => {});
  delete rec.state.retiring_sandbox;
  delete rec.state.retiring_stack_id;
  await rec.persist();
  await rec.verdict("succeeded", null, {
    version_id: versionId,
    environment: before.name,
    target: cloud.name,
    sandbox_id: sandboxId,
  });
}

/**
 * Ends the sandbox a hosted target served an environment from, once something else serves it (a
 * new deploy, here or on a denvd host); an environment that ran on a host has nothing here.
 */
export async function retireHosted(runner: DeploymentRunner, before: EnvironmentsTable): Promise<void> {
  if (!before.stack_id || before.host_id || before.target_id === "denvd") return;
  const { store, options } = runner;
  const was = await hostedTargetNamed(
    { store, secrets: options.secrets, fetchPolicy: options.fetchPolicy },
    before.team_id,
    before.target_id,
  );
  await was?.killService(before.stack_id).catch(() => {});
}

/** start, health and warm: the service's command, its healthcheck until it passes, the warm commands. */
async function startAndWarm(
  rec: PhaseRecorder,
  target: HostedSandboxTarget,
  placed: PlacedEnvironment,
  name: string,
  service: ResolvedService,
  spec: ResolvedSpec,
): Promise<void> {
  const command = [...(service.entrypoint ?? []), ...(service.command ?? [])];
  if (command.length)
    await rec.run("start", async () => {
      await target.startService(placed.stackId as string, command, service.user ?? undefined);
      return { evidence: { service: name, command, background: true } };
    });
  else
    await rec.skip(
      "start",
      `service ${name} names no command or entrypoint: on a hosted target the image's own is not run, so nothing was started`,
    );
  const hc = service.healthcheck;
  if (!hc || service.healthcheck_disabled || hc.test.length === 0 || hc.test[0] === "NONE")
    await rec.skip("health", `service ${name} declares no healthcheck`);
  else
    await rec.run("health", async () => {
      const argv = hc.test[0] === "CMD-SHELL" ? ["sh", "-c", hc.test.slice(1).join(" ")] : hc.test.slice(1);
      // Compose's budget: the start period, then each retry an interval apart; tried more often.
      const budgetMs = hc.start_period_ms + Math.max(1, hc.retries) * Math.max(hc.interval_ms, 1000);
      const begun = performance.now();
      let attempts = 0;
      let last = "";
      for (;;) {
        attempts++;
        const r = await runIn(target, placed, argv, service.user ?? undefined, hc.timeout_ms || 30_000);
        if (r.exitCode === 0)
          return {
            evidence: { service: name, healthy: true, attempts, ms: Math.round(performance.now() - begun) },
          };
        last = r.output;
        if (performance.now() - begun >= budgetMs)
          throw new PhaseFailure(
            `service ${name} was not healthy after ${attempts} checks in ${Math.round(performance.now() - begun)} ms: ${last}`,
            { service: name, attempts },
          );
        await new Promise((resolve) => setTimeout(resolve, HEALTH_POLL_MS));
      }
    });
  await rec.run("warm", async () => {
    const done: { command: string[]; ms: number }[] = [];
    for (const w of spec.warm) {
      const t = performance.now();
      const r = await runIn(target, placed, w.command, service.user ?? undefined, 10 * 60_000);
      if (r.exitCode !== 0)
        throw new PhaseFailure(
          `warm command ${JSON.stringify(w.command)} exited ${r.exitCode}: ${r.output}`,
          {
            command: w.command,
          },
        );
      done.push({ command: w.command, ms: Math.round(performance.now() - t) });
    }
    return { evidence: { commands: done } };
  });
}

/** snapshot: the provider's snapshot as the version, where the target's row has one. */
async function snapshot(
  runner: DeploymentRunner,
  rec: PhaseRecorder,
  target: HostedSandboxTarget,
  before: EnvironmentsTable,
  placed: PlacedEnvironment,
  name: string,
  service: ResolvedService,
  spec: ResolvedSpec,
): Promise<string | null> {
  const caps = await target.capabilities(before.team_id);
  if (!caps.consistentSnapshot.supported || !caps.fork.supported) {
    await rec.skip(
      "snapshot",
      `target ${target.name} has no snapshot denv drives (${caps.consistentSnapshot.detail}): no version is kept, and the environment serves as deployed`,
    );
    return null;
  }
  return (await rec.run("snapshot", async () => {
    const snap = await target.snapshot(placed);
    // The version is the one service of a sandbox at this target (reached as `main`, as every
    // hosted sandbox's is), with what it was deployed from.
    const versionSpec = {
      hosted: { target: target.name, provider: target.kind },
      services: { [HOSTED_SERVICE]: {} },
      deployed: { service: name, image: service.image_pinned ?? service.image, spec_hash: spec.hash },
    };
    const id = await recordHostedVersion(runner, before, target.name, snap, versionSpec);
    return { value: id, evidence: snap.evidence };
  })) as string;
}

/** A command in the sandbox as the user; its exit code and the tail of its output. */
async function runIn(
  target: HostedSandboxTarget,
  placed: PlacedEnvironment,
  command: string[],
  user: string | undefined,
  timeoutMs: number,
): Promise<{ exitCode: number; output: string }> {
  const out: Buffer[] = [];
  const r = await target.exec(
    placed,
    { command, ...(user ? { user } : {}), timeoutMs, maxOutputBytes: 64 * 1024 },
    null,
    (_w, chunk) => {
      out.push(chunk);
    },
  );
  return { exitCode: r.exitCode, output: Buffer.concat(out).toString().slice(-OUTPUT_CHARS) };
}
