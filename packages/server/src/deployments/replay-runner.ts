/**
 * A replay: N forks of a version run one scripted episode each, and the report compares them
 * (replay-report.ts). Each fork is made with its clock held at the version's time; the clock runs
 * only while a step's command runs (the host releases it as the command starts and holds it as it
 * ends: exec's episode_clock), so every episode starts at the version's time however long its fork
 * took, and neither the gaps between steps nor the round trips count. The verifier grades on the
 * clock as it stands. Then every volume is digested and the fork destroyed. Forks run a few at a
 * time, each on a create turn of its host (admission.ts); they are named after the replay, so a
 * restart finds and removes what a stopped server left (recoverReplays).
 */
import { randomBytes } from "node:crypto";
import { DenvError, type DiffEvidence, type ResolvedSpec } from "@denv/protocol";
import { newId, now } from "../ids.ts";
import type { Admission } from "../placement/admission.ts";
import { deploymentById } from "../store/deployment-store.ts";
import { environmentById, liveSandboxesNamed } from "../store/environment-store.ts";
import type { Store } from "../store/open-store.ts";
import {
  countReplayFork,
  failRunningReplays,
  findReplay,
  finishReplay,
  insertReplay,
} from "../store/replay-store.ts";
import type { ReplaysTable } from "../store/schema.ts";
import type { StackLifecycle } from "../targets/stack-lifecycle.ts";
import type { ForkDeployer } from "./fork-kind.ts";
import {
  compareDiffs,
  compareRuns,
  type ForkRun,
  type ReplayOutcome,
  type StepRun,
} from "./replay-report.ts";

/**
 * A step's deadline when the script gives none: long enough that a busy machine's slow step is
 * not cut (a cut step would read as a divergence, which is a fact of the machine, not of the
 * replay), short enough that a step that hangs ends the replay. A step may give its own.
 */
export const REPLAY_STEP_TIMEOUT_MS = 15 * 60_000;
/** A command in a service, as exec runs it; or, with verifier, the version's verifier graded on the fork. */
export interface ReplayStep {
  service?: string;
  command?: string | string[];
  user?: string;
  timeout_ms?: number;
  verifier?: boolean;
}

export interface ReplayRequest {
  forks: number;
  parallel: number;
  steps: ReplayStep[];
}

export interface ReplayResult extends ReplayOutcome {
  version_id: string;
  forks: number;
  steps: ReplayStep[];
  /** The reference fork's results, in full (each output up to STEP_OUTPUT_BYTES). */
  reference: {
    steps: StepRun[];
    volumes: Record<string, { digest: string; files: number; bytes: number; left_out: string[] }>;
  } | null;
  /** What the episode changed in each fork: the reference's diff, and whether every fork's agrees. */
  diff: { identical: boolean | null; divergent_forks: number[]; reference: DiffEvidence | null };
  runs: {
    index: number;
    environment_id: string | null;
    error: string | null;
    digest: string;
    steps: { exit_code: number | null; ms: number; timed_out: boolean }[];
  }[];
  ms: number;
}

/** A replay's diffs list this many changes and this much text diff per fork; the rest is counted. */
const REPLAY_DIFF_ENTRIES = 200;
const REPLAY_DIFF_TEXT_BYTES = 32 * 1024;
/** Output kept per stream per step: a diff needs the lines, not megabytes of them. */
const STEP_OUTPUT_BYTES = 256 * 1024;
export const DEFAULT_REPLAY_FORKS = 20;

export interface ReplayDeps {
  store: Store;
  stacks: StackLifecycle;
  deployer: ForkDeployer;
  admission: Admission;
}

/**
 * The verifier as a step: the agent stopped, the declared paths collected (special files refused,
 * as in verify), the verifier's image run on this fork, the agent thawed. What it printed and its
 * reward are the step's output. The fork is the replay's own, so it grades there, not on a clone.
 */
async function verifierStep(deps: ReplayDeps, hostId: string, stackId: string): Promise<StepRun> {
  const begun = performance.now();
  const verifyId = newId("rpv");
  try {
    const at = { hostId, stackId };
    await deps.stacks.verifyStop(at);
    const c = await deps.stacks.verifyCollect(at, verifyId);
    const collected = c.files.map((f) => `${f.path} ${f.bytes} ${f.sha256}`).join("\n");
    if (c.refused)
      return {
        exit_code: null,
        stdout: `refused: ${c.refused}\n`,
        stderr: "",
        timed_out: false,
        ms: Math.round(performance.now() - begun),
      };
    const g = await deps.stacks.verifyGrade(at, verifyId);
    return {
      exit_code: g.exit_code,
      stdout: `collected:\n${collected}${c.missing.map((m) => `\nmissing ${m}`).join("")}\nreward ${g.reward}\n${g.stdout_tail}`,
      stderr: g.stderr_tail,
      timed_out: g.timed_out,
      ms: Math.round(performance.now() - begun),
    };
  } finally {
    await deps.stacks.verifyCleanup(hostId, verifyId).catch(() => {});
    await deps.stacks.resume({ hostId, stackId }).catch(() => {});
  }
}

async function runStep(
  deps: ReplayDeps,
  hostId: string,
  stackId: string,
  step: ReplayStep,
): Promise<StepRun> {
  if (step.verifier) return verifierStep(deps, hostId, stackId);
  if (step.command === undefined)
    throw new DenvError("invalid_argument", "a step needs a command or verifier: true");
  const out: Record<"stdout" | "stderr", Buffer[]> = { stdout: [], stderr: [] };
  const r = await deps.stacks.exec(
    { hostId, stackId },
    {
      ...(step.service ? { service: step.service } : {}),
      command: step.command,
      ...(step.user ? { user: step.user } : {}),
      timeoutMs: step.timeout_ms ?? REPLAY_STEP_TIMEOUT_MS,
      maxOutputBytes: STEP_OUTPUT_BYTES,
      episodeClock: true,
    },
    null,
    (which, chunk) => {
      out[which].push(chunk);
    },
  );
  return {
    exit_code: r.timedOut ? null : r.exitCode,
    stdout: Buffer.concat(out.stdout).toString("utf8"),
    stderr: Buffer.concat(out.stderr).toString("utf8"),
    timed_out: r.timedOut,
    ms: Math.round(r.durationMs),
  };
}

async function replayOne(
  deps: ReplayDeps,
  teamId: string,
  versionId: string,
  hostId: string,
  name: string,
  index: number,
  steps: ReplayStep[],
): Promise<ForkRun> {
  const run: ForkRun = { index, environment_id: null, error: null, steps: [], volumes: {} };
  const ticket = await deps.admission.admit(hostId, {
    memoryBytes: await deps.admission.versionMemoryBytes(versionId),
    label: `replay fork ${name}`,
  });
  let envId: string | null = null;
  try {
    const made = await deps.deployer.fork(versionId, {
      teamId,
      name,
      sandbox: true,
      holdClock: true,
      admission: ticket.wait,
    });
    envId = made.environmentId;
    run.environment_id = envId;
    await made.done;
    ticket.release();
    const d = await deploymentById(deps.store, made.deploymentId);
    if (d?.status !== "succeeded")
      throw new DenvError("unavailable", `the fork failed: ${d?.reason ?? "unknown"}`);
    const env = await environmentById(deps.store, envId);
    if (!env.host_id || !env.stack_id) throw new DenvError("unavailable", "the fork has no stack");
    // The episode's clock runs while a step runs and stands between steps: the replay's own
    // waits (exec round trips, other forks on the CPU) are not the episode's time, so every fork
    // reads the same times as long as each step's reads fall in the same whole second of it.
    // The host releases the clock as a step's command starts and holds it as it ends. The verifier
    // grades after the episode, on its clock as it stands: how long grading takes (a container to
    // start, paths to collect) is not the episode's time, and it differs from fork to fork.
    for (const step of steps) run.steps.push(await runStep(deps, env.host_id, env.stack_id, step));
    // What the episode changed, before the digest's checkpoint writes what the databases hold. A
    // host that cannot diff (an older denvd) leaves it out; the replay itself does not depend on it.
    const at = { hostId: env.host_id, stackId: env.stack_id };
    run.diff = await deps.stacks
      .diff(at, { maxEntries: REPLAY_DIFF_ENTRIES, maxDiffBytes: REPLAY_DIFF_TEXT_BYTES })
      .catch(() => null);
    const digest = await deps.stacks.digestVolumes(at);
    run.volumes = digest.volumes;
  } catch (err) {
    run.error = (err as Error).message;
  } finally {
    ticket.release();
    if (envId) {
      const env = await environmentById(deps.store, envId).catch(() => null);
      if (env) await (await deps.deployer.destroy(env)).done.catch(() => {});
    }
  }
  return run;
}

export async function replayVersion(
  deps: ReplayDeps,
  teamId: string,
  version: { id: string; host_id: string },
  request: ReplayRequest,
  tag: string = randomBytes(6).toString("hex"),
  onForkDone: () => Promise<void> = async () => {},
): Promise<ReplayResult> {
  const started = performance.now();
  const runs: ForkRun[] = new Array(request.forks);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= request.forks) return;
      const name = `${forkPrefix(`rpl_${tag}`)}${String(i + 1).padStart(String(request.forks).length, "0")}`;
      runs[i] = await replayOne(deps, teamId, version.id, version.host_id, name, i + 1, request.steps);
      // Progress is a figure for people: a write that fails does not fail the replay.
      await onForkDone().catch(() => {});
    }
  };
  await Promise.all(Array.from({ length: Math.min(request.parallel, request.forks) }, worker));
  const outcome = compareRuns(runs);
  const ref = runs.find((r) => r.error === null);
  return {
    version_id: version.id,
    forks: request.forks,
    steps: request.steps,
    ...outcome,
    reference: ref
      ? {
          steps: ref.steps,
          volumes: Object.fromEntries(
            Object.entries(ref.volumes).map(([v, d]) => [
              v,
              { digest: d.digest, files: d.files, bytes: d.bytes, left_out: d.left_out ?? [] },
            ]),
          ),
        }
      : null,
    diff: { ...compareDiffs(runs), reference: ref?.diff ?? null },
    runs: runs.map((r, i) => ({
      index: r.index,
      environment_id: r.environment_id,
      error: r.error,
      digest: outcome.digests[i] ?? "",
      steps: r.steps.map((s) => ({ exit_code: s.exit_code, ms: s.ms, timed_out: s.timed_out })),
    })),
    ms: Math.round(performance.now() - started),
  };
}

/** The forks of a replay are named after it, so that what a stopped server left can be found. */
const forkPrefix = (replayId: string) => `replay-${replayId.slice(4)}-`;

export const replayStatus = (r: ReplayResult) =>
  r.identical ? "identical" : r.compared === 0 ? "failed" : "diverged";

/**
 * A replay recorded as it runs: its row made first (running), the report stored once it is done.
 * `done` settles with the finished row and the report (null when the replay itself failed).
 */
export async function startRecordedReplay(
  deps: ReplayDeps,
  teamId: string,
  version: { id: string; host_id: string },
  request: ReplayRequest,
): Promise<{ row: ReplaysTable; done: Promise<{ row: ReplaysTable; report: ReplayResult | null }> }> {
  const row: ReplaysTable = {
    id: newId("rpl"),
    team_id: teamId,
    version_id: version.id,
    status: "running",
    request_json: JSON.stringify(request),
    report_json: null,
    created_at: now(),
    finished_at: null,
  };
  await insertReplay(deps.store, row);
  const done = replayVersion(deps, teamId, version, request, row.id.slice(4), () =>
    countReplayFork(deps.store, row.id),
  ).then(
    async (report) => {
      await finishReplay(deps.store, row.id, replayStatus(report), report);
      return { row: await findReplay(deps.store, teamId, row.id), report };
    },
    async (err: unknown) => {
      await finishReplay(deps.store, row.id, "failed", { error: (err as Error).message });
      return { row: await findReplay(deps.store, teamId, row.id), report: null };
    },
  );
  return { row, done };
}

/**
 * After a restart: the replays the stopped server ran are failed, and the forks they had made
 * (named after them) destroyed, not left running. Returns how many forks it destroys.
 */
export async function recoverReplays(deps: { store: Store; deployer: ForkDeployer }): Promise<number> {
  const stopped = await failRunningReplays(deps.store);
  let destroyed = 0;
  for (const r of stopped) {
    const forks = await liveSandboxesNamed(deps.store, r.team_id, forkPrefix(r.id));
    for (const env of forks) {
      destroyed++;
      // In the background: a host still away makes its destroy wait for it.
      void deps.deployer
        .destroy(env)
        .then((d) => d.done)
        .catch(() => {});
    }
  }
  return destroyed;
}

/**
 * The default episode of a version (a promote's): each collected path read where the agent works,
 * then the verifier graded on the fork. The warm commands are not run again: they made the
 * snapshot, and ops-world's own ANALYZE samples rows at random, so a second run is a different
 * pg_statistic in every fork (a replay that includes it says so: the volume pg diverges).
 */
export function defaultEpisode(spec: ResolvedSpec): ReplayStep[] {
  const steps: ReplayStep[] = [];
  const agent = spec.agent?.service;
  for (const path of spec.verifier?.collect ?? [])
    steps.push({
      ...(agent ? { service: agent } : {}),
      command: [
        "sh",
        "-c",
        'if [ -e "$1" ]; then ls -ld "$1" | cut -d" " -f1; cat "$1"; else echo absent; fi',
        "sh",
        path,
      ],
    });
  // The verifier grades on the fork, in its image or in its service (verify's own grade).
  if (spec.verifier && agent) steps.push({ verifier: true });
  return steps;
}
