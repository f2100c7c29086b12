import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { COMPOSE_FILE_NAMES } from "@denv/spec";
import type { Command } from "commander";
import { printJson, reportError, UsageError } from "../output.ts";

/**
 * Each kind's starter: a directory of files written as they are. The HTTP starters share one
 * server (templates/shared/server.pl), copied into the build context that names it.
 */
const TEMPLATES_DIR = join(import.meta.dirname, "..", "templates");
const TEMPLATES: Record<string, { about: string; shared?: Record<string, string>; before?: string }> = {
  "rl-environment": {
    about: "the seed's ops-world file: a database, a queue and the agent's box",
    // The seed's file names a grader and a seed script of the reader's own: it does not deploy as
    // written, and saying "deploy it" would send the reader into a failed prepare.
    before:
      "it names things of yours that are not here yet: x-denv.verifier.image (ghcr.io/you/verifier:1.2 is a placeholder), the seed file its warm: command reads (/seed/orders.sql, with a psql in opsbox's image to run it), and images your host's engine can pull (or build: them from ./ directories)",
  },
  agent: { about: "a box where the agent gets a shell as a non-root user, with a kept workspace" },
  service: {
    about: "an HTTP service built from ./web, healthy before its snapshot",
    shared: { "web/server.pl": "server.pl" },
  },
  website: {
    about: "static pages from ./site/public, served and checked healthy",
    shared: { "site/server.pl": "server.pl" },
  },
  inference: {
    about: "an OpenAI-style completions server (a model that echoes; replace it)",
    shared: { "model/server.pl": "server.pl" },
  },
};

/** Every file of a kind's starter: its path in the project → its bytes. */
export function starterFiles(kind: string): Map<string, Buffer> {
  const t = TEMPLATES[kind];
  if (!t)
    throw new UsageError(`no template for kind "${kind}"; available: ${Object.keys(TEMPLATES).join(", ")}`);
  const files = new Map<string, Buffer>();
  const root = join(TEMPLATES_DIR, kind);
  const walk = (dir: string) => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else files.set(relative(root, p), readFileSync(p));
    }
  };
  walk(root);
  for (const [to, from] of Object.entries(t.shared ?? {}))
    files.set(to, readFileSync(join(TEMPLATES_DIR, "shared", from)));
  return files;
}

export function registerInit(program: Command): void {
  program
    .command("init")
    .description("Write a starter docker-compose.yaml with an x-denv block")
    .argument(
      "<kind>",
      `the project kind: ${Object.entries(TEMPLATES)
        .map(([k, t]) => `${k} (${t.about})`)
        .join("; ")}`,
    )
    .argument("[dir]", "where to write it", ".")
    .option("--json", "print {ok, path} as JSON")
    .addHelpText(
      "after",
      `
Examples:
  denv init rl-environment               # the seed's ops-world file, here
  denv init service ./my-service         # a compose file, web/Dockerfile and web/server.pl

Refuses to overwrite an existing compose file, or any file it would write.`,
    )
    .action((kind: string, dir: string, opts: { json?: boolean }) => {
      const json = opts.json === true;
      try {
        const files = starterFiles(kind);
        const target = resolve(dir);
        const existing = [
          ...COMPOSE_FILE_NAMES.map((n) => join(target, n)),
          ...[...files.keys()].map((f) => join(target, f)),
        ].find((p) => existsSync(p));
        if (existing) {
          if (json)
            printJson({ ok: false, error: { code: "conflict", message: `${existing} already exists` } });
          else process.stderr.write(`error: ${existing} already exists; denv init never overwrites a file\n`);
          process.exitCode = 1;
          return;
        }
        const written: string[] = [];
        for (const [rel, bytes] of files) {
          const path = join(target, rel);
          mkdirSync(dirname(path), { recursive: true });
          writeFileSync(path, bytes, { flag: "wx" });
          written.push(path);
        }
        const path = join(target, "docker-compose.yaml");
        const before = TEMPLATES[kind]?.before;
        if (json)
          printJson({ ok: true, path, files: written, ...(before ? { before_deploying: before } : {}) });
        else
          process.stdout.write(
            `wrote ${written.join(", ")}\n${before ? `before you deploy it: ${before}\n` : ""}next: \`denv validate ${dir}\`, then \`denv project create --kind ${kind} --source ${dir} NAME\` and \`denv deploy --project NAME --wait\`\n`,
          );
      } catch (err) {
        process.exitCode = reportError(err, json);
      }
    });
}
