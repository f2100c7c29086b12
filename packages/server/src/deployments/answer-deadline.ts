/**
 * How long a request that waits for a deployment's verdict is held. Node's fetch (undici) gives up
 * on a server that sends no headers for 300 s, and so do many proxies: a caller must have its
 * answer before that, the verdict or a clean `timeout` naming the deployment to follow, never a cut
 * connection. The deployment itself goes on, and ends by its operations' own deadlines.
 */
import { DenvError } from "@denv/protocol";

export const ANSWER_WITHIN_MS = 240_000;

/** Resolves once the deployment has its verdict; throws `timeout` (with its id) at withinMs. */
export async function awaitVerdict(
  made: { deploymentId: string; done: Promise<unknown> },
  what: string,
  withinMs: number = ANSWER_WITHIN_MS,
): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), withinMs);
  });
  const settled = made.done.then(
    () => "done" as const,
    () => "done" as const,
  );
  const first = await Promise.race([settled, late]);
  clearTimeout(timer);
  if (first === "late") {
    const id = made.deploymentId;
    throw new DenvError(
      "timeout",
      `the ${what} has no verdict after ${Math.round(withinMs / 1000)} s and is still running; follow deployment ${id} (denv deployment show ${id}, or GET /v1/deployments/${id})`,
      { details: { deployment_id: id } },
    );
  }
}
