/** Replays: N forks of a version run one scripted episode; the report says identical or where not. */
import { DenvError, type ResolvedSpec } from "@denv/protocol";
import { z } from "zod";
import { DEFAULT_REPLAY_FORKS, defaultEpisode, startRecordedReplay } from "../deployments/replay-runner.ts";
import { findReplay, versionReplays } from "../store/replay-store.ts";
import type { ReplaysTable } from "../store/schema.ts";
import { resolveVersionRef, versionHost } from "../store/version-store.ts";
import type { ApiContext } from "./api-deps.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { queryFlag, replayBody, replaySchema } from "./api-schemas.ts";

export function serializeReplay(r: ReplaysTable): z.infer<typeof replaySchema> {
  return {
    id: r.id,
    version_id: r.version_id,
    status: r.status as z.infer<typeof replaySchema>["status"],
    request: JSON.parse(r.request_json),
    report: r.report_json ? JSON.parse(r.report_json) : null,
    forks_done: r.forks_done ?? 0,
    created_at: r.created_at,
    finished_at: r.finished_at,
  };
}

/** Starts a replay of a version; its promise settles with the stored row once it is done. */
export async function startReplay(
  c: ApiContext,
  versionRef: string,
  body: z.infer<typeof replayBody>,
): Promise<{ row: ReplaysTable; done: Promise<ReplaysTable> }> {
  const deps = c.var.deps;
  const teamId = c.var.teamId;
  const version = await resolveVersionRef(deps.store, teamId, versionRef);
  const hostId = versionHost(version, "a replay");
  const spec = JSON.parse(deps.secrets.openText(version.spec_json)) as ResolvedSpec;
  const steps = body.steps ?? defaultEpisode(spec);
  if (steps.length === 0)
    throw new DenvError(
      "invalid_argument",
      "steps: the version has no collected paths and no verifier to build a default episode from; send steps",
    );
  for (const [i, s] of steps.entries())
    if (s.service && !spec.services[s.service])
      throw new DenvError("invalid_argument", `steps.${i}.service: the version has no service ${s.service}`);
  const request = { forks: body.forks ?? DEFAULT_REPLAY_FORKS, parallel: body.parallel ?? 4, steps };
  const { row, done } = await startRecordedReplay(deps, teamId, { ...version, host_id: hostId }, request);
  return { row, done: done.then((d) => d.row) };
}

export const replayRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/versions/{id}/replays",
    name: "versions.replay",
    summary:
      "Replay a version: N forks (default 20) run one scripted episode; the report says identical or shows the first divergence. ?wait=true answers with the report",
    body: replayBody,
    query: z.object({
      wait: queryFlag.describe("true: answer once the report is done; default: at once (202)"),
    }),
    response: replaySchema,
    status: 202,
    auth: true,
    handler: async (c, { body, query }) => {
      const { row, done } = await startReplay(c, c.req.param("id") ?? "", body);
      if (query.wait === "true") return c.json(serializeReplay(await done), 200);
      done.catch(() => {});
      return c.json(serializeReplay(row), 202);
    },
  }),
  route({
    method: "get",
    path: "/v1/versions/{id}/replays",
    name: "versions.replays",
    summary: "A version's replays, newest first",
    response: z.object({ replays: z.array(replaySchema) }),
    auth: true,
    handler: async (c) => {
      const { store } = c.var.deps;
      const v = await resolveVersionRef(store, c.var.teamId, c.req.param("id") ?? "");
      return c.json({ replays: (await versionReplays(store, c.var.teamId, v.id)).map(serializeReplay) });
    },
  }),
  route({
    method: "get",
    path: "/v1/replays/{id}",
    name: "replays.get",
    summary: "A replay and its report",
    response: replaySchema,
    auth: true,
    handler: async (c) =>
      c.json(serializeReplay(await findReplay(c.var.deps.store, c.var.teamId, c.req.param("id") ?? ""))),
  }),
];
