/**
 * digest_volumes: the state of every volume of a running stack, for a replay report. Databases
 * checkpoint first (what they hold in memory reaches the files), every service is frozen while the
 * datasets are read (nothing changes under the walk, and no container can swap a name for a link
 * mid-walk), then everything thaws. A frozen clock is held first, at what it reads (a replay holds
 * it between steps, so that is the episode's end): the checkpoint is the digest's, not the
 * episode's, and the time it records (PostgreSQL's pg_control) must not depend on how long the
 * digest took in each fork. The stack is a replay's, destroyed next.
 */
import type { OpResult } from "@denv/protocol";
import { holdClock, isFrozen } from "../clock/clock-state.ts";
import type { StackContext } from "../stack/stack-context.ts";
import { checkpointDatabases } from "./snapshotter.ts";
import { digestTree } from "./volume-digest.ts";

export async function digestStack(
  ctx: StackContext,
  stackId: string,
  options: { holdClock: boolean } = { holdClock: true },
): Promise<OpResult<"digest_volumes">> {
  const stack = ctx.stack(stackId);
  const started = performance.now();
  const clockHeld =
    options.holdClock && isFrozen(stack.spec) && (await holdClock(ctx.options.stateDir, stack.id)) !== null;
  const checkpoint = await checkpointDatabases(ctx, stack, { redisSave: false });
  const states = await Promise.all(
    Object.values(stack.containers).map((id) => ctx.runtime.inspectContainer(id)),
  );
  const live = states.filter((st) => st.running && !st.paused);
  const volumes: OpResult<"digest_volumes">["volumes"] = {};
  try {
    // Every freeze ends before a failure is raised: the thaw below must not run before one lands.
    const froze = await Promise.allSettled(live.map((st) => ctx.runtime.freezeContainer(st.id, st.pid)));
    for (const f of froze) if (f.status === "rejected") throw f.reason;
    for (const [vol, ds] of Object.entries(stack.datasets))
      volumes[vol] = await digestTree(ctx.storage.datasetPath(ds));
  } finally {
    await Promise.all(live.map((st) => ctx.runtime.thawContainer(st.id).catch(() => false)));
  }
  return { volumes, checkpoint, clock_held: clockHeld, ms: Math.round(performance.now() - started) };
}
