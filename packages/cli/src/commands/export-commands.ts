/**
 * `denv export --harbor|--openenv PROJECT@VERSION OUT`: a version written in another format, from
 * its resolved spec (GET /v1/versions/{ref}/spec): every image by its pinned digest.
 */
import { lstatSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import type { ResolvedSpec } from "@denv/protocol";
import { DenvError } from "@denv/protocol";
import type { Command } from "commander";
import { exportHarbor } from "../harbor/harbor-export.ts";
import { exportOpenEnv } from "../harbor/openenv-export.ts";
import { printJson, UsageError } from "../output.ts";
import { readProjectFile } from "../project-files.ts";
import { run } from "./command-runner.ts";

/** At most this many files are carried from a project's solution/. */
const MAX_SOLUTION_FILES = 200;

/**
 * A local project's oracle, solution/ with its solve.sh, as relative path → text: regular files and
 * directories only (a link is refused, naming it), bounded in count and size. Null when it has none.
 */
function readSolution(projectDir: string): Record<string, string> | null {
  if (readProjectFile(projectDir, "solution/solve.sh") === undefined) return null;
  const out: Record<string, string> = {};
  const walk = (rel: string) => {
    for (const name of readdirSync(join(projectDir, rel)).sort()) {
      const r = `${rel}/${name}`;
      const st = lstatSync(join(projectDir, r));
      if (st.isDirectory()) walk(r);
      else {
        // readProjectFile refuses links and anything that is not a regular file, saying which.
        out[r.slice("solution/".length)] = readProjectFile(projectDir, r) as string;
        if (Object.keys(out).length > MAX_SOLUTION_FILES)
          throw new DenvError(
            "spec_invalid",
            `${join(projectDir, "solution")} holds over ${MAX_SOLUTION_FILES} files`,
          );
      }
    }
  };
  walk("solution");
  return out;
}

export function registerExportCommands(program: Command): void {
  const exp = program
    .command("export")
    .description(
      "Write a version in another format: a Harbor task (--harbor), an OpenEnv environment (--openenv)",
    )
    .argument("<version>", "PROJECT@ver_…, ver_…, or PROJECT/ENV (its current version)")
    .argument("[out]", "the directory written into", ".")
    .option("--harbor", "a Harbor task directory per task: task.toml, instruction.md, environment/, tests/")
    .option(
      "--openenv",
      "an OpenEnv environment: its image's build context, whose reset forks the version through denv",
    )
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      `
Examples:
  denv export --harbor ops-world@ver_3f2a9c1d0b7e ./out
  denv export --openenv ops-world/alpha ./out && docker build -t ops-world-openenv ./out/ops-world-openenv

What a format cannot carry is listed in the written denv-export.json and printed.`,
    );
  exp.action(
    run(
      exp,
      async (client, json, ref: string, outArg: string, o: { harbor?: boolean; openenv?: boolean }) => {
        if (!o.harbor === !o.openenv) throw new UsageError("give one of --harbor or --openenv");
        const c = client();
        const r = await c.versions.spec(ref);
        // A hosted provider's snapshot has no compose file behind it, nor images to pin.
        const hosted = (r.spec as { hosted?: { target?: string } }).hosted;
        if (hosted)
          throw new UsageError(
            `${ref} is a snapshot at target ${hosted.target ?? "?"}, a hosted provider: export needs a version made on a denvd host`,
          );
        const spec = r.spec as unknown as ResolvedSpec;
        const project = await c.projects.get(r.project);
        // The project's own files, read as regular files only (never through a link).
        const local = project.source_type === "local" ? project.source : null;
        const instruction = local ? (readProjectFile(local, "instruction.md") ?? null) : null;
        const out = resolve(outArg);
        const written = o.harbor
          ? exportHarbor(spec, {
              project: r.project,
              versionId: r.version_id,
              instruction,
              out,
              solution: local ? readSolution(local) : null,
            })
          : exportOpenEnv(spec, { project: r.project, versionId: r.version_id, instruction, out });
        if (json) printJson({ ...written, version_id: r.version_id, project: r.project });
        else {
          process.stdout.write(`wrote ${written.dir} (${r.project}@${r.version_id})\n`);
          for (const n of written.notExported) process.stdout.write(`  not exported: ${n}\n`);
        }
        return 0;
      },
    ),
  );
}
