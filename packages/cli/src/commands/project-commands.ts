/** Projects and deploys: create, list, and deploy (a local project's source is uploaded first). */
import { createReadStream, existsSync } from "node:fs";
import { rm } from "node:fs/promises";
import { basename, dirname, join, posix, resolve } from "node:path";
import type { ResolvedSpec } from "@denv/protocol";
import type { DenvClient } from "@denv/sdk";
import { validateCompose } from "@denv/spec";
import type { Command } from "commander";
import { packContext } from "../build-context.ts";
import { printJson, printTable, UsageError } from "../output.ts";
import { readProjectFile } from "../project-files.ts";
import { packProjectMount } from "../project-mounts.ts";
import { follow, run } from "./command-runner.ts";
import { findComposeFile } from "./validate.ts";

export function registerProjectCommands(program: Command): void {
  const project = program.command("project").description("Projects: a compose file with a kind and a source");
  const create = project
    .command("create")
    .description("Create a project (and upload a local source)")
    .argument("<name>", "project name")
    .requiredOption("--kind <kind>", "rl-environment, agent, service, website or inference")
    .requiredOption(
      "--source <source>",
      "a local directory, any git URL, or github:OWNER/REPO[@BRANCH][#PATH] (read through the team's GitHub App)",
    )
    .option(
      "--branches <patterns>",
      "github: sources: branches (comma-separated; * within a segment, ** across) whose pushes deploy an environment named after them",
    )
    .option("--pin <target>", "always place on this host, cloud or target")
    .option("--target <name>", "the same as --pin")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExamples:\n  denv project create --kind rl-environment --source ./examples/ops-world ops-world\n  denv project create --kind rl-environment --source github:you/ops-world ops-world",
    );
  create.action(
    run(
      create,
      async (
        client,
        json,
        name: string,
        o: { kind: string; source: string; pin?: string; target?: string; branches?: string },
      ) => {
        const pin = o.pin ?? o.target;
        const isLocal = !/^github:|^(https?|git|ssh|file):\/\/|^[\w.-]+@[\w.-]+:/.test(o.source);
        const source = isLocal ? resolve(o.source) : o.source;
        // Refuse a directory with no compose file, or a linked .env, before creating anything.
        if (isLocal) readLocalSource(source);
        let p = await client().projects.create({
          name,
          kind: o.kind as "rl-environment",
          source,
          ...(pin ? { pinned_target: pin } : {}),
          ...(o.branches ? { branches: splitPatterns(o.branches) } : {}),
        });
        if (isLocal) p = await uploadSource(client(), name, source);
        if (json) printJson(p);
        else
          process.stdout.write(
            `created project ${p.name} (${p.kind}, ${p.source_type} source ${p.source})\n`,
          );
        return 0;
      },
    ),
  );
  const set = project
    .command("set")
    .description("Change a project's settings")
    .argument("<project>", "project name or id")
    .option(
      "--branches <patterns>",
      "github: sources: branches (comma-separated) whose pushes deploy environments named after them",
    )
    .option("--no-branches", "follow the compose file's x-denv.branches again")
    .option("--json", "print JSON");
  set.action(
    run(set, async (client, json, ref: string) => {
      const o = set.opts() as { branches?: string | false };
      if (o.branches === undefined)
        throw new UsageError("nothing to set: give --branches PATTERNS or --no-branches");
      const p = await client().projects.setBranches(ref, {
        branches: o.branches === false ? null : splitPatterns(o.branches),
      });
      if (json) printJson(p);
      else
        process.stdout.write(
          `${p.name}: ${p.branches ? `branches ${p.branches.join(", ")} deploy` : "branches follow x-denv.branches"}
`,
        );
      return 0;
    }),
  );
  const prev = project
    .command("previews")
    .description(
      "A github: project's pull-request previews: how many run at once, what a fork's gets, and forks' heads waiting for approval; change those, or approve one",
    )
    .argument("<project>", "project name or id")
    .option("--budget <n>", "previews kept at once (0 to 64; default 4)")
    .option(
      "--forks <mode>",
      "a fork's pull request: approve (waits for a member: the default), deploy, or off",
    )
    .option("--approve <pr>", "deploy the waiting head of this pull request from a fork")
    .option("--json", "print JSON");
  prev.action(
    run(prev, async (client, json, ref: string) => {
      const o = prev.opts() as { budget?: string; forks?: string; approve?: string };
      if (o.approve !== undefined) {
        if (!/^[1-9][0-9]{0,9}$/.test(o.approve))
          throw new UsageError("--approve takes a pull request's number");
        const d = await client().projects.approvePreview(ref, o.approve);
        if (json) printJson(d);
        else
          process.stdout.write(
            `approved #${o.approve} at ${d.commit.slice(0, 12)}: deploying pr-${o.approve} (${d.deployment_id})\n`,
          );
        return 0;
      }
      const budget = o.budget === undefined ? undefined : Number(o.budget);
      if (budget !== undefined && (!Number.isInteger(budget) || budget < 0 || budget > 64))
        throw new UsageError("--budget takes a whole number from 0 to 64");
      if (o.forks !== undefined && !["approve", "deploy", "off"].includes(o.forks))
        throw new UsageError("--forks takes approve, deploy or off");
      const r =
        budget !== undefined || o.forks !== undefined
          ? await client().projects.setPreviews(ref, {
              ...(budget !== undefined ? { budget } : {}),
              ...(o.forks !== undefined ? { forks: o.forks as "approve" | "deploy" | "off" } : {}),
            })
          : await client().projects.previews(ref);
      if (json) printJson(r);
      else {
        process.stdout.write(
          `previews: at most ${r.budget} at once; forks' pull requests: ${r.forks}; running: ${r.running.join(", ") || "none"}\n`,
        );
        for (const w of r.waiting)
          process.stdout.write(
            `waiting: #${w.pull_request} from ${w.repository} at ${w.commit.slice(0, 12)}${w.pushed_by ? ` by ${w.pushed_by}` : ""}\n`,
          );
      }
      return 0;
    }),
  );
  const pgh = project
    .command("environments")
    .description("A github: project's environments its pushes and pull requests made, with their commits")
    .argument("<project>", "project name or id")
    .option("--json", "print JSON");
  pgh.action(
    run(pgh, async (client, json, ref: string) => {
      const r = await client().projects.github(ref);
      if (json) printJson(r);
      else {
        printTable(
          ["ENVIRONMENT", "TRIGGER", "REF", "COMMIT", "STATUS", "DEPLOYMENT"],
          r.environments.map((e) => [
            e.environment,
            `${e.trigger}${e.pull_request ? ` #${e.pull_request}` : ""}`,
            e.ref,
            e.commit.slice(0, 12),
            e.status,
            `${e.deployment_id} (${e.deployment_status})`,
          ]),
        );
      }
      return 0;
    }),
  );
  const plist = project.command("list").description("List projects").option("--json", "print JSON");
  plist.action(
    run(plist, async (client, json) => {
      const r = await client().projects.list();
      if (json) printJson(r);
      else
        printTable(
          ["NAME", "KIND", "SOURCE TYPE", "SOURCE"],
          r.projects.map((p) => [p.name, p.kind, p.source_type, p.source]),
        );
      return 0;
    }),
  );

  const del = project
    .command("delete")
    .description(
      "Delete a project with its versions' snapshots, its build contexts and the images built for it (its environments destroyed first)",
    )
    .argument("<name>", "project name")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv env destroy ops-world/alpha && denv project delete ops-world\n\nRefused, naming them, while the project has a live environment or a version something uses (a fork, a pool, a running replay).",
    );
  del.action(
    run(del, async (client, json, name: string) => {
      const r = await client().projects.delete(name);
      if (json) printJson(r);
      else
        process.stdout.write(
          `deleted project ${r.deleted}: ${r.versions_deleted.length} version(s), ${r.images_removed.length} built image(s)\n`,
        );
      return 0;
    }),
  );

  // --- deploy ---
  const deploy = program
    .command("deploy")
    .description("Deploy a project to an environment, in recorded phases")
    .requiredOption("--project <name>", "the project")
    .option("--env <name>", "the environment", "alpha")
    .option("--wait", "follow the phases live until the verdict")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv deploy --project ops-world --env alpha --wait\n\nExits 1 when the deployment ends rolled_back.",
    );
  deploy.action(
    run(deploy, async (client, json, o: { project: string; env: string; wait?: boolean }) => {
      const c = client();
      const p = await c.projects.get(o.project);
      if (p.source_type === "local") await uploadSource(c, p.name, p.source);
      const d = await c.projects.deploy(p.name, { env: o.env });
      if (!o.wait) {
        if (json) printJson(d);
        else
          process.stdout.write(
            `deployment ${d.id} started; follow it with \`denv deployment follow ${d.id}\`\n`,
          );
        return 0;
      }
      if (!json) process.stdout.write(`deploying ${p.name} to ${o.env} (deployment ${d.id})\n`);
      const final = await follow(c, d.id, json);
      if (json) printJson(final);
      else process.stdout.write(`${final.status}${final.reason ? `: ${final.reason}` : ""}\n`);
      return final.status === "succeeded" ? 0 : 1;
    }),
  );
}

/** A local source's compose file and .env, read as the server reads a git source's: no links. */
function readLocalSource(path: string): { dir: string; compose: string; dotenvText: string | undefined } {
  const file = findComposeFile(path);
  const dir = dirname(file);
  return {
    dir,
    compose: readProjectFile(dir, basename(file)) ?? "",
    dotenvText: readProjectFile(dir, ".env"),
  };
}

export async function uploadSource(client: DenvClient, project: string, path: string) {
  const { dir, compose, dotenvText } = readLocalSource(path);
  // Validated once, as the server will: the files it reads are collected as it reads them.
  const files: Record<string, string> = {};
  const r = validateCompose(compose, {
    env: {},
    ...(dotenvText !== undefined ? { dotenv: dotenvText } : {}),
    noBuild: false,
    projectName: project,
    readFile: (rel) => {
      const text = readProjectFile(dir, rel, MAX_REFERENCED_FILE_BYTES);
      if (text !== undefined) files[posix.normalize(rel)] = text;
      return text;
    },
  });
  // A file that does not validate uploads no context or mount: the deploy says why.
  const spec = r.ok ? r.spec : null;
  const build_contexts = spec ? await uploadBuildContexts(client, project, dir, spec) : {};
  const bind_sources = spec ? await uploadBindSources(client, project, dir, spec) : {};
  return client.projects.setSource(project, {
    compose,
    ...(dotenvText !== undefined ? { dotenv: dotenvText } : {}),
    ...(Object.keys(build_contexts).length ? { build_contexts } : {}),
    ...(Object.keys(bind_sources).length ? { bind_sources } : {}),
    ...(Object.keys(files).length ? { files } : {}),
  });
}

/** A file the compose file names (env_file, a secret's file:) is at most this large. */
const MAX_REFERENCED_FILE_BYTES = 1024 * 1024;

/**
 * Each build context of the file, packed (.dockerignore applied) and uploaded unless the server
 * already has that exact tar. A file that does not validate uploads none: the deploy says why.
 */
async function uploadBuildContexts(
  client: DenvClient,
  project: string,
  dir: string,
  spec: ResolvedSpec,
): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const svc of Object.values(spec.services)) {
    const b = svc.build;
    if (!b || out[b.context]) continue;
    const contextDir = join(dir, b.context);
    if (!existsSync(contextDir)) throw new UsageError(`the build context ${contextDir} does not exist`);
    if (!existsSync(join(contextDir, b.dockerfile)))
      throw new UsageError(`the build context ${contextDir} has no ${b.dockerfile}`);
    const packed = await packContext(contextDir, b.dockerfile);
    for (const s of packed.skipped)
      process.stderr.write(
        `warning: ${join(b.context, s)} is not a file, directory or link; left out of the build context\n`,
      );
    await uploadTar(client, project, packed, `build context ${b.context}`);
    out[b.context] = packed.digest;
  }
  return out;
}

/**
 * The project's files each relative bind mount names, packed and uploaded (unless the server has
 * that exact tar), to seed the mount's dataset: source path → its tar's digest and kind.
 */
async function uploadBindSources(
  client: DenvClient,
  project: string,
  dir: string,
  spec: ResolvedSpec,
): Promise<Record<string, { digest: string; type: "file" | "directory" }>> {
  const out: Record<string, { digest: string; type: "file" | "directory" }> = {};
  for (const d of Object.values(spec.datasets)) {
    const source = d.seed?.source;
    if (source === undefined || out[source]) continue;
    const packed = await packProjectMount(dir, source);
    if (packed.missing)
      process.stderr.write(
        `warning: bind mount source ./${source} does not exist in the project; it is mounted as an empty folder\n`,
      );
    await uploadTar(client, project, packed, `bind mount source ./${source}`);
    out[source] = { digest: packed.digest, type: packed.type };
  }
  return out;
}

/** Uploads a packed tar unless the server already has it; the temporary file is removed either way. */
async function uploadTar(
  client: DenvClient,
  project: string,
  packed: { file: string; digest: string; bytes: number; entries: number },
  what: string,
): Promise<void> {
  try {
    const have = await client.projects.hasContext(project, packed.digest).then(
      () => true,
      (err: { code?: string }) => {
        if (err.code === "not_found") return false;
        throw err;
      },
    );
    if (!have) {
      await client.putBuildContext(
        project,
        packed.digest,
        createReadStream(packed.file) as AsyncIterable<Uint8Array>,
      );
      process.stderr.write(
        `uploaded ${what} (${packed.entries} entries, ${packed.bytes} bytes, ${packed.digest.slice(0, 19)})\n`,
      );
    }
  } finally {
    await rm(dirname(packed.file), { recursive: true, force: true });
  }
}

/** "main, release/*" → ["main", "release/*"]. */
function splitPatterns(text: string): string[] {
  const list = text
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  if (list.length === 0) throw new UsageError("--branches: give one or more branch names or patterns");
  return list;
}
