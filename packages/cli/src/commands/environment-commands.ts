/** Environments and their deployments: fork, snapshot, rollback, verify, list, show, destroy. */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import type { ClockEvidence } from "@denv/protocol";
import type { Operations } from "@denv/sdk";
import type { Command } from "commander";
import { runOracle } from "../harbor/oracle.ts";
import { ageOf, printJson, printTable, progressReporter, UsageError } from "../output.ts";
import { follow, liveOf, printPhaseLog, run, warnOutsideVolumes } from "./command-runner.ts";
import { registerEgressCommand } from "./egress-command.ts";

type Deployment = Operations["getV1DeploymentsById"]["response"];

/** The clock the stack's services read, from the start (deploy) or fork evidence of the newest one. */
export function clockLine(deployments: Deployment[]): string | null {
  const newest = [...deployments]
    .filter((d) => d.status === "succeeded" && (d.kind === "deploy" || d.kind === "fork"))
    .sort((a, b) => b.created_at.localeCompare(a.created_at))[0];
  const phase = newest?.phases.find((p) => p.name === (newest.kind === "deploy" ? "start" : "fork"));
  const clock = (phase?.evidence as { clock?: ClockEvidence } | null)?.clock;
  if (!clock) return null;
  if (clock.mode === "real") return "real";
  const real = Object.entries(clock.services).filter(([, r]) => !r.frozen);
  const base = clock.base ? ` from ${clock.base}` : "";
  if (real.length === 0) return `${clock.mode}${base}: every service`;
  return `${clock.mode}${base}; real in ${real.map(([svc, r]) => `${svc} (${r.reason})`).join(", ")}`;
}

type EnvironmentRow = Operations["getV1Envs"]["response"]["environments"][number];

/** Environments as a table: where each came from (its parent version), where it runs, how old. */
function printEnvironments(envs: EnvironmentRow[]): void {
  printTable(
    ["ID", "PROJECT", "NAME", "STATUS", "VERSION", "PARENT", "RUNS ON", "AGE"],
    envs.map((e) => [
      e.id,
      e.project,
      e.name,
      e.status,
      e.current_version_id ?? "-",
      e.parent_version_id ?? "-",
      e.target === "denvd" ? (e.host_id ?? "-") : e.target,
      ageOf(e.created_at),
    ]),
  );
}

/** What `denv ps` shows without --all: environments that hold a stack now. */
const LIVE = new Set(["running", "frozen", "pending"]);

export function registerEnvironmentCommands(program: Command): void {
  const ps = program
    .command("ps")
    .description("Environments that run now (as docker ps): -a for all of them, --project for one project's")
    .option("-a, --all", "every environment, failed and lost ones too")
    .option("--project <name>", "one project's")
    .option("--json", "print JSON");
  ps.action(
    run(ps, async (client, json, o: { all?: boolean; project?: string }) => {
      const r = await client().envs.list();
      const shown = r.environments.filter(
        (e) => (o.all || LIVE.has(e.status)) && (!o.project || e.project === o.project),
      );
      if (json) printJson({ environments: shown });
      else printEnvironments(shown);
      return 0;
    }),
  );
  const fork = program
    .command("fork")
    .description("A new environment from an environment's current version, or from a version")
    .argument("<env-or-version>", "the environment to fork (its current version), or ver_… / PROJECT@ver_…")
    .requiredOption("--name <name>", "the new environment's name (with --count: the prefix of their names)")
    .option(
      "--count <n>",
      "make N forks of the environment's current version at once, named <name>-01 … <name>-N (numbers padded to N's width)",
    )
    .option(
      "--host <host>",
      "with --count: run them all on this host (a replica is made there first when needed)",
    )
    .option("--cold", "from a live version: start every service afresh instead of restoring its processes")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExamples:\n  denv fork --name rollout-017 alpha\n  denv fork --name rollout --count 32 alpha    (rollout-01 … rollout-32; each one's outcome is printed)",
    );
  fork.action(
    run(
      fork,
      async (
        client,
        json,
        env: string,
        o: { name: string; count?: string; host?: string; cold?: boolean },
      ) => {
        const t = performance.now();
        if (o.count !== undefined) {
          const count = Number(o.count);
          if (!Number.isInteger(count) || count < 1 || count > 64)
            throw new UsageError(`--count ${o.count} must be a whole number from 1 to 64`);
          const e = await client().envs.get(env);
          if (!e.current_version_id)
            throw new UsageError(`${env} has no version yet: snapshot it first (denv snapshot ${env})`);
          if (!json) process.stderr.write(`forking ${env} (${e.current_version_id}) ${count} times…\n`);
          // The fan-out answers once every fork is made: meanwhile the forks already running are
          // counted from the team's environments (named PREFIX-N, made since it began).
          const progress = json ? null : progressReporter("forks ready");
          const since = new Date(Date.now() - 1000).toISOString();
          const named = new RegExp(`^${o.name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}-\\d+$`);
          progress?.show(0, count);
          const poll = setInterval(async () => {
            const listed = await client()
              .envs.list()
              .catch(() => null);
            const ready = listed?.environments.filter(
              (x) => named.test(x.name) && x.status === "running" && x.created_at >= since,
            ).length;
            if (ready !== undefined) progress?.show(Math.min(ready, count), count);
          }, 1000);
          const r = await client()
            .versions.fork(e.current_version_id, {
              count,
              name_prefix: o.name,
              ...(o.host ? { host: o.host } : {}),
              ...(o.cold ? { cold: true } : {}),
            })
            .finally(() => clearInterval(poll));
          progress?.show(r.created, count);
          progress?.end();
          if (json) printJson(r);
          else {
            for (const f of r.forks)
              process.stdout.write(
                f.ok
                  ? `  ✓ ${f.name} (${f.environment?.id})\n`
                  : `  ✗ ${f.name}: ${f.error?.code}: ${f.error?.message}\n`,
              );
            process.stdout.write(
              `${r.created} of ${r.requested} forks made in ${Math.round(performance.now() - t)} ms${r.failed ? `; ${r.failed} failed` : ""}\n`,
            );
          }
          return r.failed ? 1 : 0;
        }
        if (o.host) throw new UsageError("--host goes with --count (a fan-out)");
        if (!json) process.stderr.write(`forking ${env} → ${o.name}…\n`);
        // A version (ver_…, PROJECT@ver_…) rather than an environment: a fork of it, named as given.
        if (/^ver_|@ver_/.test(env)) {
          const r = await client().versions.fork(env, {
            count: 1,
            name: o.name,
            ...(o.cold ? { cold: true } : {}),
          });
          const made = r.forks[0];
          if (!made?.ok || !made.environment)
            throw new UsageError(`the fork failed: ${made?.error?.code}: ${made?.error?.message}`);
          if (json) printJson(made.environment);
          else
            process.stdout.write(
              `forked ${env} → ${made.environment.name} (${made.environment.id}) in ${Math.round(performance.now() - t)} ms\n`,
            );
          return 0;
        }
        const e = await client().envs.fork(env, { name: o.name, ...(o.cold ? { cold: true } : {}) });
        if (json) printJson(e);
        else
          process.stdout.write(
            `forked ${env} → ${e.name} (${e.id}) from ${e.parent_version_id} in ${Math.round(performance.now() - t)} ms\n`,
          );
        return 0;
      },
    ),
  );
  const snapshot = program
    .command("snapshot")
    .description("Capture an environment's live state as a new version")
    .argument("[env]")
    .option(
      "--live [mode]",
      "keep every service's processes too (CRIU): its forks continue from them; --live=best-effort keeps disk-only the services that cannot be taken",
    )
    .option("--json", "print JSON")
    .addHelpText("after", "\nExamples:\n  denv snapshot rollout-017\n  denv snapshot --live rollout-017");
  snapshot.action(
    run(snapshot, async (client, json, named: string | undefined) => {
      const o = snapshot.opts<{ live?: boolean | string }>();
      // `--live ENV`: the parser takes ENV as --live's value; it is the environment.
      const taken = named === undefined && typeof o.live === "string" && o.live !== "best-effort";
      const env = taken ? (o.live as string) : named;
      const mode = taken ? true : o.live;
      if (!env) throw new UsageError("name the environment: denv snapshot [--live] ENV");
      if (mode !== undefined && mode !== true && mode !== "best-effort")
        throw new UsageError(`--live takes no value or best-effort, not "${mode}"`);
      const live = mode === true ? true : mode === "best-effort" ? ("best-effort" as const) : undefined;
      if (!json) process.stderr.write(`snapshotting ${env}${live ? " with its processes" : ""}…\n`);
      const d = await client().untilVerdict(() => client().envs.snapshot(env, live ? { live } : {}));
      if (json) printJson(d);
      else if (d.status === "succeeded") {
        const kept = liveOf(d);
        process.stdout.write(
          `snapshot of ${env}: version ${d.version_id} (frozen ${d.frozen_ms} ms${kept ? `; processes of ${kept}` : ""})\n`,
        );
        warnOutsideVolumes(d);
      } else process.stdout.write(`snapshot failed: ${d.reason}\n`);
      return d.status === "succeeded" ? 0 : 1;
    }),
  );
  const rollback = program
    .command("rollback")
    .description("Restore an environment to a version and re-check health")
    .argument("<env>")
    .argument("<version>")
    .option("--json", "print JSON")
    .addHelpText("after", "\nExample:\n  denv rollback alpha ver_0123456789ab");
  rollback.action(
    run(rollback, async (client, json, env: string, version: string) => {
      if (!json) process.stderr.write(`rolling ${env} back to ${version}…\n`);
      const d = await client().untilVerdict(() => client().envs.rollback(env, { version }));
      if (json) printJson(d);
      else
        process.stdout.write(
          d.status === "succeeded" ? `rolled ${env} back to ${version}\n` : `rollback failed: ${d.reason}\n`,
        );
      return d.status === "succeeded" ? 0 : 1;
    }),
  );

  const verify = program
    .command("verify")
    .description("Grade an environment on a fork, as a separate principal; prints the reward")
    .argument("<env>")
    .option(
      "--resume",
      "let the agent's processes run again afterwards (default: left frozen for inspection, but an environment deploys land on, alpha, runs again)",
    )
    .option("--keep-frozen", "leave it frozen for inspection, even an environment deploys land on")
    .option(
      "--oracle <dir>",
      "run a known-good solution first: DIR is copied to /solution and DIR/solve.sh runs as the service's user",
    )
    .option("--oracle-service <name>", "the service the oracle runs in", "main")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExamples:\n  denv verify rollout-017\n  denv verify hello-world/alpha --oracle ./hello-world/solution   # an imported Harbor task\n\nThe reward is the number the verifier writes to $DENV_REWARD_FILE, or the last line of its stdout.",
    );
  verify.action(
    run(
      verify,
      async (
        client,
        json,
        env: string,
        o: { resume?: boolean; keepFrozen?: boolean; oracle?: string; oracleService: string },
      ) => {
        if (o.resume && o.keepFrozen) throw new UsageError("--resume and --keep-frozen say opposite things");
        // The oracle works on a fork of the environment's version, graded and then removed: ENV
        // itself is left as it was (a plain verify of it afterwards grades its own state).
        let graded = env;
        let oracleFork: string | null = null;
        if (o.oracle) {
          if (!existsSync(join(o.oracle, "solve.sh"))) throw new UsageError(`${o.oracle} has no solve.sh`);
          const f = await client().envs.fork(env, { name: `oracle-${randomBytes(4).toString("hex")}` });
          oracleFork = f.id;
          graded = f.id;
          if (!json) process.stderr.write(`oracle: on fork ${f.name} of ${env} (${env} is left as it was)\n`);
        }
        let d: Awaited<ReturnType<ReturnType<typeof client>["untilVerdict"]>>;
        try {
          if (o.oracle) {
            const r = await runOracle(client(), graded, o.oracle, { service: o.oracleService });
            if (!json) process.stderr.write(`oracle: solve.sh exited ${r.exit_code}\n`);
          }
          if (!json)
            process.stderr.write(`verifying ${graded}: stop, diff, collect, snapshot, clone, grade…\n`);
          d = await client().untilVerdict(() =>
            client().envs.verify(
              o.oracle ? graded : env,
              // Neither: the server's default (frozen, but a deployed environment runs again).
              o.resume ? { resume: true } : o.keepFrozen ? { resume: false } : {},
            ),
          );
        } finally {
          if (oracleFork)
            await client()
              .envs.destroy(oracleFork)
              .catch(() => {});
        }
        if (json) printJson({ ...d, reward: d.verify?.reward ?? null });
        else {
          printPhaseLog(d, false);
          if (d.status === "succeeded" && d.verify)
            process.stdout.write(
              `reward ${d.verify.reward}${d.verify.reason ? ` (${d.verify.reason})` : ""}\n`,
            );
        }
        return d.status === "succeeded" ? 0 : 1;
      },
    ),
  );

  // --- environments and deployments ---
  const env = program.command("env").description("Environments");
  const el = env.command("list").description("List environments").option("--json", "print JSON");
  el.action(
    run(el, async (client, json) => {
      const r = await client().envs.list();
      if (json) printJson(r);
      else {
        printEnvironments(r.environments);
      }
      return 0;
    }),
  );
  const es = env
    .command("show")
    .description("An environment and its deployments")
    .argument("<env>")
    .option("--json", "print JSON");
  es.action(
    run(es, async (client, json, ref: string) => {
      const e = await client().envs.get(ref);
      const deps = await client().envs.deployments(e.id);
      if (json) printJson({ ...e, deployments: deps.deployments });
      else {
        process.stdout.write(
          `${e.project}/${e.name} (${e.id}) ${e.status}\n  version ${e.current_version_id ?? "-"}  parent ${e.parent_version_id ?? "-"}\n  services ${e.services.join(", ")}\n`,
        );
        const clock = clockLine(deps.deployments);
        if (clock) process.stdout.write(`  clock ${clock}\n`);
        if (e.current_version_id)
          process.stdout.write(`  data sheet: denv datasheet ${e.project}@${e.current_version_id}\n`);
        for (const d of deps.deployments)
          process.stdout.write(`  ${d.created_at} ${d.kind.padEnd(9)} ${d.status} ${d.id}\n`);
      }
      return 0;
    }),
  );
  const ei = env
    .command("ingress")
    .description(
      "An environment's ingress names for its published ports, and the token its private names ask for",
    )
    .argument("<env>")
    .option("--json", "print JSON");
  ei.action(
    run(ei, async (client, json, ref: string) => {
      const r = await client().envs.ingress(ref);
      if (json) printJson(r);
      else if (!r.domain)
        process.stdout.write("the server has no ingress domain (denv server --ingress-domain)\n");
      else {
        printTable(
          ["URL", "PORT", "ACCESS"],
          r.names.map((n) => [n.url, `${n.service}:${n.port}`, n.public ? "public" : "private"]),
        );
        process.stdout.write(`any port: ${r.port_host_template}\n`);
        process.stdout.write(`token (header denv-ingress-token): ${r.token}\n`);
      }
      return 0;
    }),
  );
  registerEgressCommand(env);
  const ep = env
    .command("pause")
    .description(
      "Pause an environment keeping its memory: every service's processes checkpointed to disk and stopped (denv env resume carries on)",
    )
    .argument("<env>")
    .option("--json", "print JSON");
  ep.action(
    run(ep, async (client, json, ref: string) => {
      const e = await client().envs.pause(ref);
      if (json) printJson(e);
      else process.stdout.write(`paused ${e.project}/${e.name} with its memory: ${e.status}\n`);
      return 0;
    }),
  );
  const er = env
    .command("resume")
    .description(
      "Resume a paused environment (its processes carry on from their memory), or thaw one a verify froze for inspection",
    )
    .argument("<env>")
    .option("--json", "print JSON");
  er.action(
    run(er, async (client, json, ref: string) => {
      const e = await client().envs.resume(ref);
      if (json) printJson(e);
      else process.stdout.write(`resumed ${e.project}/${e.name}: ${e.status}\n`);
      return 0;
    }),
  );
  const ed = env
    .command("destroy")
    .description("Destroy environments (their versions stay); several are destroyed side by side")
    .argument("<env...>")
    .option("--json", "print JSON: one deployment for one environment, else {env, ok, deployment|error} each")
    .addHelpText(
      "after",
      "\nExamples:\n  denv env destroy shop/rollout-01\n  denv env destroy rollout-01 rollout-02 rollout-03",
    );
  ed.action(
    run(ed, async (client, json, refs: string[]) => {
      const destroyOne = (ref: string) => client().untilVerdict(() => client().envs.destroy(ref));
      if (refs.length === 1) {
        const ref = refs[0] as string;
        const d = await destroyOne(ref);
        if (json) printJson(d);
        else
          process.stdout.write(
            d.status === "succeeded" ? `destroyed ${ref}\n` : `destroy failed: ${d.reason}\n`,
          );
        return d.status === "succeeded" ? 0 : 1;
      }
      // Each is its own deployment: one that fails (or does not exist) does not hold back the others.
      const outcomes = await Promise.all(
        [...new Set(refs)].map(async (ref) => {
          try {
            const d = await destroyOne(ref);
            return { env: ref, ok: d.status === "succeeded", deployment: d, why: d.reason };
          } catch (err) {
            return { env: ref, ok: false, error: err as Error, why: (err as Error).message };
          }
        }),
      );
      if (json)
        printJson(
          outcomes.map((o) =>
            o.deployment
              ? { env: o.env, ok: o.ok, deployment: o.deployment }
              : {
                  env: o.env,
                  ok: false,
                  error: { code: (o.error as { code?: string }).code ?? "internal", message: o.why },
                },
          ),
        );
      else
        for (const o of outcomes)
          process.stdout.write(o.ok ? `destroyed ${o.env}\n` : `${o.env}: not destroyed: ${o.why}\n`);
      return outcomes.every((o) => o.ok) ? 0 : 1;
    }),
  );
  const dep = program.command("deployment").description("Deployments");
  const dl = dep
    .command("list")
    .description("The team's deployments, newest first")
    .option("--env <env>", "one environment's")
    .option("--running", "only those queued or running")
    .option("--limit <n>", "at most this many (default 50)")
    .option("--json", "print JSON");
  dl.action(
    run(dl, async (client, json, o: { env?: string; running?: boolean; limit?: string }) => {
      if (o.limit !== undefined && !/^\d{1,4}$/.test(o.limit))
        throw new UsageError(`--limit ${o.limit}: a count`);
      const r = await client().deployments.list({
        query: {
          ...(o.env ? { env: o.env } : {}),
          ...(o.running ? { running: "true" as const } : {}),
          ...(o.limit ? { limit: o.limit } : {}),
        },
      });
      if (json) printJson(r);
      else
        printTable(
          ["ID", "KIND", "STATUS", "ENVIRONMENT", "CREATED"],
          r.deployments.map((d) => [d.id, d.kind, d.status, d.environment, d.created_at]),
        );
      return 0;
    }),
  );
  const df = dep
    .command("follow")
    .description("Follow a deployment's phases live until its verdict (Ctrl-C stops following, not it)")
    .argument("<id>")
    .option("--json", "print JSON");
  df.action(
    run(df, async (client, json, id: string) => {
      const final = await follow(client(), id, json);
      if (json) printJson(final);
      else process.stdout.write(`${final.status}${final.reason ? `: ${final.reason}` : ""}\n`);
      return final.status === "succeeded" ? 0 : 1;
    }),
  );
  const dc = dep
    .command("cancel")
    .description(
      "Stop a queued or running deployment: before its next phase begins, undoing what it made (a phase at work finishes first)",
    )
    .argument("<id>")
    .option("--no-wait", "ask, and do not wait for it to stop")
    .option("--json", "print JSON");
  dc.action(
    run(dc, async (client, json, id: string, o: { wait: boolean }) => {
      const asked = await client().deployments.cancel(id);
      if (!o.wait) {
        if (json) printJson(asked);
        else process.stdout.write(`asked deployment ${id} to stop; it stops before its next phase\n`);
        return 0;
      }
      if (!json) process.stdout.write(`asked deployment ${id} to stop; waiting for it to stop…\n`);
      const final = await follow(client(), id, json);
      if (json) printJson(final);
      else process.stdout.write(`${final.status}${final.reason ? `: ${final.reason}` : ""}\n`);
      // It stopped, or it finished first: either way it is over; succeeded is said, not an error.
      return 0;
    }),
  );
  const ds = dep
    .command("show")
    .description("A deployment's phase log with its evidence")
    .argument("<id>")
    .option("--json", "print JSON");
  ds.action(
    run(ds, async (client, json, id: string) => {
      const d = await client().deployments.get(id);
      if (json) printJson(d);
      else printPhaseLog(d, true);
      return 0;
    }),
  );
}
