/**
 * What earlier starts of a project read of each image's clock: an image whose program was found
 * on the real clock (statically linked, another loader) is known before its containers exist, so
 * resolve can warn (or, with x-denv.clock: frozen-strict, refuse) instead of waiting for start to
 * find it again. A compose file and an image reference alone cannot tell: only a running program can.
 */
import type { ClockServiceEvidence, ResolvedSpec } from "@denv/protocol";
import type { SpecIssue } from "@denv/spec";
import { projectDeployPhases } from "../store/deployment-store.ts";
import type { Store } from "../store/open-store.ts";

/** Deployments looked at, newest first. */
const HISTORY = 20;

export async function clockHistory(
  store: Store,
  projectId: string,
): Promise<Map<string, { reach: ClockServiceEvidence; deploymentId: string }>> {
  const rows = await projectDeployPhases(store, projectId, HISTORY);
  const known = new Map<string, { reach: ClockServiceEvidence; deploymentId: string }>();
  for (const d of rows) {
    const start = (JSON.parse(d.phases_json) as { name: string; evidence: unknown }[]).find(
      (p) => p.name === "start",
    )?.evidence as {
      containers?: Record<string, { image?: string }>;
      clock?: { services?: Record<string, ClockServiceEvidence> } | null;
    } | null;
    for (const [svc, reach] of Object.entries(start?.clock?.services ?? {})) {
      const image = start?.containers?.[svc]?.image;
      // A reach read because the host had no clock library says nothing about the image.
      if (!image || reach.frozen || reach.program === null || known.has(image)) continue;
      known.set(image, { reach, deploymentId: d.id });
    }
  }
  return known;
}

/** Warnings (errors with frozen-strict) for the services whose images are known to read the real clock. */
export function clockIssues(
  spec: ResolvedSpec,
  known: Map<string, { reach: ClockServiceEvidence; deploymentId: string }>,
): SpecIssue[] {
  if (spec.clock === "real") return [];
  const issues: SpecIssue[] = [];
  for (const [svc, s] of Object.entries(spec.services)) {
    const hit = known.get(s.image_pinned ?? s.image);
    if (!hit) continue;
    issues.push({
      code: "clock_not_frozen",
      severity: spec.clock === "frozen-strict" ? "error" : "warning",
      message: `service ${svc} reads the real clock: ${hit.reach.reason} (seen by deployment ${hit.deploymentId})`,
      path: `services.${svc}.image`,
      line: 0,
      column: 0,
    });
  }
  return issues;
}
