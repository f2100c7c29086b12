/**
 * The project's files its relative bind mounts name, as datasets of the version. At resolve each
 * seeded dataset is given the tar of its source: the one the CLI uploaded with the compose file, or
 * the commit's own files for a git source (kept beside uploaded ones, under the same limits); the
 * spec then names each tar by digest, so a change to the files is a new version. At prepare the
 * host extracts each tar into its fresh dataset before any container exists.
 */
import { PassThrough, type Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ResolvedSpec } from "@denv/protocol";
import { withSeeds } from "@denv/spec";
import tar from "tar-stream";
import { normalizedTar } from "../build-contexts.ts";
import type { DeploymentRunner } from "./deployment-runner.ts";
import { hereOrFromPeers } from "./image-builds.ts";
import { PhaseFailure } from "./phase-recorder.ts";
import type { ProjectSource } from "./project-source.ts";

/** What the resolve phase records of each project mount (never the files themselves). */
export interface ProjectMountEvidence {
  dataset: string;
  source: string;
  type: "file" | "directory";
  digest: string;
  mounts: { service: string; target: string; read_only: boolean }[];
}

function emptyTar(): Readable {
  const pack = tar.pack();
  pack.finalize();
  const out = new PassThrough();
  (pack as unknown as Readable).pipe(out);
  return out;
}

/** Each seeded dataset's tar found (uploaded, or archived from git), the spec naming it. */
export async function resolveSeeds(
  runner: DeploymentRunner,
  teamId: string,
  src: ProjectSource,
  spec: ResolvedSpec,
  warnings: unknown[],
): Promise<{ spec: ResolvedSpec; evidence: ProjectMountEvidence[] }> {
  const seeds: Record<string, { digest: string; type: "file" | "directory" }> = {};
  const evidence: ProjectMountEvidence[] = [];
  for (const [name, d] of Object.entries(spec.datasets)) {
    const source = d.seed?.source;
    if (source === undefined) continue;
    let found = src.bindSources[source];
    if (!found && src.seed) {
      // A git source: the commit's files (a missing path is an empty folder, as Compose makes).
      const s = await src.seed(source);
      const put = await runner.buildContexts.putStream(teamId, normalizedTar(s?.tar ?? emptyTar()));
      found = { digest: put.digest, type: s?.type ?? "directory" };
      src.bindSources[source] = found;
    }
    if (!found)
      throw new PhaseFailure(
        `bind mount source ./${source} was not uploaded with the compose file: deploy with the CLI from the project's directory (it uploads each one)`,
        { errors: [], warnings },
      );
    seeds[name] = found;
    evidence.push({
      dataset: name,
      source,
      ...found,
      mounts: Object.entries(spec.services).flatMap(([service, s]) =>
        s.volumes
          .filter((v) => v.dataset === name)
          .map((v) => ({ service, target: v.target, read_only: v.read_only })),
      ),
    });
  }
  return { spec: evidence.length ? withSeeds(spec, seeds) : spec, evidence };
}

/** prepare: each seeded dataset of the prepared stack filled with its tar, on the host. */
export async function seedDatasets(
  runner: DeploymentRunner,
  teamId: string,
  hostId: string,
  stackId: string,
  spec: ResolvedSpec,
): Promise<Record<string, { digest: string; entries: number; bytes: number; ms: number }>> {
  const out: Record<string, { digest: string; entries: number; bytes: number; ms: number }> = {};
  for (const [name, d] of Object.entries(spec.datasets)) {
    const digest = d.seed?.digest;
    if (!digest) continue;
    await hereOrFromPeers(runner, teamId, digest);
    const { streams, result } = await runner.stacks.seedDataset({ hostId, stackId }, name, {
      timeoutMs: 30 * 60_000,
    });
    const [content] = streams;
    content.on("error", () => {});
    const sending = pipeline(runner.buildContexts.open(teamId, digest), content);
    sending.catch(() => {});
    const r = await result;
    out[name] = { digest, ...r };
  }
  return out;
}
