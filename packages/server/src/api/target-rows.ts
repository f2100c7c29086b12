/** A target's capability row as /v1/targets answers it, from the port's own cells. */
import type { z } from "zod";
import type { Target, TargetCapabilities } from "../targets/target.ts";
import type { targetSchema } from "./api-schemas.ts";

const CELLS: [keyof TargetCapabilities, string][] = [
  ["multiServiceStack", "multi_service_stack"],
  ["consistentSnapshot", "consistent_snapshot"],
  ["fork", "fork"],
  ["forkTime", "fork_time"],
  ["egressDenyVerified", "egress_deny_verified"],
  ["capsEnforced", "caps_enforced"],
  ["gpu", "gpu"],
  ["verify", "verify"],
];

/** A target's row as /v1/targets answers it: each cell's words, and which cells it supports. */
export async function targetRow(t: Target, teamId: string): Promise<z.infer<typeof targetSchema>> {
  const [caps, status] = await Promise.all([t.capabilities(teamId), t.status(teamId)]);
  return {
    name: t.name,
    type: t.kind,
    available: status.available,
    hosts: status.hosts ?? 0,
    note: status.note,
    capabilities: Object.fromEntries(CELLS.map(([k, wire]) => [wire, caps[k].detail])) as z.infer<
      typeof targetSchema
    >["capabilities"],
    supported: CELLS.filter(([k]) => caps[k].supported).map(([, wire]) => wire),
  };
}
