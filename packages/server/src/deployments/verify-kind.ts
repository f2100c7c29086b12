/**
 * verify: stop → diff → collect → snapshot → clone → grade → verdict. The agent is frozen first and
 * stays frozen (unless resume); grading happens on a fork, as root, in the verifier's own container.
 * The diff phase records what the episode changed (the frozen environment against the version it
 * came from) beside the reward; a diff that fails is recorded as failed and grading goes on.
 * The deployment succeeds when grading ran; the reward (0 for refused collections, a crashed or
 * timed-out verifier) is in the verdict.
 */
import { DenvError, stackName } from "@denv/protocol";
import { newId } from "../ids.ts";
import { environmentDeploymentsOfKinds } from "../store/deployment-store.ts";
import { environmentById, updateEnvironment } from "../store/environment-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import { requireHostsTarget } from "../targets/target.ts";
import type { DeploymentRunner, Launched } from "./deployment-runner.ts";
import type { PhaseRecorder } from "./phase-recorder.ts";
import { snapshotPhase, specOf } from "./snapshot-kind.ts";

const VERIFY_PHASES = ["stop", "diff", "collect", "snapshot", "clone", "grade", "verdict"];
/**
 * The evidence lists this many changes and this much text diff, the rest counted: a deployment's
 * record stays small (the full listing is `denv diff ENV` while the environment is kept frozen).
 */
const DIFF_EVIDENCE_ENTRIES = 100;
const DIFF_EVIDENCE_TEXT_BYTES = 16 * 1024;

export async function runVerify(
  runner: DeploymentRunner,
  env: EnvironmentsTable,
  options: { resume?: boolean },
): Promise<Launched> {
  // The agent is frozen, its paths collected and graded on a fork as another principal: a host's.
  requireHostsTarget(env, "verify");
  // Left frozen for inspection unless asked otherwise, but for an environment deploys and promotes
  // land on (alpha, staging): grading it must not leave it unusable.
  const deployedInto =
    (await environmentDeploymentsOfKinds(runner.store, env.id, ["deploy", "promote"])).length > 0;
  const resume = options.resume ?? deployedInto;
  const rec = await runner.begin(env.team_id, env.id, "verify", VERIFY_PHASES);
  const done = runner.serialize(env.id, async () => {
    const current = await environmentById(runner.store, env.id);
    const hostId = current.host_id;
    const stackId = current.stack_id;
    const made: { graderStackId?: string } = {};
    let verdict: () => Promise<void>;
    try {
      if (!hostId || !stackId || !["running", "frozen"].includes(current.status)) {
        throw new DenvError(
          "conflict",
          `environment ${env.name} is ${current.status}; verify needs a running environment`,
        );
      }
      const grade = await gradePhases(runner, rec, current, hostId, stackId, made);
      if (resume) {
        await runner.stacks.resume({ hostId, stackId });
        await updateEnvironment(runner.store, env.id, { status: "running" });
      }
      verdict = () =>
        rec.verdict("succeeded", null, {
          reward: grade.reward,
          reason: grade.reason ?? null,
          exit_code: grade.exit_code ?? null,
          agent: resume ? "resumed" : "frozen for inspection",
          ...(options.resume === undefined && deployedInto
            ? { resumed_because: "deploys land on this environment (resume: false keeps it frozen)" }
            : {}),
        });
    } catch (err) {
      await rec.skipRest("skipped: an earlier phase failed");
      verdict = () => rec.verdict("failed", err instanceof Error ? err.message : String(err), null);
    }
    // The grader's fork and the collected files go before the verdict is written: a server that
    // stops in between still has them in the deployment's state to remove (deployment-recovery.ts).
    if (hostId) {
      if (made.graderStackId)
        await runner.stacks.destroy({ hostId, stackId: made.graderStackId }).catch(() => {});
      await runner.stacks.verifyCleanup(hostId, rec.deploymentId).catch(() => {});
    }
    delete rec.state.grader_stack_id;
    delete rec.state.froze_agent;
    await verdict();
  });
  done.catch(() => {});
  return { deploymentId: rec.deploymentId, done };
}

/** stop, diff, collect, then (unless the collection was refused) snapshot, clone and grade. */
async function gradePhases(
  runner: DeploymentRunner,
  rec: PhaseRecorder,
  env: EnvironmentsTable,
  hostId: string,
  stackId: string,
  made: { graderStackId?: string },
): Promise<Record<string, unknown>> {
  const { stacks } = runner;
  const at = { hostId, stackId };
  // Written down before the agent is frozen: a server stopped from here on thaws it on restart,
  // since no verdict will say "frozen for inspection" (deployment-recovery.ts).
  if (env.status === "running") {
    rec.state.froze_agent = true;
    await rec.persist();
  }
  await rec.run("stop", async () => ({
    evidence: await stacks.verifyStop(at),
  }));
  await updateEnvironment(runner.store, env.id, { status: "frozen" });
  // What the episode changed, read while the agent is frozen and before the snapshot's checkpoint
  // writes what the databases hold (a refused collection has it too: it is what an auditor asks).
  const against = env.parent_version_id ?? env.current_version_id;
  if (!against) await rec.skip("diff", "the environment came from no version: nothing to compare with");
  else
    await rec
      .run("diff", async () => ({
        evidence: await stacks.diff(at, {
          against,
          maxEntries: DIFF_EVIDENCE_ENTRIES,
          maxDiffBytes: DIFF_EVIDENCE_TEXT_BYTES,
        }),
      }))
      // Recorded as failed with its reason; the grade does not depend on it.
      .catch(() => {});
  const collected = (await rec.run("collect", async () => {
    const c = await stacks.verifyCollect(at, rec.deploymentId);
    return { value: c, evidence: c };
  })) as { refused: string | null };
  if (collected.refused) {
    for (const n of ["snapshot", "clone", "grade"])
      await rec.skip(n, "the collected paths were refused: the episode scores 0");
    return { reward: 0, reason: `refused: ${collected.refused}` };
  }
  // x-denv.live: the grading fork keeps the other services' processes (a simulator's state in
  // memory, say); the agent's, frozen, are left out of the version (its forks start it afresh).
  const spec = await specOf(runner, env);
  const versionId = await snapshotPhase(runner, rec, env, hostId, stackId, async () => spec, spec.live);
  const graderStackId = (await rec.run("clone", async () => {
    // Named and written down before the host is asked: removed whatever happens next.
    made.graderStackId = newId("stk");
    rec.state.grader_stack_id = made.graderStackId;
    await rec.persist();
    const f = await stacks.fork(hostId, {
      versionId,
      name: stackName(env.name, "grader", rec.deploymentId.slice(4, 10)),
      operationId: `${rec.deploymentId}-clone`,
      newStackId: made.graderStackId,
    });
    return {
      value: f.stack_id,
      evidence: {
        stack_id: f.stack_id,
        from_version: versionId,
        total_ms: f.evidence.total_ms,
        egress: f.evidence.egress,
        ...(f.evidence.live ? { live: f.evidence.live } : {}),
      },
    };
  })) as string;
  return (await rec.run("grade", async () => {
    const g = await stacks.verifyGrade({ hostId, stackId: graderStackId }, rec.deploymentId);
    return { value: g, evidence: g };
  })) as Record<string, unknown>;
}
