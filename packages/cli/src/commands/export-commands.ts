/**
 * `denv export --harbor|--openenv PROJECT@VERSION OUT`: a version written in another format, from
 * its resolved spec (GET /v1/versions/{ref}/spec): every image by its pinned digest.
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { ResolvedSpec } from "@denv/protocol";
import type { Command } from "commander";
import { exportHarbor } from "../harbor/harbor-export.ts";
import { exportOpenEnv } from "../harbor/openenv-export.ts";
import { printJson, UsageError } from "../output.ts";
import { run } from "./command-runner.ts";

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
        const r = await c.call("getV1VersionsByIdSpec", { params: { id: ref } });
        const spec = r.spec as unknown as ResolvedSpec;
        const project = await c.call("getV1ProjectsById", { params: { id: r.project } });
        const instructionPath =
          project.source_type === "local" ? join(project.source, "instruction.md") : null;
        const instruction =
          instructionPath && existsSync(instructionPath) ? readFileSync(instructionPath, "utf8") : null;
        const out = resolve(outArg);
        const written = o.harbor
          ? exportHarbor(spec, { project: r.project, versionId: r.version_id, instruction, out })
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
