/** Store rows → the API's JSON (snake_case, as api-schemas.ts describes it). */
import type { GpuInventory } from "@denv/protocol";
import type { z } from "zod";
import type { SecretBox } from "../clouds/secret-box.ts";
import { cloudMachines } from "../store/cloud-store.ts";
import type { HostHoldings } from "../store/host-store.ts";
import type { Store } from "../store/open-store.ts";
import { projectName } from "../store/project-store.ts";
import type {
  CloudsTable,
  DeploymentsTable,
  EnvironmentsTable,
  HostsTable,
  ProjectsTable,
  VersionsTable,
} from "../store/schema.ts";
import { versionSpecJson } from "../store/version-store.ts";
import { HOSTED_SERVICE } from "../targets/target.ts";
import type {
  deploymentSchema,
  environmentSchema,
  hostSchema,
  projectSchema,
  versionSchema,
} from "./api-schemas.ts";
import type { cloudSchema } from "./cloud-schemas.ts";

/** A phase as a deployment's record holds it (phase-recorder.ts): fields it never reached are absent. */
interface StoredPhase {
  name: string;
  status: string;
  started_at?: string | null;
  finished_at?: string | null;
  duration_ms?: number | null;
  evidence?: unknown;
  reason?: string | null;
}

/**
 * A deployment with its outcome as typed fields (version_id, frozen_ms, verify), read from its
 * phases' evidence here once, so no client digs through the evidence for them.
 */
export function serializeDeployment(d: DeploymentsTable): z.infer<typeof deploymentSchema> {
  const phases = JSON.parse(d.phases_json) as StoredPhase[];
  const evidence = (name: string) => {
    const p = phases.find((x) => x.name === name && x.status === "succeeded");
    return (p?.evidence ?? null) as Record<string, unknown> | null;
  };
  const verdict = evidence("verdict");
  const str = (v: unknown) => (typeof v === "string" ? v : null);
  const num = (v: unknown) => (typeof v === "number" ? v : null);
  const reward = d.kind === "verify" ? num(verdict?.reward) : null;
  return {
    id: d.id,
    environment_id: d.environment_id,
    kind: d.kind,
    status: d.status as "queued" | "running" | "succeeded" | "rolled_back" | "failed",
    reason: d.reason,
    cancel_requested_by: d.cancel_requested_by ?? null,
    version_id: str(verdict?.version_id) ?? str(verdict?.from_version),
    frozen_ms: num(evidence("snapshot")?.frozen_ms),
    admission_wait_ms: num((evidence("place")?.admission as Record<string, unknown> | undefined)?.waited_ms),
    verify:
      reward === null
        ? null
        : {
            reward,
            reason: str(verdict?.reason),
            exit_code: num(verdict?.exit_code),
            agent: str(verdict?.agent) ?? "frozen for inspection",
          },
    // Every field of every phase on the wire, null where the record has none: a phase that failed
    // before it gathered evidence was stored without the key, which JSON then left out.
    phases: phases.map((p) => ({
      name: p.name,
      status: p.status as z.infer<typeof deploymentSchema>["phases"][number]["status"],
      started_at: p.started_at ?? null,
      finished_at: p.finished_at ?? null,
      duration_ms: p.duration_ms ?? null,
      evidence: p.evidence ?? null,
      reason: p.reason ?? null,
    })),
    created_at: d.created_at,
    finished_at: d.finished_at,
  };
}

export function serializeProject(p: ProjectsTable): z.infer<typeof projectSchema> {
  return {
    id: p.id,
    name: p.name,
    kind: p.kind,
    source_type: p.source_type as "local" | "git" | "github",
    source: p.source,
    pinned_target: p.pinned_target,
    uploaded: p.compose_text !== null,
    created_at: p.created_at,
    branches: p.branches_json ? (JSON.parse(p.branches_json) as string[]) : null,
    github:
      p.github_installation_id && p.github_repository_id
        ? { installation_id: p.github_installation_id, repository_id: p.github_repository_id }
        : null,
  };
}

export function serializeHost(
  h: HostsTable,
  connected: boolean,
  holds: HostHoldings = { versions: [], pools: [], environments: 0 },
): z.infer<typeof hostSchema> {
  return {
    id: h.id,
    name: h.name,
    arch: h.arch,
    storage: h.storage,
    capacity: h.capacity_json ? JSON.parse(h.capacity_json) : null,
    gpus: h.gpus_json ? (JSON.parse(h.gpus_json) as GpuInventory) : null,
    version: h.version,
    last_seen: h.last_seen,
    connected,
    draining: Boolean(h.draining),
    versions: holds.versions,
    pools: holds.pools,
    environments: holds.environments,
  };
}

/** An environment, with its project's name and its current version's services. */
export async function serializeEnvironment(
  store: Store,
  secrets: SecretBox,
  e: EnvironmentsTable,
): Promise<z.infer<typeof environmentSchema>> {
  const spec = await versionSpecJson(store, e.current_version_id);
  return {
    id: e.id,
    name: e.name,
    project: (await projectName(store, e.project_id)) ?? "",
    status: e.status,
    host_id: e.host_id,
    current_version_id: e.current_version_id,
    parent_version_id: e.parent_version_id,
    sandbox: e.sandbox === 1,
    target: e.target_id,
    // A hosted sandbox has no version: its one service is the VM.
    services: spec
      ? Object.keys(JSON.parse(secrets.openText(spec)).services)
      : e.target_id !== "denvd" && e.stack_id
        ? [HOSTED_SERVICE]
        : [],
    created_at: e.created_at,
  };
}

/** An environment just made, with the deployment that made it (none for a hosted provider's fork). */
export async function serializeMade(
  store: Store,
  secrets: SecretBox,
  made: { env: EnvironmentsTable; deploymentId: string | null },
): Promise<z.infer<typeof environmentSchema> & { deployment_id?: string }> {
  return {
    ...(await serializeEnvironment(store, secrets, made.env)),
    ...(made.deploymentId ? { deployment_id: made.deploymentId } : {}),
  };
}

export function serializeVersion(v: VersionsTable): z.infer<typeof versionSchema> {
  return {
    id: v.id,
    environment_id: v.environment_id,
    host_id: v.host_id,
    target: v.target_id,
    spec_hash: v.spec_hash,
    images: JSON.parse(v.images_json),
    evidence: JSON.parse(v.evidence_json),
    created_at: v.created_at,
  };
}

/** A cloud (never its token) and the machines denv made there that still exist. */
export async function serializeCloud(store: Store, c: CloudsTable): Promise<z.infer<typeof cloudSchema>> {
  return {
    name: c.name,
    provider: c.provider,
    server_type: c.server_type,
    location: c.location,
    api_url: c.api_url,
    created_at: c.created_at,
    machines: (await cloudMachines(store, c.id)).map((m) => ({
      name: m.name,
      server_id: m.provider_server_id,
      status: m.status,
    })),
  };
}
