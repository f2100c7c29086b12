/**
 * A project's compose file (and .env) for the resolve phase: a local project's upload, opened
 * from its seal, or one commit of its git URL, fetched for this deploy only and read as hostile
 * input (git-source.ts).
 */

import type { Readable } from "node:stream";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { FetchPolicy } from "../fetch-policy.ts";
import { type GitCheckout, openGitSource } from "../git-source.ts";
import type { ProjectsTable } from "../store/schema.ts";
import { PhaseFailure } from "./phase-recorder.ts";

export interface ProjectSource {
  compose: string;
  dotenv: string | null;
  /** What the resolve phase records of where the file came from. */
  source: unknown;
  /** Build context path (normalised) → the sha256: of its uploaded tar. */
  buildContexts: Record<string, string>;
  /** Bind mount source path → its uploaded tar (a git source's are archived from the commit). */
  bindSources: Record<string, { digest: string; type: "file" | "directory" }>;
  /** A git source's file the compose file reads, as readText() of git-source.ts. */
  readText?: GitCheckout["readText"];
  /** A git source's bind mount source, as seed() of git-source.ts. */
  seed?: GitCheckout["seed"];
  /** The files the compose file reads (env_file, secrets' file:), path → text; a git source's: none yet. */
  files: Record<string, string>;
  /** A git source's directory as a tar (its build contexts come from the commit itself). */
  archive?: (path: string) => Readable;
  /** Lets go of what the source holds open (a git clone); always called once resolve is done. */
  close(): Promise<void>;
}

/** Reads a github: project's commit through its App's installation (github/github-apps.ts). */
export interface GitHubSourceReader {
  open(
    project: ProjectsTable,
    at: { commit?: string; ref?: string },
  ): Promise<{ checkout: GitCheckout; source: Record<string, unknown> }>;
}

export async function projectSource(
  project: ProjectsTable,
  deps: { secrets: SecretBox; fetchPolicy: FetchPolicy; github?: GitHubSourceReader },
  at: { commit?: string; ref?: string } = {},
): Promise<ProjectSource> {
  if (project.source_type === "local") {
    if (!project.compose_text)
      throw new PhaseFailure(
        "the project's local source has not been uploaded: run `denv deploy` from its directory",
      );
    return {
      compose: deps.secrets.openText(project.compose_text),
      dotenv: deps.secrets.openText(project.dotenv_text),
      source: { type: "local", path: project.source },
      buildContexts: JSON.parse(project.build_contexts_json ?? "{}") as Record<string, string>,
      bindSources: JSON.parse(project.bind_sources_json ?? "{}") as ProjectSource["bindSources"],
      files: JSON.parse(deps.secrets.openText(project.files_text ?? null) ?? "{}") as Record<string, string>,
      close: async () => {},
    };
  }
  let g: GitCheckout;
  let source: Record<string, unknown>;
  if (project.source_type === "github") {
    if (!deps.github) throw new PhaseFailure(`${project.source}: this server reads no GitHub sources`);
    ({ checkout: g, source } = await deps.github.open(project, at));
  } else {
    g = await openGitSource(project.source, deps.fetchPolicy, at.commit ? { commit: at.commit } : {});
    source = { type: "git", url: project.source, commit: g.commit, file: g.file };
  }
  return {
    compose: g.compose,
    dotenv: g.dotenv,
    source,
    buildContexts: {},
    bindSources: {},
    files: {},
    archive: g.archive,
    seed: g.seed,
    readText: g.readText,
    close: g.close,
  };
}
