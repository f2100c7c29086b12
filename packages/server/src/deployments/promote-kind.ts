/**
 * promote: a version moved to another environment (`denv promote ops-world alpha staging`) only
 * through its gates, one phase each with its evidence:
 *
 *   candidate    the version: FROM's current one, or the one named
 *   fresh_fork   a fork of it made and healthy (the gates' fork, removed after the soak)
 *   consistency  every volume of that fork checks out: PostgreSQL's pg_amcheck where the image has
 *                it, file digests of every volume
 *   replays      N forks run one episode and are identical (replay-runner.ts)
 *   invariants   nothing removed, disabled or loosened against what the target runs now
 *   soak         the gates' fork kept running and health-checked for the soak
 *   switch       a fresh fork becomes the target's stack; the old one is removed
 *
 * A failed gate fails its phase with the gate named, the target keeps what it ran, and the
 * deployment ends rolled_back (runner.rollBack). The record is the version's data sheet.
 */
import { randomBytes } from "node:crypto";
import { DenvError, type OpResult, type ResolvedSpec, stackName } from "@denv/protocol";
import type { Admission } from "../placement/admission.ts";
import { environmentById, findOrCreateEnvironment, updateEnvironment } from "../store/environment-store.ts";
import type { EnvironmentsTable, ProjectsTable, VersionsTable } from "../store/schema.ts";
import { versionHost, versionSpecJson } from "../store/version-store.ts";
import type { DeploymentRunner, Launched } from "./deployment-runner.ts";
import type { ForkDeployer } from "./fork-kind.ts";
import { PhaseFailure } from "./phase-recorder.ts";
import { promoteInvariants } from "./promote-invariants.ts";
import { defaultEpisode, type ReplayStep, startRecordedReplay } from "./replay-runner.ts";

export const PROMOTE_PHASES = [
  "candidate",
  "fresh_fork",
  "consistency",
  "replays",
  "invariants",
  "soak",
  "switch",
  "verdict",
];

export interface PromoteOptions {
  /** Forks the replays gate runs (default 5). */
  replays: number;
  /** How long the soak keeps the gates' fork health-checked (default 10 s). */
  soakMs: number;
  /** The replays' episode; default: the version's warm commands, then its collected paths read. */
  steps?: ReplayStep[];
}

const SOAK_CHECK_EVERY_MS = 2000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** pg_amcheck over every database, run in a PostgreSQL service as the postgres user. */
const AMCHECK = [
  "sh",
  "-c",
  'command -v pg_amcheck >/dev/null 2>&1 || { echo "pg_amcheck is not in this image"; exit 127; }; pg_amcheck -U "${POSTGRES_USER:-postgres}" --all --install-missing --heapallindexed',
];
const isPostgres = (image: string) => /(^|\/)postgres[^/]*(:|@|$)/.test(image);

/** A command in a service of a stack the deployment holds, its output kept (the last 64 KiB). */
async function runInStack(
  runner: DeploymentRunner,
  hostId: string,
  stackId: string,
  service: string,
  command: string[],
  user: string,
  timeoutMs: number,
): Promise<{ exit_code: number | null; output: string }> {
  const chunks: Buffer[] = [];
  const r = await runner.stacks.exec(
    { hostId, stackId },
    { service, command, user, timeoutMs, maxOutputBytes: 64 * 1024 },
    null,
    (_which, chunk) => {
      chunks.push(chunk);
    },
  );
  return { exit_code: r.timedOut ? null : r.exitCode, output: Buffer.concat(chunks).toString("utf8") };
}

export async function runPromote(
  runner: DeploymentRunner,
  deployer: ForkDeployer,
  admission: Admission,
  args: { project: ProjectsTable; version: VersionsTable; fromName: string | null; target: string },
  options: PromoteOptions,
): Promise<Launched & { environmentId: string }> {
  const { project, version, target } = args;
  const { store, stacks } = runner;
  const hostId = versionHost(version, "promote");
  const env = await findOrCreateEnvironment(store, project, target);
  if (env.sandbox || env.pool_id)
    throw new DenvError("conflict", `${target} is a sandbox, not an environment`);
  const spec = JSON.parse(runner.options.secrets.openText(version.spec_json)) as ResolvedSpec;
  const rec = await runner.begin(project.team_id, env.id, "promote", PROMOTE_PHASES);
  let before: EnvironmentsTable = env;
  const gate = (name: string, message: string, evidence?: unknown) =>
    new PhaseFailure(`gate ${name} failed: ${message}`, evidence);
  const launched = runner.launch(
    rec,
    env.id,
    async () => {
      before = await environmentById(store, env.id);
      rec.state.host_id = hostId;
      await rec.run("candidate", async () => ({
        evidence: {
          version_id: version.id,
          project: project.name,
          from: args.fromName,
          target,
          target_version_before: before.current_version_id,
          spec_hash: version.spec_hash,
        },
      }));
      if (!stacks.hostConnected(hostId))
        await stacks.waitForHost(hostId, runner.options.joinWaitMs ?? 30_000).catch(() => {
          throw gate("fresh_fork", `the host holding ${version.id} is not connected`);
        });
      const forked = (await rec.run("fresh_fork", async () => {
        try {
          const out = await stacks.fork(hostId, {
            versionId: version.id,
            name: stackName(project.name, "promote", randomBytes(3).toString("hex")),
            operationId: rec.deploymentId,
            newStackId: await rec.building(),
          });
          const e = out.evidence;
          return {
            value: out,
            evidence: {
              stack_id: out.stack_id,
              health: e.health,
              egress: e.egress,
              clock: e.clock ?? null,
              total_ms: e.total_ms,
            },
          };
        } catch (err) {
          throw gate("fresh_fork", (err as Error).message);
        }
      })) as OpResult<"fork">;
      const gateStack = forked.stack_id;
      await rec.run("consistency", async () => {
        const amcheck: Record<string, { exit_code: number | null; output_tail: string; ran: boolean }> = {};
        for (const [svc, s] of Object.entries(spec.services)) {
          if (!isPostgres(s.image) || s.volumes.length === 0) continue;
          const r = await runInStack(runner, hostId, gateStack, svc, AMCHECK, "postgres", 600_000);
          const ran = r.exit_code !== 127;
          amcheck[svc] = { exit_code: r.exit_code, output_tail: r.output.slice(-2000), ran };
          if (ran && r.exit_code !== 0)
            throw gate(
              "consistency",
              `pg_amcheck found corruption in service ${svc}: ${r.output.slice(-400)}`,
              {
                amcheck,
              },
            );
        }
        const digest = await stacks.digestVolumes({ hostId, stackId: gateStack }, false);
        return {
          evidence: {
            amcheck,
            volumes: Object.fromEntries(
              Object.entries(digest.volumes).map(([v, d]) => [
                v,
                { digest: d.digest, files: d.files, bytes: d.bytes, left_out: d.left_out },
              ]),
            ),
            checkpoint: digest.checkpoint,
          },
        };
      });
      await rec.run("replays", async () => {
        const steps = options.steps ?? defaultEpisode(spec);
        if (steps.length === 0)
          return {
            evidence: {
              skipped: "the version has no collected paths and no verifier to replay; send steps",
            },
          };
        const request = { forks: options.replays, parallel: Math.min(4, options.replays), steps };
        const started = await startRecordedReplay(
          { store, stacks, deployer, admission },
          project.team_id,
          { ...version, host_id: hostId },
          request,
        );
        const { row, report } = await started.done;
        const replayId = row.id;
        if (!report)
          throw gate(
            "replays",
            `the replay failed: ${(JSON.parse(row.report_json ?? "{}") as { error?: string }).error ?? "unknown"}`,
          );
        const evidence = {
          replay_id: replayId,
          forks: report.forks,
          identical: report.identical,
          digests: report.digests,
          first_divergence: report.first_divergence,
          sources: report.sources,
          // What the episode changed, and whether every replay changed the same.
          diff: report.diff.reference
            ? {
                identical: report.diff.identical,
                divergent_forks: report.diff.divergent_forks,
                summary: report.diff.reference.summary,
                changes: report.diff.reference.entries
                  .slice(0, 50)
                  .map((e) => `${e.change} ${e.volume}/${e.path}`),
                databases: report.diff.reference.databases.map((x) => ({
                  service: x.service,
                  tables: x.tables,
                })),
              }
            : null,
          ms: report.ms,
        };
        if (!report.identical) {
          const d = report.first_divergence;
          const where = d
            ? `fork ${d.fork} ${d.step !== null ? `step ${d.step + 1} (${d.what})` : d.volume ? `volume ${d.volume}` : d.what}: ${d.diff.slice(0, 3).join(" ")}`
            : "no fork ran the episode";
          throw gate("replays", `${options.replays} replays are not identical: ${where}`, evidence);
        }
        return { evidence };
      });
      await rec.run("invariants", async () => {
        const sealed = await versionSpecJson(store, before.current_version_id);
        if (!sealed)
          return {
            evidence: {
              compared_with: null,
              checks: [],
              note: `${target} runs no version yet: nothing to compare`,
            },
          };
        const current = JSON.parse(runner.options.secrets.openText(sealed)) as ResolvedSpec;
        const checks = promoteInvariants(current, spec);
        const evidence = { compared_with: before.current_version_id, checks };
        const failed = checks.filter((c) => !c.ok);
        if (failed.length > 0)
          throw gate(
            "invariants",
            failed.map((c) => `${c.check}: ${c.found.join(", ")}`).join("; "),
            evidence,
          );
        return { evidence };
      });
      await rec.run("soak", async () => {
        const begun = performance.now();
        let checks = 0;
        let last: unknown = null;
        // At least one check, then one every SOAK_CHECK_EVERY_MS until the soak is over.
        for (
          let left = options.soakMs;
          checks === 0 || left > 0;
          left = options.soakMs - (performance.now() - begun)
        ) {
          if (checks > 0) await sleep(Math.min(SOAK_CHECK_EVERY_MS, left));
          try {
            last = await stacks.checkHealth({ hostId, stackId: gateStack });
          } catch (err) {
            throw gate(
              "soak",
              `after ${Math.round(performance.now() - begun)} ms: ${(err as Error).message}`,
              {
                checks,
              },
            );
          }
          checks++;
        }
        return {
          evidence: {
            soak_ms: Math.round(performance.now() - begun),
            checks,
            last_health: last,
            // denv has no scheduled triggers yet: the soak is the requested duration.
            until: "the soak duration",
          },
        };
      });
      await stacks.destroy({ hostId, stackId: gateStack }, { timeoutMs: 120_000 }).catch(() => {});
      delete rec.state.building_stack_id;
      await rec.persist();
      const switched = (await rec.run("switch", async () => {
        const out = await stacks.fork(hostId, {
          versionId: version.id,
          name: stackName(project.name, target),
          operationId: rec.deploymentId,
          newStackId: await rec.building(),
        });
        return {
          value: out,
          evidence: { stack_id: out.stack_id, replaced_stack: before.stack_id, health: out.evidence.health },
        };
      })) as OpResult<"fork">;
      if (before.stack_id) {
        rec.state.retiring_stack_id = before.stack_id;
        await rec.persist();
      }
      await updateEnvironment(store, env.id, {
        status: "running",
        host_id: hostId,
        stack_id: switched.stack_id,
        current_version_id: version.id,
        parent_version_id: version.id,
      });
      delete rec.state.building_stack_id;
      await rec.persist();
      if (before.stack_id && before.host_id)
        await stacks.destroy({ hostId: before.host_id, stackId: before.stack_id }).catch(() => {});
      delete rec.state.retiring_stack_id;
      await rec.verdict("succeeded", null, {
        version_id: version.id,
        environment: target,
        previous_version_id: before.current_version_id,
      });
    },
    (err) => runner.rollBack(rec, before, err),
  );
  return { ...launched, environmentId: env.id };
}
