/**
 * `denv import harbor DIR|GIT [OUT]`: each Harbor task becomes a denv project directory, and then
 * (unless --no-check) a deployed project whose verifier is checked twice on forks of its version:
 * with the task's oracle run first (it must score 1) and without (it must not).
 */
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import type { DenvClient } from "@denv/sdk";
import type { Command } from "commander";
import { type ImportedTask, importHarborEnvironment, importHarborTask } from "../harbor/harbor-import.ts";
import {
  environmentSection,
  findTasks,
  readEnvironmentDir,
  readHarborTask,
  refused,
} from "../harbor/harbor-task.ts";
import { importKarotteTask, type KarotteImport } from "../harbor/karotte-import.ts";
import { runOracle } from "../harbor/oracle.ts";
import { printJson, UsageError } from "../output.ts";
import { follow, run } from "./command-runner.ts";
import { uploadSource } from "./project-commands.ts";

/** A git URL (cloned shallow into a temporary directory), or a local path. */
const isGitUrl = (s: string) => /^(https?|git|ssh):\/\/|^[\w.-]+@[\w.-]+:|\.git$/.test(s) && !existsSync(s);

async function cloneShallow(url: string): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "denv-import-"));
  // No hooks run on clone; links in the checkout are never followed by the import.
  await promisify(execFile)("git", ["clone", "--depth", "1", "--quiet", "--", url, join(dir, "repo")], {
    timeout: 10 * 60_000,
    env: { ...process.env, GIT_TERMINAL_PROMPT: "0" },
  }).catch((err: { stderr?: string }) => {
    rmSync(dir, { recursive: true, force: true });
    throw new UsageError(
      `git clone ${url} failed: ${String(err.stderr ?? err)
        .trim()
        .split("\n")
        .at(-1)}`,
    );
  });
  return join(dir, "repo");
}

export interface CheckResult {
  version_id: string | null;
  deploy: string;
  oracle_exit_code: number | null;
  reward_with_oracle: number | null;
  reward_without_oracle: number | null;
  reason: string | null;
}

/** Deploys an imported task and verifies two forks of its version: with its oracle, and without. */
export async function checkImported(c: DenvClient, t: ImportedTask, json: boolean): Promise<CheckResult> {
  const out: CheckResult = {
    version_id: null,
    deploy: "not run",
    oracle_exit_code: null,
    reward_with_oracle: null,
    reward_without_oracle: null,
    reason: null,
  };
  const final = await deployDir(c, t.name, t.dir);
  out.deploy = final.status;
  if (final.status !== "succeeded") {
    out.reason = final.reason;
    return out;
  }
  out.version_id = final.version_id;
  const verifyFork = async (suffix: string, oracle: boolean): Promise<number | null> => {
    const fork = await c.envs.fork(`${t.name}/alpha`, { name: `${t.name.slice(0, 40)}-${suffix}` });
    try {
      if (oracle && t.oracle) {
        const r = await runOracle(c, fork.id, join(t.dir, t.oracle), { service: "main", env: t.solutionEnv });
        out.oracle_exit_code = r.exit_code;
        if (r.exit_code !== 0 && !json)
          process.stderr.write(`${t.name}: solve.sh exited ${r.exit_code}: ${r.stderr_tail.slice(-400)}\n`);
      }
      const v = await c.envs.verify(fork.id, { resume: false });
      if (v.status !== "succeeded") out.reason = v.reason;
      else if (v.verify?.reason && !json) process.stderr.write(`${t.name} (${suffix}): ${v.verify.reason}\n`);
      return v.verify?.reward ?? null;
    } finally {
      await c.envs.destroy(fork.id).catch(() => {});
    }
  };
  if (t.oracle) out.reward_with_oracle = await verifyFork("oracle", true);
  out.reward_without_oracle = await verifyFork("control", false);
  return out;
}

/** Creates (or reuses) a local project for a directory, uploads it, deploys it to an environment. */
async function deployDir(c: DenvClient, name: string, dir: string, env = "alpha", kind = "rl-environment") {
  const existing = await c.projects.get(name).catch(() => null);
  if (existing && (existing.source_type !== "local" || existing.source !== dir))
    throw new UsageError(`a project named ${name} already exists with another source (${existing.source})`);
  if (!existing) await c.projects.create({ name, kind: kind as "rl-environment", source: dir });
  await uploadSource(c, name, dir);
  const d = await c.projects.deploy(name, { env });
  return follow(c, d.id, true);
}

/** Deploys an imported Karotte task, runs one episode on a fork, and verifies it. */
async function checkKarotte(c: DenvClient, t: KarotteImport) {
  const final = await deployDir(c, t.name, t.dir);
  if (final.status !== "succeeded")
    return { deploy: final.status, reason: final.reason, episode_exit_code: null, reward: null };
  const fork = await c.envs.fork(`${t.name}/alpha`, { name: `${t.name.slice(0, 40)}-check` });
  try {
    const e = await c.exec(fork.id, {
      service: "karotte",
      command: ["denv-episode"],
      timeout_ms: 60 * 60_000,
    });
    const v = await c.envs.verify(fork.id, { resume: false });
    return {
      deploy: final.status,
      version_id: final.version_id,
      episode_exit_code: e.exit_code,
      episode_tail: `${e.stdout}${e.stderr}`.slice(-400),
      reward: v.verify?.reward ?? null,
      reason: v.verify?.reason ?? v.reason,
    };
  } finally {
    await c.envs.destroy(fork.id).catch(() => {});
  }
}

export function registerImportCommands(program: Command): void {
  const imp = program
    .command("import")
    .description("Turn environments of other formats into denv projects (harbor, karotte)");
  const harbor = imp
    .command("harbor")
    .description(
      "A Harbor task, or a dataset directory of tasks, or a git repository of them → a denv project per task; then deploy each and check its verifier with the task's oracle",
    )
    .argument("<source>", "a task directory (with task.toml), a directory of tasks, or a git URL")
    .argument("[out]", "where the projects are written, one directory each", ".")
    .option("--no-check", "only write the projects (no deploy, no oracle check)")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      `
Examples:
  denv import harbor ./tasks/hello-world ./projects
  denv import harbor https://github.com/you/harbor-tasks.git ./projects --no-check

Each project keeps instruction.md, tests/ and solution/; what did not map is listed in its
denv-import.json and printed. The check deploys the project, runs solution/solve.sh on one fork
and verifies it (reward 1 expected), and verifies a second fork without it (reward 0 expected).
Exits 1 when an oracle does not score 1.`,
    );
  const karotte = imp
    .command("karotte")
    .description(
      "A built Karotte environment image → a denv project per task, whose agent service runs `karotte run --no-containerized` and whose verifier reads the transcript's score",
    )
    .argument("<image>", "the built Karotte environment image (as the target host's engine names it)")
    .argument("[out]", "where the projects are written, one directory each", ".")
    .requiredOption("--tasks <ids>", "the task ids, comma-separated")
    .option("--model <model>", "the run config's model (the student)", "anthropic/claude-fable-5")
    .option("--egress <egress>", "allow (the student reaches its model's API) or deny", "allow")
    .option("--no-check", "only write the projects (no deploy, no episode)")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      `
Examples:
  denv import karotte registry.example.com/my-env:1.0 ./projects --tasks count-lines,say-hello
  denv exec karotte-count-lines/alpha -- denv-episode      # one episode, then: denv verify …

The check deploys each project, runs one episode on a fork and verifies it (the reward is the
transcript's score).`,
    );
  karotte.action(
    run(
      karotte,
      async (
        client,
        json,
        image: string,
        outArg: string,
        o: { tasks: string; model: string; egress: string; check: boolean },
      ) => {
        if (o.egress !== "allow" && o.egress !== "deny") throw new UsageError("--egress is allow or deny");
        const tasks = o.tasks
          .split(",")
          .map((t) => t.trim())
          .filter(Boolean);
        if (tasks.length === 0) throw new UsageError("--tasks names at least one task id");
        const results = [];
        for (const task of tasks) {
          const t = importKarotteTask(image, task, {
            out: resolve(outArg),
            model: o.model,
            egress: o.egress,
          });
          if (!json) process.stdout.write(`imported ${image} task ${task} → ${t.dir} (project ${t.name})\n`);
          const check = o.check ? await checkKarotte(client(), t) : undefined;
          if (check && !json)
            process.stdout.write(
              check.deploy !== "succeeded"
                ? `  deploy ${check.deploy}: ${check.reason}\n`
                : `  episode exited ${check.episode_exit_code}; reward ${check.reward}${check.reason ? ` (${check.reason})` : ""}\n`,
            );
          results.push({ ...t, ...(check ? { check } : {}) });
        }
        if (json) printJson({ projects: results });
        return results.some((r) => r.check && r.check.deploy !== "succeeded") ? 1 : 0;
      },
    ),
  );
  const harborEnv = imp
    .command("harbor-environment")
    .description(
      "One Harbor environment directory (a task's environment/, or a separate verifier's tests/) → a denv project that runs it as Harbor's docker environment does; what the Harbor adapter deploys",
    )
    .argument("<dir>", "the environment directory")
    .argument("<out>", "where the project is written")
    .requiredOption("--name <project>", "the project's name")
    .option(
      "--config <json>",
      "the task's [environment] table as JSON (docker_image, workdir, cpus, memory_mb, env, …)",
      "{}",
    )
    .option("--egress <egress>", "allow or deny", "allow")
    .option("--deploy <env>", "then create or refresh the project and deploy it to this environment")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      `
Example:
  denv import harbor-environment tasks/hello/environment ~/.cache/denv/harbor/hello --name harbor-hello \\
      --config '{"workdir": "/app"}' --deploy base --json

main's image follows Harbor's precedence (environment/Dockerfile is built, else the compose file's
main image, else docker_image); main runs \`sleep infinity\` as the image's user.`,
    );
  harborEnv.action(
    run(
      harborEnv,
      async (
        client,
        json,
        dirArg: string,
        outArg: string,
        o: { name: string; config: string; egress: string; deploy?: string },
      ) => {
        if (o.egress !== "allow" && o.egress !== "deny") throw new UsageError("--egress is allow or deny");
        let raw: unknown;
        try {
          raw = JSON.parse(o.config);
        } catch {
          throw new UsageError("--config is not JSON");
        }
        const cfg = environmentSection.safeParse(raw);
        if (!cfg.success) {
          const i = cfg.error.issues[0];
          throw refused(`--config: ${i?.path.join(".") || "(value)"}: ${i?.message}`);
        }
        const p = await importHarborEnvironment(readEnvironmentDir(resolve(dirArg)), cfg.data, {
          name: o.name,
          out: resolve(outArg),
          egress: o.egress,
        });
        if (!json) {
          process.stdout.write(`wrote ${p.dir} (project ${p.name})\n`);
          for (const u of p.unmapped) process.stdout.write(`  not mapped: ${u}\n`);
        }
        if (!o.deploy) {
          if (json) printJson(p);
          return 0;
        }
        const d = await deployDir(client(), p.name, p.dir, o.deploy, p.kind);
        if (json) printJson({ ...p, deployment: d });
        else process.stdout.write(`deploy ${d.status}${d.reason ? `: ${d.reason}` : ""}\n`);
        return d.status === "succeeded" ? 0 : 1;
      },
    ),
  );
  harbor.action(
    run(harbor, async (client, json, source: string, outArg: string, o: { check: boolean }) => {
      const cloned = isGitUrl(source) ? await cloneShallow(source) : null;
      try {
        const tasks = findTasks(resolve(cloned ?? source));
        const out = resolve(outArg);
        const results: (ImportedTask & { check?: CheckResult })[] = [];
        let failed = false;
        for (const dir of tasks) {
          const t = await importHarborTask(readHarborTask(dir), out);
          if (!json) {
            process.stdout.write(`imported ${dir} → ${t.dir} (project ${t.name})\n`);
            for (const u of t.unmapped) process.stdout.write(`  not mapped: ${u}\n`);
          }
          const r: ImportedTask & { check?: CheckResult } = { ...t };
          if (o.check) {
            r.check = await checkImported(client(), t, json);
            const ok =
              r.check.deploy === "succeeded" &&
              (t.oracle === null || r.check.reward_with_oracle === 1) &&
              r.check.reward_without_oracle !== 1;
            if (!ok) failed = true;
            if (!json)
              process.stdout.write(
                r.check.deploy !== "succeeded"
                  ? `  deploy ${r.check.deploy}: ${r.check.reason}\n`
                  : `  version ${r.check.version_id}: reward ${r.check.reward_with_oracle ?? "-"} with the oracle, ${r.check.reward_without_oracle} without${ok ? "" : "  ✗"}\n`,
              );
          }
          results.push(r);
        }
        if (json) printJson({ projects: results });
        return failed ? 1 : 0;
      } finally {
        if (cloned) rmSync(join(cloned, ".."), { recursive: true, force: true });
      }
    }),
  );
}
