/**
 * Chaos, as an operator would meet it: a server and a denvd as separate processes (process-world.ts),
 * ops-world deployed to alpha, then, again and again, an operation is asked for (every other
 * snapshot a live one, whose forks restore every service's processes) and one of the two
 * processes is SIGKILLed at a random moment of it and started again. After each round the three
 * records must agree (the server's store, denvd's state file, the engine), nothing may be paused
 * that is not recorded frozen, and the request must have had its answer within its deadline.
 *
 * Run in a bounded form by test/e2e/chaos.test.ts and in the long form by scripts/chaos.ts.
 */

import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { seededRandom } from "../../bench/bench-stats.ts";
import { kill, type ProcessWorld, until } from "./process-world.ts";

export type DenvdTarget = "fork" | "snapshot" | "rollback" | "verify" | "destroy";
export type ServerTarget = "deploy" | "fork" | "snapshot" | "verify" | "rollback";

/** How long a waiting request may take before the chaos run counts it as held past its deadline. */
export const REQUEST_DEADLINE_MS: Record<DenvdTarget | ServerTarget, number> = {
  deploy: 10 * 60_000,
  fork: 3 * 60_000,
  snapshot: 3 * 60_000,
  rollback: 3 * 60_000,
  verify: 5 * 60_000,
  destroy: 3 * 60_000,
};

/**
 * The kill comes at a random moment within about the operation's own duration on this machine, so
 * that most land while it runs (each round records whether it did).
 */
const KILL_WITHIN_MS: Record<DenvdTarget | ServerTarget, number> = {
  deploy: 3500,
  fork: 1000,
  snapshot: 350,
  rollback: 1300,
  verify: 2000,
  destroy: 450,
};

export interface Round {
  n: number;
  process: "denvd" | "server";
  op: DenvdTarget | ServerTarget;
  killAtMs: number;
  /** Whether the kill came before the answer: it landed while the operation ran. */
  landed: boolean;
  /** The request's answer: HTTP status and error code, or how it failed to arrive. */
  answer: string;
  answerMs: number;
  /** What the invariants found wrong after the round (empty when all held). */
  problems: string[];
}

export interface ChaosReport {
  seed: number;
  rounds: Round[];
  frozen: number;
  held: number;
  orphans: number;
  leftovers: number;
  problems: string[];
}

interface ServerEnv {
  id: string;
  name: string;
  status: string;
  host_id: string | null;
  stack_id: string | null;
}

/** The server's own records, read from its store (the API does not show stack ids). */
function serverRecords(w: ProcessWorld): { envs: ServerEnv[]; versions: string[]; running: string[] } {
  const db = new DatabaseSync(join(w.dataDir, "denv.sqlite"), { readOnly: true });
  try {
    db.exec("PRAGMA busy_timeout = 5000");
    const envs = db
      .prepare("select id, name, status, host_id, stack_id from environments where status != 'destroyed'")
      .all() as unknown as ServerEnv[];
    const versions = (db.prepare("select id from versions").all() as { id: string }[]).map((v) => v.id);
    const running = (
      db.prepare("select id from deployments where status in ('running', 'queued')").all() as { id: string }[]
    ).map((d) => d.id);
    return { envs, versions, running };
  } finally {
    db.close();
  }
}

/** Deployments made since an instant (ISO time), from the server's store. */
function deploymentsSince(
  w: ProcessWorld,
  since: string,
): { id: string; kind: string; status: string; reason: string | null }[] {
  const db = new DatabaseSync(join(w.dataDir, "denv.sqlite"), { readOnly: true });
  try {
    db.exec("PRAGMA busy_timeout = 5000");
    return db
      .prepare("select id, kind, status, reason from deployments where created_at >= ?")
      .all(since) as unknown as { id: string; kind: string; status: string; reason: string | null }[];
  } finally {
    db.close();
  }
}

/**
 * What disagrees between the server, denvd and the engine, with no operation in flight: every
 * environment the server holds is a stack on the host in the matching state and every stack is held
 * by one; every version likewise; every labelled container belongs to a stack; nothing is paused
 * but a verified agent recorded frozen on both sides.
 */
export function disagreements(w: ProcessWorld): { problems: string[]; frozen: number; orphans: number } {
  const problems: string[] = [];
  let frozen = 0;
  let orphans = 0;
  const server = serverRecords(w);
  const host = w.hostState();
  const engine = w.engine();
  if (server.running.length) problems.push(`deployments still running: ${server.running.join(", ")}`);
  const held = new Set(server.envs.map((e) => e.stack_id).filter(Boolean));
  for (const e of server.envs) {
    if (!e.stack_id) {
      if (!["failed", "pending"].includes(e.status)) problems.push(`${e.name} is ${e.status} with no stack`);
      continue;
    }
    const s = host.stacks[e.stack_id];
    if (!s) {
      if (e.status !== "lost")
        problems.push(`${e.name} (${e.status}) has no stack ${e.stack_id} on the host`);
      continue;
    }
    const frozenOnHost = (s.frozen ?? []).length > 0;
    const want = s.status === "running" ? (frozenOnHost ? "frozen" : "running") : s.status;
    if (e.status !== want) problems.push(`${e.name} is ${e.status} on the server, ${want} on the host`);
  }
  for (const [id, s] of Object.entries<any>(host.stacks)) {
    if (!held.has(id)) {
      orphans++;
      problems.push(`stack ${s.name} (${id}, ${s.status}) is held by no environment on the server`);
    }
  }
  const serverVersions = new Set(server.versions);
  for (const id of Object.keys(host.versions))
    if (!serverVersions.has(id)) {
      orphans++;
      problems.push(`version ${id} is on the host but not on the server`);
    }
  for (const id of server.versions)
    if (!host.versions[id])
      problems.push(`version ${id} is on the server but its snapshots are gone from the host`);
  // Process images of a live snapshot belong to a version the host records, or to nothing.
  const live = join(w.stateDir, "live");
  for (const id of existsSync(live) ? readdirSync(live) : [])
    if (!host.versions[id]) {
      orphans++;
      problems.push(`process images of ${id} on the host, which records no such version`);
    }
  const stackOfContainer = new Map<string, { stack: string; service: string }>();
  for (const [id, s] of Object.entries<any>(host.stacks))
    for (const [svc, cid] of Object.entries<string>(s.containers))
      stackOfContainer.set(cid.slice(0, 12), { stack: id, service: svc });
  for (const c of engine.containers) {
    const owner = stackOfContainer.get(c.id.slice(0, 12));
    if (!owner) {
      orphans++;
      problems.push(`container ${c.id} (${c.state}, stack ${c.stack}) belongs to no recorded stack`);
      continue;
    }
    if (c.state === "paused") {
      const s = host.stacks[owner.stack];
      const env = server.envs.find((e) => e.stack_id === owner.stack);
      if ((s.frozen ?? []).includes(owner.service) && env?.status === "frozen") frozen++;
      else problems.push(`container of ${s.name}/${owner.service} is paused but not recorded frozen`);
    }
  }
  return { problems, frozen, orphans };
}

/** The request one round makes, against the environments the run keeps. */
async function request(
  w: ProcessWorld,
  op: DenvdTarget | ServerTarget,
  n: number,
  state: { forks: string[]; versions: string[] },
): Promise<{ status: number; data: any; ms: number }> {
  const deadline = REQUEST_DEADLINE_MS[op];
  switch (op) {
    case "deploy":
      return w.api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" }, deadline);
    case "fork":
      return w.api("POST", "/v1/envs/alpha/fork", { name: `c${n}` }, deadline);
    case "snapshot":
      // Every other one live (every service's processes too): the forks after it restore them.
      return w.api("POST", "/v1/envs/alpha/snapshot", n % 2 ? { live: true } : undefined, deadline);
    case "rollback": {
      const version = state.versions[n % state.versions.length];
      return w.api("POST", "/v1/envs/alpha/rollback", { version }, deadline);
    }
    case "verify":
      return w.api("POST", `/v1/envs/${state.forks.at(-1) ?? "alpha"}/verify`, { resume: false }, deadline);
    case "destroy":
      return w.api("DELETE", `/v1/envs/${state.forks.shift() ?? "none"}`, undefined, deadline);
  }
}

export interface ChaosOptions {
  seed: number;
  /** Rounds per operation kind. */
  perOp: number;
  /** Which process dies. */
  process: "denvd" | "server";
  /** The latest kill, in ms after the request (default: about the operation's duration, KILL_WITHIN_MS). */
  maxKillMs?: number;
  log?: (line: string) => void;
}

const DENVD_OPS: DenvdTarget[] = ["fork", "snapshot", "rollback", "verify", "destroy"];
const SERVER_OPS: ServerTarget[] = ["deploy", "fork", "snapshot", "verify", "rollback"];

/**
 * Runs the rounds. alpha must be deployed (deployAlpha). A fork is kept ahead of every verify and
 * destroy, so those always have a fresh environment to act on.
 */
export async function chaos(w: ProcessWorld, o: ChaosOptions): Promise<ChaosReport> {
  const rnd = seededRandom(o.seed);
  const log = o.log ?? (() => {});
  const rounds: Round[] = [];
  const ops = o.process === "denvd" ? DENVD_OPS : SERVER_OPS;
  const state = { forks: [] as string[], versions: [] as string[] };
  const refresh = async () => {
    const vs = await w.api("GET", "/v1/versions?project=ops-world");
    const alpha = (await w.api("GET", "/v1/envs/alpha")).data;
    state.versions = (vs.data.versions ?? [])
      .filter((v: any) => v.environment_id === alpha.id)
      .map((v: any) => v.id);
    const envs = (await w.api("GET", "/v1/envs")).data.environments ?? [];
    state.forks = envs
      .filter((e: any) => e.name !== "alpha" && ["running", "frozen"].includes(e.status))
      .map((e: any) => e.name);
  };
  let n = 0;
  for (let i = 0; i < o.perOp; i++) {
    for (const op of ops) {
      n++;
      await refresh();
      if ((op === "verify" || op === "destroy") && state.forks.length === 0) {
        const f = await w.api("POST", "/v1/envs/alpha/fork", { name: `k${n}` });
        if (f.status !== 201) throw new Error(`could not make a fork to ${op}: ${JSON.stringify(f.data)}`);
        await refresh();
      }
      const maxKill = o.maxKillMs ?? KILL_WITHIN_MS[op];
      const killAtMs = Math.round(rnd() * maxKill);
      const roundStart = new Date().toISOString();
      const t = performance.now();
      let answerMs = 0;
      const answered = request(w, op, n, state).then(
        (r) => {
          answerMs = Math.round(performance.now() - t);
          const d = r.data ?? {};
          const what = d.error?.code ?? (op === "fork" ? "" : (d.status ?? ""));
          const why = d.reason ?? d.error?.message;
          return `${r.status}${what ? ` ${what}` : ""}${why && d.status !== "succeeded" ? ` (${String(why).slice(0, 300)})` : ""}`;
        },
        (err: Error) => {
          answerMs = Math.round(performance.now() - t);
          return `no answer: ${err.name === "TimeoutError" ? "held past its deadline" : err.message}`;
        },
      );
      await new Promise((r) => setTimeout(r, killAtMs));
      if (o.process === "denvd") {
        await kill(w.denvd);
        await w.startDenvd();
      } else {
        await kill(w.server);
        await w.restartServer();
      }
      const answer = await answered;
      // An answer that came after the kill means the kill landed while the operation ran.
      const landed = answerMs > killAtMs;
      // With the server back, every deployment ends (rolled back or finished) before the check.
      const settled = await until(
        "every deployment to end",
        async () => {
          const s = disagreements(w);
          return s.problems.some((p) => p.startsWith("deployments still running")) ? undefined : s;
        },
        REQUEST_DEADLINE_MS[op],
      ).catch(() => disagreements(w));
      // Reconcile and the server's settle run as the processes connect: give them a moment to agree.
      const found = settled.problems.length
        ? await until(
            "the records to agree",
            async () => {
              const s = disagreements(w);
              return s.problems.length ? undefined : s;
            },
            30_000,
          ).catch(() => disagreements(w))
        : settled;
      const problems = [...found.problems];
      // The environment the report found frozen for good answers exec again.
      const ex = await w
        .api("POST", "/v1/envs/alpha/exec", { service: "opsbox", command: ["true"] }, 60_000)
        .catch((err: Error) => ({ status: 0, data: { error: { message: err.message } } }));
      if (ex.status !== 200 || ex.data.exit_code !== 0)
        problems.push(`exec into alpha: ${ex.status} ${JSON.stringify(ex.data).slice(0, 300)}`);
      // Every deployment of the round ended succeeded or rolled back (none merely failed).
      for (const d of deploymentsSince(w, roundStart))
        if (!["succeeded", "rolled_back"].includes(d.status))
          problems.push(`deployment ${d.id} (${d.kind}) ended ${d.status}: ${d.reason}`);
      if (answer.startsWith("no answer: held")) problems.push(`${op} was held past its deadline`);
      const round: Round = { n, process: o.process, op, killAtMs, landed, answer, answerMs, problems };
      rounds.push(round);
      log(
        `${o.process} ${op} #${n}: killed at ${killAtMs} ms${landed ? " (mid-operation)" : " (after it ended)"}; ${answer} in ${answerMs} ms${problems.length ? `; PROBLEMS: ${problems.join("; ")}` : ""}`,
      );
    }
  }
  const problems = rounds.flatMap((r) => r.problems.map((p) => `#${r.n} ${r.op}: ${p}`));
  const last = disagreements(w);
  return {
    seed: o.seed,
    rounds,
    frozen: rounds.filter((r) => r.problems.some((p) => p.includes("paused but not recorded frozen"))).length,
    held: rounds.filter((r) => r.answer.startsWith("no answer: held")).length,
    orphans: last.orphans,
    leftovers: 0,
    problems,
  };
}

/** Destroys every environment through the API and counts what is left with the owner label. */
export async function destroyAll(w: ProcessWorld): Promise<{ leftovers: number; problems: string[] }> {
  const envs = (await w.api("GET", "/v1/envs")).data.environments ?? [];
  const problems: string[] = [];
  for (const e of envs) {
    const r = await w.api("DELETE", `/v1/envs/${e.id}`);
    if (r.status !== 200 || r.data.status !== "succeeded")
      problems.push(`destroying ${e.name}: ${r.status} ${JSON.stringify(r.data).slice(0, 300)}`);
  }
  const vs = (await w.api("GET", "/v1/versions")).data.versions ?? [];
  for (const v of vs) {
    const r = await w.api("DELETE", `/v1/versions/${v.id}`);
    if (r.status >= 300)
      problems.push(`deleting ${v.id}: ${r.status} ${JSON.stringify(r.data).slice(0, 300)}`);
  }
  const engine = w.engine();
  const host = w.hostState();
  const leftovers =
    engine.containers.length +
    engine.networks +
    engine.volumes +
    Object.keys(host.stacks).length +
    Object.keys(host.versions).length;
  if (leftovers)
    problems.push(`left after destroying everything: ${JSON.stringify({ engine, host })}`.slice(0, 2000));
  return { leftovers, problems };
}
