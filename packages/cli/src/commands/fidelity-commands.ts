/**
 * Episode fidelity: `denv replay` (N forks run one scripted episode; identical or the first
 * divergence), `denv promote` (a version through the gates to another environment) and
 * `denv datasheet` (what a version is and every gate it passed, as Markdown or JSON).
 */
import { readFileSync } from "node:fs";
import type { Operations } from "@denv/sdk";
import type { Command } from "commander";
import { parse as parseYaml } from "yaml";
import { printJson, progressReporter, UsageError } from "../output.ts";

/** How often `denv replay` looks at its replay while it runs. */
const REPLAY_POLL_MS = 1000;

import { follow, run } from "./command-runner.ts";

type Step = NonNullable<Operations["postV1VersionsByIdReplays"]["body"]["steps"]>[number];

/**
 * An episode file: YAML or JSON, a list of steps (or {steps: [...]}), each a command in a service:
 * `run: "shell text"` (run with sh -c) or `command: [argv…]`, with optional service, user and
 * timeout_ms; or `verifier: true`, the version's verifier graded on the fork. Every problem is
 * named with the step's place in the file.
 */
export function readEpisode(path: string): Step[] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new UsageError(`--script ${path}: ${(err as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text, { maxAliasCount: 0 });
  } catch (err) {
    throw new UsageError(`--script ${path}: not YAML or JSON: ${(err as Error).message.split("\n")[0]}`);
  }
  const list = Array.isArray(doc) ? doc : (doc as { steps?: unknown } | null)?.steps;
  if (!Array.isArray(list) || list.length === 0)
    throw new UsageError(`--script ${path}: expected a list of steps (or steps: [...])`);
  if (list.length > 256) throw new UsageError(`--script ${path}: ${list.length} steps; at most 256`);
  return list.map((raw, i): Step => {
    const where = `--script ${path}: step ${i + 1}`;
    if (typeof raw !== "object" || raw === null || Array.isArray(raw))
      throw new UsageError(`${where}: expected a mapping with run: or command:`);
    const s = raw as Record<string, unknown>;
    for (const k of Object.keys(s))
      if (!["run", "command", "verifier", "service", "user", "timeout_ms"].includes(k))
        throw new UsageError(
          `${where}: unknown key ${k} (run, command, verifier, service, user, timeout_ms)`,
        );
    if (s.verifier !== undefined) {
      if (s.verifier !== true || Object.keys(s).length !== 1)
        throw new UsageError(`${where}: verifier: true stands alone`);
      return { verifier: true };
    }
    if ((s.run === undefined) === (s.command === undefined))
      throw new UsageError(`${where}: give one of run: (shell text), command: (a list) or verifier: true`);
    if (s.run !== undefined && (typeof s.run !== "string" || s.run.length === 0))
      throw new UsageError(`${where}: run: must be non-empty text`);
    if (
      s.command !== undefined &&
      (!Array.isArray(s.command) || s.command.length === 0 || !s.command.every((a) => typeof a === "string"))
    )
      throw new UsageError(`${where}: command: must be a non-empty list of strings`);
    if (s.service !== undefined && typeof s.service !== "string")
      throw new UsageError(`${where}: service: must be a name`);
    if (s.user !== undefined && typeof s.user !== "string")
      throw new UsageError(`${where}: user: must be text`);
    if (s.timeout_ms !== undefined && (!Number.isInteger(s.timeout_ms) || (s.timeout_ms as number) < 1))
      throw new UsageError(`${where}: timeout_ms: must be a whole number of milliseconds`);
    return {
      command: (s.run as string | undefined) ?? (s.command as string[]),
      ...(s.service ? { service: s.service as string } : {}),
      ...(s.user ? { user: s.user as string } : {}),
      ...(s.timeout_ms ? { timeout_ms: s.timeout_ms as number } : {}),
    };
  });
}

/** 30s, 2m, 1500ms, or a bare number of seconds. */
export function durationMs(text: string, flag: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new UsageError(`${flag} ${text}: expected a duration such as 30s, 2m or 1500ms`);
  const n = Number(m[1]);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(m[2] ?? "s") as "ms" | "s" | "m" | "h"];
  return Math.round(n * unit);
}

function wholeNumber(text: string, flag: string, max: number): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > max)
    throw new UsageError(`${flag} ${text}: a whole number from 1 to ${max}`);
  return n;
}

type Replay = Operations["postV1VersionsByIdReplays"]["response"];

function printReplay(r: Replay): void {
  const rep = (r.report ?? {}) as {
    identical?: boolean;
    compared?: number;
    failed?: number;
    first_divergence?: {
      fork: number;
      step: number | null;
      volume: string | null;
      what: string;
      diff: string[];
      sources: string[];
    } | null;
    sources?: string[];
    divergent_forks?: number[];
    digests?: string[];
    ms?: number;
    error?: string;
  };
  process.stdout.write(
    `replay ${r.id} of ${r.version_id}: ${r.request.forks} forks, ${r.request.steps.length} steps\n`,
  );
  if (rep.error) {
    process.stdout.write(`failed: ${rep.error}\n`);
    return;
  }
  if (rep.identical) {
    process.stdout.write(
      `identical: every fork's steps and volumes match (digest ${rep.digests?.[0]?.slice(0, 16)})\n`,
    );
  } else {
    process.stdout.write(
      `${r.status}: ${rep.divergent_forks?.length ?? 0} of ${rep.compared ?? 0} forks differ from fork 1${rep.failed ? `, ${rep.failed} could not run` : ""}\n`,
    );
    const d = rep.first_divergence;
    if (d) {
      const where =
        d.step !== null ? `step ${d.step + 1} (${d.what})` : d.volume ? `volume ${d.volume}` : d.what;
      process.stdout.write(
        `first divergence: fork ${d.fork}, ${where}${d.sources.length ? `; sources: ${d.sources.join(", ")}` : ""}\n`,
      );
      for (const line of d.diff) process.stdout.write(`  ${line}\n`);
    }
    if (rep.sources?.length) process.stdout.write(`sources named: ${rep.sources.join(", ")}\n`);
  }
  if (rep.ms !== undefined) process.stdout.write(`took ${(rep.ms / 1000).toFixed(1)} s\n`);
}

export function registerFidelityCommands(program: Command): void {
  const replay = program
    .command("replay")
    .description(
      "Run one scripted episode in N forks of a version and compare them: identical, or the first divergence",
    )
    .argument("<version>", "ver_…, PROJECT@ver_…, or an environment (PROJECT/ENV: the version it runs)")
    .option("--forks <n>", "forks that run the episode", "20")
    .option("--parallel <n>", "forks running at once", "4")
    .option(
      "--script <file>",
      "the episode (YAML or JSON steps); default: the warm commands, then the collected paths read",
    )
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      '\nAn episode file:\n  - service: opsbox\n    run: psql -c "insert into t values (now())"\n  - service: opsbox\n    command: [sleep, "1"]\n\nExample:\n  denv replay ops-world/alpha --forks 20 --script episode.yaml\n\nExits 1 when the forks diverge.',
    );
  replay.action(
    run(
      replay,
      async (client, json, ref: string, o: { forks: string; parallel: string; script?: string }) => {
        const body = {
          forks: wholeNumber(o.forks, "--forks", 100),
          parallel: wholeNumber(o.parallel, "--parallel", 16),
          ...(o.script ? { steps: readEpisode(o.script) } : {}),
        };
        if (!json) process.stdout.write(`replaying ${ref} in ${body.forks} forks…\n`);
        // Begun at once, then followed: how many forks have run shows while the rest run.
        let r = await client().versions.replay(ref, body);
        const progress = json ? null : progressReporter("forks done");
        while (r.status === "running") {
          progress?.show(r.forks_done, body.forks);
          await new Promise((res) => setTimeout(res, REPLAY_POLL_MS));
          r = await client().replays.get(r.id);
        }
        progress?.show(r.forks_done, body.forks);
        progress?.end();
        if (json) printJson(r);
        else printReplay(r);
        return r.status === "identical" ? 0 : 1;
      },
    ),
  );

  const promote = program
    .command("promote")
    .description(
      "Point an environment at a version only through the gates: fresh fork, dataset consistency, N identical replays, invariants, soak",
    )
    .argument("<project>")
    .argument("<from>", "the environment whose current version is promoted")
    .argument("<to>", "the environment that points at the version once every gate passed")
    .option("--version <version>", "promote this version (ver_… or PROJECT@ver_…) instead of FROM's")
    .option("--replays <n>", "forks the replays gate runs", "5")
    .option("--soak <duration>", "how long the soak health-checks the candidate", "10s")
    .option("--script <file>", "the replays' episode (as denv replay --script)")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv promote ops-world alpha staging\n\nExits 1 when a gate fails (the deployment ends rolled_back, the target untouched).",
    );
  promote.action(
    run(
      promote,
      async (
        client,
        json,
        project: string,
        from: string,
        to: string,
        o: { version?: string; replays: string; soak: string; script?: string },
      ) => {
        const c = client();
        const d = await c.projects.promote(project, {
          from,
          to,
          ...(o.version ? { version: o.version } : {}),
          replays: wholeNumber(o.replays, "--replays", 100),
          soak_ms: durationMs(o.soak, "--soak"),
          ...(o.script ? { steps: readEpisode(o.script) } : {}),
        });
        if (!json) process.stdout.write(`promoting ${project}/${from} to ${to} (deployment ${d.id})\n`);
        const final = await follow(c, d.id, json);
        if (json) printJson(final);
        else {
          process.stdout.write(`${final.status}${final.reason ? `: ${final.reason}` : ""}\n`);
          if (final.version_id)
            process.stdout.write(`data sheet: denv datasheet ${project}@${final.version_id}\n`);
        }
        return final.status === "succeeded" ? 0 : 1;
      },
    ),
  );

  const sheet = program
    .command("datasheet")
    .description("A version's data sheet: what it is, its clock's reach, its replays, every promote's gates")
    .argument("<env-or-version>", "an environment (its current version), ver_…, or PROJECT@ver_…")
    .option("--json", "print JSON");
  sheet.action(
    run(sheet, async (client, json, ref: string) => {
      const d = await client().versions.datasheet(ref);
      if (json) printJson(d);
      else {
        const { datasheetMarkdown } = await import("@denv/server");
        process.stdout.write(datasheetMarkdown(d as never));
      }
      return 0;
    }),
  );
}
