/**
 * Live versions of ops-world itself (PostgreSQL with its 100,000 orders, Redis, the agent's box),
 * through the API, in the same rounds:
 *   - the live snapshot's frozen window (the phase's evidence), every service's processes taken;
 *   - a fork of that live version until the agent's first query answers (`psql` in its box, an
 *     exec through the API), its PostgreSQL the parent's process restored with its memory: the same
 *     postmaster (its start time), so no recovery ran;
 *   - a cold fork of the same version (`{cold: true}`) until the same query answers: PostgreSQL
 *     starts afresh from the volume's snapshot (a crash-consistent copy: it recovers first).
 * Every sample's answer is checked (the count, and whose postmaster answered).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { log } from "./bench-rig.ts";
import { type Metric, metricOf, shuffled } from "./bench-stats.ts";

type Api = (method: string, path: string, body?: unknown) => Promise<Record<string, any>>;
type Raw = (method: string, path: string, body?: unknown) => Promise<{ status: number; data: any }>;

const QUERY = "select count(*) || ' ' || pg_postmaster_start_time() from orders";

export async function opsWorldLive(api: Api, raw: Raw, quick: boolean): Promise<Record<string, Metric>> {
  const compose = readFileSync(
    join(import.meta.dirname, "..", "examples", "ops-world", "docker-compose.yaml"),
    "utf8",
  );
  await api("POST", "/v1/projects", { name: "ops-live", kind: "rl-environment", source: "./ops-live" });
  await api("PUT", "/v1/projects/ops-live/source", { compose });
  const d = await api("POST", "/v1/projects/ops-live/deploy?wait=true", { env: "alpha" });
  if (d.status !== "succeeded") throw new Error(`deploy ops-world: ${d.reason}`);
  /** The count and the postmaster's start time, once the agent's query answers. */
  const answer = async (env: string): Promise<string> => {
    for (;;) {
      const r = await raw("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, {
        service: "opsbox",
        command: ["psql", "-tAc", QUERY],
      });
      if (r.status === 200 && r.data.exit_code === 0) return String(r.data.stdout).trim();
      await new Promise((res) => setTimeout(res, 20));
    }
  };
  const parent = await answer("ops-live/alpha");
  const started = parent.slice(parent.indexOf(" ") + 1);
  if (!parent.startsWith("100000 ")) throw new Error(`ops-world answered ${parent}`);
  const frozen: number[] = [];
  for (let i = 0; i < (quick ? 1 : 3); i++) {
    const snap = await api("POST", "/v1/envs/ops-live%2Falpha/snapshot?wait=true", { live: true });
    if (snap.status !== "succeeded") throw new Error(`live snapshot of ops-world: ${snap.reason}`);
    const ev = snap.phases.find((p: { name: string }) => p.name === "snapshot").evidence;
    const taken = Object.keys(ev.live?.services ?? {}).sort();
    if (taken.join() !== "db,opsbox,queue") throw new Error(`the live snapshot took ${taken.join()}`);
    frozen.push(ev.frozen_ms);
  }
  const live: number[] = [];
  const cold: number[] = [];
  for (let i = 0; i < (quick ? 2 : 5); i++)
    for (const who of shuffled(["live", "cold"], i + 1)) {
      const name = `${who}-${i}`;
      const t = performance.now();
      const f = await raw("POST", "/v1/envs/ops-live%2Falpha/fork", {
        name,
        ...(who === "cold" ? { cold: true } : {}),
      });
      if (f.status !== 201) throw new Error(`${who} fork of ops-world: ${JSON.stringify(f.data)}`);
      const got = await answer(`ops-live/${name}`);
      (who === "live" ? live : cold).push(performance.now() - t);
      if (!got.startsWith("100000 ")) throw new Error(`the ${who} fork answered ${got}`);
      const same = got.endsWith(` ${started}`);
      if (who === "live" && !same) throw new Error(`the live fork's PostgreSQL started anew: ${got}`);
      if (who === "cold" && same) throw new Error("the cold fork answered from the parent's postmaster");
      await api("DELETE", `/v1/envs/${encodeURIComponent(`ops-live/${name}`)}`);
    }
  await api("DELETE", "/v1/envs/ops-live%2Falpha");
  log(
    `ops-world: frozen ${metricOf(frozen, "ms").value} ms, live fork to first query ${metricOf(live, "ms").value} ms, cold ${metricOf(cold, "ms").value} ms`,
  );
  return {
    ops_world_live_snapshot_frozen_p50_ms: metricOf(
      frozen,
      "ms",
      "ops-world's live snapshot (PostgreSQL, Redis, the agent's box): its frozen window",
    ),
    ops_world_live_fork_query_p50_ms: metricOf(
      live,
      "ms",
      "fork of ops-world's live version until the agent's first psql query answers (the parent's postmaster, no recovery)",
    ),
    ops_world_cold_fork_query_p50_ms: metricOf(
      cold,
      "ms",
      "cold fork of the same version until the same query answers (PostgreSQL starts afresh and recovers)",
    ),
  };
}
