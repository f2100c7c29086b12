/**
 * The builds of a deploy's prepare phase: each service with `build:` is built by the host's engine
 * from the context the team uploaded, its log streamed into the phase as it runs, and pinned by the
 * built image's id. A build is named by its key (the context's digest, Dockerfile, args, target,
 * cache sources, labels and network): a host that already built that key builds nothing.
 */
import { createHash } from "node:crypto";
import { pipeline } from "node:stream/promises";
import { DEFAULT_CAPS, DenvError, type ResolvedSpec } from "@denv/protocol";
import { canonicalJson, withBuiltImages } from "@denv/spec";
import type { DeploymentRunner } from "./deployment-runner.ts";
import type { PhaseRecorder } from "./phase-recorder.ts";

/** How long one build may run before the host stops it. */
export const BUILD_TIMEOUT_MS = 30 * 60_000;
/** Lines of each build's log the phase shows while it runs. */
const LIVE_LOG_LINES = 30;

export interface BuildEvidence {
  build_key: string;
  context: string;
  context_digest: string;
  dockerfile: string;
  target: string | null;
  image_id: string;
  /** false: the host had built this key before, and nothing was built. */
  built: boolean;
  ms: number;
  steps: number;
  log_tail: string[];
}

type Build = NonNullable<ResolvedSpec["services"][string]["build"]>;

/** The key a build is known by on its host: everything that decides what it makes. */
export function buildKey(b: Build): string {
  const { context: _path, ...decides } = b;
  return createHash("sha256").update(canonicalJson(decides)).digest("hex");
}

/** A local image name for a build, from the project and service (both already checked names). */
function buildTag(projectName: string, service: string, key: string): string {
  const repo = `denv-build/${projectName}-${service}`.toLowerCase().replace(/[^a-z0-9._/-]/g, "-");
  return `${repo}:${key.slice(0, 16)}`;
}

/**
 * Builds (or finds) every built service's image on the host; returns the spec pinned to them and
 * each build's evidence. The prepare phase shows each build's last log lines while it runs.
 */
export async function buildImages(
  runner: DeploymentRunner,
  rec: PhaseRecorder,
  args: { teamId: string; projectId: string; projectName: string; hostId: string; spec: ResolvedSpec },
): Promise<{ spec: ResolvedSpec; builds: Record<string, BuildEvidence> }> {
  const { spec, hostId } = args;
  const builds: Record<string, BuildEvidence> = {};
  const byKey = new Map<string, BuildEvidence>();
  const live: Record<string, string[]> = {};
  const showLive = () => rec.progress("prepare", { building: live });
  for (const [service, svc] of Object.entries(spec.services)) {
    const b = svc.build;
    if (!b) continue;
    if (!b.context_digest) throw new Error(`service ${service} has no context digest at prepare`);
    const key = buildKey(b);
    const same = byKey.get(key);
    if (same) {
      // Two services, one build: built once.
      builds[service] = { ...same, built: false, ms: 0 };
      continue;
    }
    const base = {
      build_key: key,
      context: b.context,
      context_digest: b.context_digest,
      dockerfile: b.dockerfile,
      target: b.target,
    };
    const found = b.no_cache ? null : await runner.stacks.findBuiltImage(hostId, key);
    if (found) {
      builds[service] = { ...base, image_id: found, built: false, ms: 0, steps: 0, log_tail: [] };
    } else {
      const lines: string[] = [];
      live[service] = lines;
      await hereOrFromPeers(runner, args.teamId, b.context_digest);
      const { streams, result } = await runner.stacks.buildImage(
        hostId,
        {
          build_key: key,
          tag: buildTag(args.projectName, service, key),
          service,
          dockerfile: b.dockerfile,
          args: b.args,
          target: b.target,
          cache_from: b.cache_from,
          no_cache: b.no_cache,
          labels: b.labels,
          owner: { team_id: args.teamId, project_id: args.projectId },
          network: b.network,
          memory_bytes: svc.caps.memory_bytes ?? DEFAULT_CAPS.memory_bytes,
          timeout_ms: BUILD_TIMEOUT_MS,
        },
        { timeoutMs: BUILD_TIMEOUT_MS + 60_000 },
      );
      const [context, log] = streams;
      context.on("error", () => {});
      const sending = pipeline(runner.buildContexts.open(args.teamId, b.context_digest), context);
      sending.catch(() => {});
      const reading = readLog(log, (line) => {
        lines.push(line);
        if (lines.length > LIVE_LOG_LINES) lines.shift();
        void showLive();
      });
      const r = await result;
      await reading.catch(() => {});
      builds[service] = {
        ...base,
        image_id: r.image_id,
        built: true,
        ms: r.ms,
        steps: r.steps,
        log_tail: r.log_tail,
      };
      delete live[service];
    }
    byKey.set(key, builds[service] as BuildEvidence);
  }
  const ids = Object.fromEntries(Object.entries(builds).map(([s, e]) => [s, e.image_id]));
  return { spec: withBuiltImages(spec, ids), builds };
}

/** The host's log stream, a line at a time (cut at 400 characters; control bytes dropped). */
export async function readLog(log: AsyncIterable<unknown>, onLine: (line: string) => void): Promise<void> {
  let partial = "";
  for await (const chunk of log) {
    const parts = (partial + (chunk as Buffer).toString("utf8")).split("\n");
    partial = parts.pop() ?? "";
    if (partial.length > 4096) {
      parts.push(partial);
      partial = "";
    }
    for (const raw of parts) {
      // biome-ignore lint/suspicious/noControlCharactersInRegex: a host's bytes are not trusted to be text
      const clean = raw.replace(/[\x00-\x08\x0b-\x1f\x7f]/g, "").slice(0, 400);
      if (clean.trim()) onLine(clean);
    }
  }
  if (partial.trim()) onLine(partial.slice(0, 400));
}

/**
 * A build context is on this replica's disk, or fetched now from the replica it was uploaded to
 * (several replicas on one store: replicas/peer-contexts.ts).
 */
export async function hereOrFromPeers(
  runner: DeploymentRunner,
  teamId: string,
  digest: string,
): Promise<void> {
  if ((await runner.buildContexts.size(teamId, digest)) === null)
    throw new DenvError(
      "not_found",
      `build context ${digest} is not stored on any server replica (it expired, or was never uploaded); upload the project again (denv up)`,
    );
}
