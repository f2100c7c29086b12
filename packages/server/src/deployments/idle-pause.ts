/**
 * x-denv.idle_pause_s: an environment no request has reached for that long is paused with its
 * memory (resume-kind.ts's pause), and the next request that reaches into it (exec, files, logs,
 * a port URL) resumes it first, then goes on as if it had never stopped: E2B's autoPause and
 * autoResume, for /v1. A pause asked for by hand is never undone by a request.
 *
 * Activity is written at most every NOTE_EVERY_MS per environment and replica: a busy sandbox's
 * thousands of execs cost a handful of writes, and the timer is seconds to a week.
 */
import { DenvError } from "@denv/protocol";
import { serverLog } from "../server-log.ts";
import { environmentById, idleTimedEnvironments, noteEnvironmentActive } from "../store/environment-store.ts";
import type { EnvironmentsTable } from "../store/schema.ts";
import type { DeploymentRunner } from "./deployment-runner.ts";
import { runPause, runWake } from "./resume-kind.ts";

const NOTE_EVERY_MS = 10_000;

export class IdlePauses {
  private readonly runner: DeploymentRunner;
  /** Environment id → when this replica last wrote its activity. */
  private readonly noted = new Map<string, number>();

  constructor(runner: DeploymentRunner) {
    this.runner = runner;
  }

  /** A request reached the environment at nowMs. */
  async note(env: Pick<EnvironmentsTable, "id" | "idle_pause_s">, nowMs = Date.now()): Promise<void> {
    if (!env.idle_pause_s) return;
    const last = this.noted.get(env.id);
    if (last !== undefined && nowMs - last < NOTE_EVERY_MS) return;
    this.noted.set(env.id, nowMs);
    await noteEnvironmentActive(this.runner.store, env.id, new Date(nowMs).toISOString());
  }

  /**
   * The environment, running again when the idle timer paused it and the caller may change it;
   * as it is otherwise (the route's own check then says why it is not running).
   */
  async wake(env: EnvironmentsTable, mayChange: boolean): Promise<EnvironmentsTable> {
    if (env.status !== "paused" || !env.idle_paused) return env;
    if (!mayChange)
      throw new DenvError(
        "conflict",
        `environment ${env.name} is paused while idle: a request from a key that may change it resumes it`,
      );
    const woken = await runWake(this.runner, env);
    this.noted.set(env.id, Date.now());
    return woken;
  }

  /** A request through a port URL or an ingress name (whose URL or token let it in). */
  async wakeById(environmentId: string): Promise<void> {
    const env = await this.wake(await environmentById(this.runner.store, environmentId), true);
    await this.note(env);
  }

  /** Pauses every running environment idle past its timer at nowMs; how many. */
  async sweep(nowMs = Date.now()): Promise<number> {
    let n = 0;
    for (const e of await idleTimedEnvironments(this.runner.store)) {
      const since = Date.parse(e.active_at ?? e.created_at);
      if (!e.idle_pause_s || nowMs - since < e.idle_pause_s * 1000) continue;
      try {
        // runPause checks again, in the environment's turn, that it still runs.
        await runPause(this.runner, await environmentById(this.runner.store, e.id), { idle: true });
        n++;
      } catch (err) {
        // A pause CRIU refuses (or a host away) is tried again after another idle period, not at
        // every sweep: its activity is set to now.
        serverLog().warn({ environment: e.id, error: String(err) }, "idle environment not paused");
        await noteEnvironmentActive(this.runner.store, e.id, new Date(nowMs).toISOString());
      }
    }
    return n;
  }
}
