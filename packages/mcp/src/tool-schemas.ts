/**
 * What the MCP tools share: the argument schemas (an environment, a service, a user, a path), the
 * output shapes of an environment and a deployment, the limits on what a tool returns, and the
 * wrapper that turns a denv error into a tool error.
 */
import { randomBytes } from "node:crypto";
import type { Operations } from "@denv/sdk";
import { z } from "zod";
import { toolError, toolOk } from "./tool-results.ts";

/** What exec keeps of each stream unless asked otherwise: a model's context is the limit. */
export const EXEC_OUTPUT_DEFAULT_BYTES = 64 * 1024;
export const EXEC_OUTPUT_MAX_BYTES = 4 * 1024 * 1024;
/** What read_file returns unless asked otherwise, and at most. */
export const READ_DEFAULT_BYTES = 256 * 1024;
export const READ_MAX_BYTES = 4 * 1024 * 1024;

export const environment = z
  .string()
  .min(1)
  .max(300)
  .describe("The environment: its id (env_…), its name, or project/name");
export const service = z
  .string()
  .min(1)
  .max(200)
  .optional()
  .describe("The service (default: the environment's agent service, else its first)");
export const user = z
  .string()
  .min(1)
  .max(200)
  .optional()
  .describe("Who runs it or touches the file (default: the service's own user)");
export const path = z.string().min(1).max(4096).describe("An absolute path inside the service");

export const environmentOut = {
  id: z.string(),
  name: z.string(),
  project: z.string(),
  status: z.string(),
  current_version_id: z.string().nullable(),
  parent_version_id: z.string().nullable(),
  sandbox: z.boolean(),
  services: z.array(z.string()),
  created_at: z.string(),
};
export const deploymentOut = {
  deployment_id: z.string(),
  kind: z.string(),
  status: z.string(),
  reason: z.string().nullable(),
  version_id: z.string().nullable(),
  phases: z.array(
    z.object({
      name: z.string(),
      status: z.string(),
      duration_ms: z.number().nullable(),
      reason: z.string().nullable(),
    }),
  ),
};

export type EnvInfo = Operations["getV1EnvsById"]["response"];
export type DeploymentInfo = Operations["getV1DeploymentsById"]["response"];

export function envResult(e: EnvInfo) {
  return {
    id: e.id,
    name: e.name,
    project: e.project,
    status: e.status,
    current_version_id: e.current_version_id,
    parent_version_id: e.parent_version_id,
    sandbox: e.sandbox,
    services: e.services,
    created_at: e.created_at,
  };
}

export function deploymentResult(d: DeploymentInfo) {
  return {
    deployment_id: d.id,
    kind: d.kind,
    status: d.status,
    reason: d.reason,
    version_id: d.version_id,
    phases: d.phases.map((p) => ({
      name: p.name,
      status: p.status,
      duration_ms: p.duration_ms,
      reason: p.reason,
    })),
  };
}

/** Runs a tool body; a denv error becomes a tool error with its code. */
export async function guarded(body: () => Promise<Record<string, unknown>>) {
  try {
    return toolOk(await body());
  } catch (err) {
    return toolError(err);
  }
}

export const newName = () => `mcp-${randomBytes(4).toString("hex")}`;
