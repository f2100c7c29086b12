/**
 * A denv version → an OpenEnv environment image's build context (OpenEnv's layout; facts in
 * as OpenEnv documents it): a standard-library server whose reset forks the version
 * through the denv API and whose step runs the action in the fork (templates/openenv). The key is
 * never written into it: the image reads DENV_SERVER and DENV_API_KEY when it runs.
 */
import { cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ResolvedSpec } from "@denv/protocol";
import { UsageError } from "../output.ts";
import type { HarborExport } from "./harbor-export.ts";

const TEMPLATE = join(import.meta.dirname, "..", "templates", "openenv");

export function exportOpenEnv(
  spec: ResolvedSpec,
  args: { project: string; versionId: string; instruction: string | null; out: string },
): HarborExport {
  const service = spec.agent?.service;
  if (!service)
    throw new UsageError(
      `${args.project} has no x-denv.agent.service: an OpenEnv step runs its action there`,
    );
  const notes: string[] = [];
  if (!spec.verifier) notes.push("x-denv.verifier: none, so a submit step scores 0 with the verify's reason");
  const dir = join(args.out, `${args.project}-openenv`);
  mkdirSync(dir, { recursive: true });
  cpSync(TEMPLATE, dir, { recursive: true });
  // The image is built FROM the version's agent image by digest: an image the user has (the
  // version runs it), with python3 for the standard-library server (the build says when not).
  const agent = spec.services[service];
  const base = agent ? (agent.image_pinned ?? agent.image) : null;
  if (!base) throw new UsageError(`${args.project}: the agent's service ${service} has no image`);
  if (base.startsWith("sha256:"))
    notes.push(
      `the base image is the agent's, built on the host (${base.slice(0, 19)}…): build the OpenEnv image on that engine, or pass --build-arg BASE_IMAGE`,
    );
  writeFileSync(
    join(dir, "Dockerfile"),
    readFileSync(join(TEMPLATE, "Dockerfile"), "utf8").replace("__DENV_AGENT_IMAGE__", base),
  );
  const name = `${args.project.replace(/-/g, "_")}_env`;
  writeFileSync(
    join(dir, "openenv.yaml"),
    `# Exported from denv ${args.project}@${args.versionId} by \`denv export --openenv\`.\nspec_version: 1\nname: ${name}\ntype: space\nruntime: python-stdlib\napp: server.app:main\nport: 8000\ndescription: "${args.project} (denv ${args.versionId}): each reset is a fork of the version"\n`,
  );
  writeFileSync(
    join(dir, "server", "denv.json"),
    `${JSON.stringify(
      {
        name,
        description: `${args.project} at ${args.versionId}: each episode is a fork of the version; actions run in ${service}`,
        version: args.versionId,
        project: args.project,
        service,
        instruction: args.instruction ?? "",
      },
      null,
      2,
    )}\n`,
  );
  if (args.instruction === null) notes.push("instruction.md: the project has none; /metadata has no readme");
  notes.push(
    "the image needs DENV_SERVER and DENV_API_KEY when it runs: each episode is a fork on denv's hosts",
  );
  writeFileSync(
    join(dir, "denv-export.json"),
    `${JSON.stringify({ to: "openenv", project: args.project, version_id: args.versionId, spec_hash: spec.hash, not_exported: notes }, null, 2)}\n`,
  );
  return { dir, notExported: notes };
}
