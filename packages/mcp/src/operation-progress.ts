/**
 * Long operations seen from an MCP tool: the phases of a deployment reported as progress
 * notifications while it runs, and an environment being made (a fork, a sandbox) watched by its
 * name until the call that makes it answers. A cancelled creation is undone here: what it made is
 * destroyed, so a cancelled fork leaves nothing behind.
 */
import type { DenvClient, Deployment } from "@denv/sdk";
import { NotFoundError } from "@denv/sdk";

/** Sends `notifications/progress` for the request, when its caller asked for progress. */
export type Report = (progress: number, total: number | undefined, message: string) => Promise<void>;

export interface ToolExtra {
  signal: AbortSignal;
  _meta?: { progressToken?: string | number } & Record<string, unknown>;
  sendNotification: (n: {
    method: "notifications/progress";
    params: { progressToken: string | number; progress: number; total?: number; message?: string };
  }) => Promise<void>;
}

export function reporter(extra: ToolExtra): Report {
  const token = extra._meta?.progressToken;
  let last = -1;
  return async (progress, total, message) => {
    // Progress must increase (the protocol says so); a repeat of the same step is not sent.
    if (token === undefined || progress <= last) return;
    last = progress;
    await extra
      .sendNotification({
        method: "notifications/progress",
        params: { progressToken: token, progress, ...(total !== undefined ? { total } : {}), message },
      })
      .catch(() => {});
  };
}

const FINAL = new Set(["succeeded", "rolled_back", "failed"]);

/** Phases finished, and the one under way, as one progress step. */
function phaseStep(d: Deployment): { done: number; total: number; message: string } {
  const done = d.phases.filter((p) => p.status !== "pending" && p.status !== "running").length;
  const running = d.phases.find((p) => p.status === "running");
  return {
    done,
    total: d.phases.length,
    message: running ? `${d.kind}: ${running.name}` : `${d.kind}: ${d.status}`,
  };
}

/**
 * Follows a deployment (its event stream) to its verdict, reporting each phase. A cancelled
 * caller stops following; the deployment itself goes on to its verdict on the server (a
 * snapshot or a verify is never left half-done by a client going away).
 */
export async function followDeployment(
  client: DenvClient,
  deploymentId: string,
  report: Report,
  signal: AbortSignal,
): Promise<Deployment> {
  for await (const d of client.deploymentEvents(deploymentId, { signal })) {
    const step = phaseStep(d);
    await report(step.done, step.total, step.message);
    if (FINAL.has(d.status)) break;
  }
  return client.deployments.get(deploymentId);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The environment named `name` made at or after `sinceMs`, if there is one yet. */
async function madeSince(client: DenvClient, name: string, sinceMs: number) {
  try {
    const e = await client.envs.get(name);
    // Clocks of one server: a small margin for the record's second-resolution time.
    return Date.parse(e.created_at) >= sinceMs - 2000 ? e : null;
  } catch (err) {
    if (err instanceof NotFoundError) return null;
    throw err;
  }
}

/**
 * Reports the phases of the deployment that makes environment `name`, polling until `until`
 * settles: the call that makes it answers only at the end, and the record exists from the start.
 */
export async function watchCreation(
  client: DenvClient,
  name: string,
  sinceMs: number,
  report: Report,
  until: Promise<unknown>,
): Promise<void> {
  let settled = false;
  void until.then(
    () => {
      settled = true;
    },
    () => {
      settled = true;
    },
  );
  let envId: string | null = null;
  await report(0, undefined, `creating ${name}`);
  while (!settled) {
    await Promise.race([sleep(300), until.catch(() => {})]);
    if (settled) break;
    try {
      envId ??= (await madeSince(client, name, sinceMs))?.id ?? null;
      if (!envId) continue;
      const d = (await client.envs.deployments(envId)).deployments[0];
      if (d) {
        const step = phaseStep(d as Deployment);
        await report(step.done, step.total, step.message);
      }
    } catch {
      // Progress is a courtesy: a failed look is tried again, the call itself decides the outcome.
    }
  }
}

/**
 * Undoes a cancelled creation: waits for the call that makes it to end (the server finishes or
 * rolls back what it started), then destroys what it made, found by its id or, when the call
 * failed, by its name.
 */
export async function undoCreation(
  client: DenvClient,
  making: Promise<{ id: string } | null>,
  name: string,
  sinceMs: number,
): Promise<void> {
  const made = await making.catch(() => null);
  const id = made?.id ?? (await madeSince(client, name, sinceMs).catch(() => null))?.id;
  if (!id) return;
  try {
    await client.untilVerdict(() => client.envs.destroy(id));
  } catch (err) {
    if (!(err instanceof NotFoundError)) throw err;
  }
}
