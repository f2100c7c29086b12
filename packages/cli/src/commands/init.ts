import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { COMPOSE_FILE_NAMES } from "@denv/spec";
import type { Command } from "commander";
import { printJson, reportError, UsageError } from "../output.ts";

const TEMPLATES: Record<string, string> = {
  "rl-environment": "rl-environment.yaml",
};

export function registerInit(program: Command): void {
  program
    .command("init")
    .description("Write a starter docker-compose.yaml with an x-denv block")
    .argument("<kind>", `the project kind (${Object.keys(TEMPLATES).join(", ")})`)
    .argument("[dir]", "where to write it", ".")
    .option("--json", "print {ok, path} as JSON")
    .addHelpText(
      "after",
      `
Examples:
  denv init rl-environment               # the seed's ops-world file, here
  denv init rl-environment ./my-env

Refuses to overwrite an existing compose file.`,
    )
    .action((kind: string, dir: string, opts: { json?: boolean }) => {
      const json = opts.json === true;
      try {
        const template = TEMPLATES[kind];
        if (!template) {
          throw new UsageError(
            `no template for kind "${kind}"; available: ${Object.keys(TEMPLATES).join(", ")}`,
          );
        }
        const target = resolve(dir);
        const existing = COMPOSE_FILE_NAMES.map((n) => join(target, n)).find((p) => existsSync(p));
        if (existing) {
          if (json)
            printJson({ ok: false, error: { code: "conflict", message: `${existing} already exists` } });
          else
            process.stderr.write(
              `error: ${existing} already exists; denv init never overwrites a compose file\n`,
            );
          process.exitCode = 1;
          return;
        }
        mkdirSync(target, { recursive: true });
        const path = join(target, "docker-compose.yaml");
        writeFileSync(path, readFileSync(join(import.meta.dirname, "..", "templates", template)), {
          flag: "wx",
        });
        if (json) printJson({ ok: true, path });
        else process.stdout.write(`wrote ${path}\nnext: edit the images, then \`denv validate ${dir}\`\n`);
      } catch (err) {
        process.exitCode = reportError(err, json);
      }
    });
}
