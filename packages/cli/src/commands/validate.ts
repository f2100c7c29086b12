import { existsSync, statSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { COMPOSE_FILE_NAMES, type SpecIssue } from "@denv/spec";
import type { Command } from "commander";
import { printJson, reportError, UsageError } from "../output.ts";
import { readProjectFile } from "../project-files.ts";

export function findComposeFile(path: string): string {
  const abs = resolve(path);
  if (!existsSync(abs)) throw new UsageError(`${path} does not exist`);
  if (statSync(abs).isFile()) return abs;
  for (const name of COMPOSE_FILE_NAMES) {
    const candidate = join(abs, name);
    if (existsSync(candidate)) return candidate;
  }
  throw new UsageError(
    `${path} holds no ${COMPOSE_FILE_NAMES.join(", ")}; run \`denv init rl-environment ${path}\` to write one`,
  );
}

/** Compose's project name rule: the directory's name, lower-cased, letters, digits, - and _. */
export function projectNameOf(dir: string): string {
  return (
    basename(dir)
      .toLowerCase()
      .replace(/[^a-z0-9_-]/g, "") || "default"
  );
}

function formatIssue(i: SpecIssue): string {
  const where = i.line > 0 ? `${i.line}:${i.column}` : "-";
  return `  ${i.severity === "error" ? "✗" : "!"} ${i.path || "(file)"} (line ${where}) [${i.code}] ${i.message}`;
}

export function registerValidate(program: Command): void {
  program
    .command("validate")
    .description(
      "Check a compose file against denv's rules and print its resolved form (images are not pinned)",
    )
    .argument("[path]", "a compose file, or a directory holding compose.yaml / docker-compose.yaml", ".")
    .option("--json", "print {ok, spec} or {ok, errors} as JSON")
    .option("--no-build", "the target cannot build images: refuse build: without image:")
    .addHelpText(
      "after",
      `
Examples:
  denv validate                          # docker-compose.yaml in this directory
  denv validate examples/ops-world --json
  denv validate compose.yaml --no-build

Exits 0 when the file is accepted, 1 with every refusal (code, field path, line:column).`,
    )
    .action(async (path: string, opts: { json?: boolean; build: boolean }) => {
      const json = opts.json === true;
      try {
        // Loaded on use: the spec library (zod, yaml) is not needed by most commands.
        const { validateCompose, withoutSecretContents } = await import("@denv/spec");
        const file = findComposeFile(path);
        const dir = dirname(file);
        const result = validateCompose(readProjectFile(dir, basename(file)) ?? "", {
          env: process.env,
          dotenv: readProjectFile(dir, ".env"),
          noBuild: !opts.build,
          projectName: projectNameOf(dir),
          readFile: (rel) => readProjectFile(dir, rel),
        });
        if (json) {
          printJson(
            result.ok
              ? { ok: true, spec: withoutSecretContents(result.spec), warnings: result.warnings }
              : { ok: false, errors: result.errors.map(toWire), warnings: result.warnings.map(toWire) },
          );
        } else if (result.ok) {
          const s = result.spec;
          process.stdout.write(
            `${file}: valid (${s.kind}, ${Object.keys(s.services).length} services, ${Object.keys(s.datasets).length} datasets, egress ${s.egress})\n`,
          );
          for (const [name, svc] of Object.entries(s.services)) {
            const memGiB = svc.caps.memory_bytes / 1024 ** 3;
            process.stdout.write(
              `  ${name}: ${svc.image} user=${svc.user ?? "(image)"} memory=${memGiB}GiB pids=${svc.caps.pids} cpus=${svc.caps.cpus}${
                svc.gpus
                  ? ` gpus=${svc.gpus.device_ids ? svc.gpus.device_ids.join(",") : svc.gpus.count}(${svc.gpus.driver}:${svc.gpus.capabilities.join("+")})`
                  : ""
              }\n`,
            );
          }
          for (const w of result.warnings) process.stdout.write(`${formatIssue(w)}\n`);
          process.stdout.write(`  hash ${s.hash}\n`);
        } else {
          process.stderr.write(
            `${file}: refused (${result.errors.length} error${result.errors.length === 1 ? "" : "s"})\n`,
          );
          for (const i of [...result.errors, ...result.warnings]) process.stderr.write(`${formatIssue(i)}\n`);
        }
        process.exitCode = result.ok ? 0 : 1;
      } catch (err) {
        process.exitCode = reportError(err, json);
      }
    });
}

function toWire(i: SpecIssue) {
  return {
    code: i.code,
    message: i.message,
    path: i.path,
    line: i.line,
    column: i.column,
    severity: i.severity,
  };
}
