/** What routes check of an environment before they reach into it. */
import { DenvError } from "@denv/protocol";
import { allows } from "../people/access-rules.ts";
import { findEnvironment } from "../store/environment-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import { requireHostsTarget } from "../targets/target.ts";
import type { ApiContext, ApiDeps } from "./api-deps.ts";
import { serializeEnvironment } from "./api-serializers.ts";

/** The environment the path's {id} names, among the caller's team's. */
export function envOf(c: ApiContext): Promise<EnvironmentsTable> {
  return findEnvironment(c.var.deps.store, c.var.teamId, c.req.param("id") ?? "");
}

/**
 * The environment, running, for a request that reaches into it (exec, files, logs, a port URL):
 * one the idle timer paused (x-denv.idle_pause_s) is resumed first for a caller who may change
 * it, and the request counts as its activity (deployments/idle-pause.ts). Conflict, saying why,
 * when it does not run.
 */
export async function awake(c: ApiContext, e: EnvironmentsTable): Promise<EnvironmentsTable> {
  const { idle } = c.var.deps.deployer;
  const env = await idle.wake(e, allows(c.var.role, "change"));
  assertRunning(env);
  await idle.note(env);
  return env;
}

/** Conflict (saying why) unless it is running, on whichever target. */
export function assertRunning(e: EnvironmentsTable): void {
  if (e.status === "frozen") {
    throw new DenvError(
      "conflict",
      `environment ${e.name} is frozen by verify for inspection: resume it (denv env resume ${e.name}, POST /v1/envs/{id}/resume), fork it, or verify with resume`,
    );
  }
  if (e.status === "paused")
    throw new DenvError(
      "conflict",
      `environment ${e.name} is paused with its memory: resume it (denv env resume ${e.name}, POST /v1/envs/{id}/resume)`,
    );
  if (e.status !== "running" || !e.stack_id)
    throw new DenvError("conflict", `environment ${e.name} is ${e.status}, not running`);
}

/**
 * Its host and stack, when it is running on a denvd host; conflict (saying why) otherwise. What
 * only a denvd host does (snapshot, fork, verify, port URLs) is refused on a hosted target.
 */
export function runningOn(e: EnvironmentsTable): { hostId: string; stackId: string } {
  assertRunning(e);
  requireHostsTarget(e, "this");
  if (!e.host_id) throw new DenvError("conflict", `environment ${e.name} has no host`);
  return { hostId: e.host_id, stackId: e.stack_id as string };
}

/** The service a request names, checked against the environment's own services first. */
export async function serviceOf(
  deps: Pick<ApiDeps, "store" | "secrets">,
  e: EnvironmentsTable,
  service: string | undefined,
): Promise<string | undefined> {
  if (service === undefined) return undefined;
  const { services } = await serializeEnvironment(deps.store, deps.secrets, e);
  if (!services.includes(service))
    throw new DenvError(
      "not_found",
      `environment ${e.name} has no service ${JSON.stringify(service.slice(0, 64))}; it has ${services.join(", ")}`,
    );
  return service;
}

/** An absolute path in a service: no `..` and no NUL byte (denvd normalises and checks it again). */
export function containerPath(path: string | undefined): string {
  if (!path?.startsWith("/"))
    throw new DenvError("invalid_argument", "?path= must be an absolute path in the service");
  if (path.includes("\0") || path.split("/").includes(".."))
    throw new DenvError("invalid_argument", '?path= must not contain ".." or NUL bytes');
  return path;
}

/** A TCP port from the path; invalid_argument for anything else. */
export function tcpPort(raw: string | undefined): number {
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new DenvError("invalid_argument", `port ${raw} is not a TCP port (1-65535)`);
  return port;
}
