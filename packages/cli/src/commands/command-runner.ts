/**
 * What every command that talks to a server shares: the client from the global options, errors
 * mapped to exit codes, and the phase log of a deployment (printed, or followed live).
 */
import { printableLine } from "@denv/protocol/printable";
import type { DenvClient, Operations } from "@denv/sdk";
import type { Command } from "commander";
import { clientFrom } from "../config.ts";
import { reportError } from "../output.ts";

export type Deployment = Operations["getV1DeploymentsById"]["response"];
type Phase = Deployment["phases"][number];
export interface GlobalOpts {
  server?: string;
  apiKey?: string;
  json?: boolean;
}

/** Wraps a command's action: the client from global options, errors mapped to exit codes. */
export function run<A extends unknown[]>(
  cmd: Command,
  fn: (client: () => DenvClient, json: boolean, ...args: A) => Promise<number | undefined>,
) {
  return async (...args: A) => {
    const opts = cmd.optsWithGlobals() as GlobalOpts;
    const json = opts.json === true;
    try {
      process.exitCode = (await fn(() => clientFrom(opts), json, ...args)) ?? 0;
    } catch (err) {
      process.exitCode = reportError(err, json);
    }
  };
}

function phaseLine(p: Phase): string {
  const mark = { pending: "·", running: "…", succeeded: "✓", failed: "✗", skipped: "-" }[p.status];
  const ms = p.duration_ms !== null && p.status !== "skipped" ? ` ${p.duration_ms} ms` : "";
  return `  ${mark} ${p.name.padEnd(10)}${ms}${p.reason ? `  (${p.reason})` : ""}`;
}

export function printPhaseLog(d: Deployment, withEvidence: boolean): void {
  process.stdout.write(`deployment ${d.id} (${d.kind}) ${d.status}${d.reason ? `: ${d.reason}` : ""}\n`);
  for (const p of d.phases) {
    process.stdout.write(`${phaseLine(p)}\n`);
    if (withEvidence && p.evidence !== null && p.evidence !== undefined) {
      const text = JSON.stringify(p.evidence);
      process.stdout.write(`      evidence: ${text.length > 400 ? `${text.slice(0, 400)}…` : text}\n`);
    }
  }
}

/**
 * The build log in the prepare phase's evidence: while it runs, the lines so far (a sliding
 * window: what follows the last line printed); once done, the rest of each build's tail.
 */
function printBuildLog(p: Phase, printed: Map<string, string>, logged: Map<string, string[]>): void {
  const ev = p.evidence as {
    building?: Record<string, string[]>;
    builds?: Record<string, { built: boolean; log_tail: string[] }>;
  } | null;
  const done = `${p.name}:log-done`;
  if (printed.has(done)) return;
  const building =
    p.status === "running"
      ? ev?.building
      : ev?.builds &&
        Object.fromEntries(
          Object.entries(ev.builds)
            .filter(([, b]) => b.built)
            .map(([svc, b]) => [svc, b.log_tail]),
        );
  if (!building) return;
  if (p.status !== "running") printed.set(done, "");
  for (const [service, lines] of Object.entries(building)) {
    const seen = logged.get(service) ?? [];
    const at = seen.length ? lines.lastIndexOf(seen[seen.length - 1] as string) : -1;
    for (const line of lines.slice(at + 1)) process.stdout.write(`      ${service} | ${line}\n`);
    logged.set(service, lines);
  }
}

/**
 * Follows a deployment's phases live, printing each change; resolves to the final deployment.
 * Ctrl-C, or a server lost on the way, stops the following, not the deployment: the user is told
 * how to pick it up again.
 */
export async function follow(client: DenvClient, id: string, json: boolean): Promise<Deployment> {
  const again = `deployment ${id} goes on without you: follow it again with \`denv deployment follow ${id}\`, or stop it with \`denv deployment cancel ${id}\``;
  const interrupted = () => {
    process.stderr.write(`\nstopped following; ${again}\n`);
    process.exit(130);
  };
  process.once("SIGINT", interrupted);
  try {
    return await followPhases(client, id, json);
  } catch (err) {
    process.stderr.write(`denv: ${again} (or see it: denv deployment show ${id})\n`);
    throw err;
  } finally {
    process.off("SIGINT", interrupted);
  }
}

async function followPhases(client: DenvClient, id: string, json: boolean): Promise<Deployment> {
  const printed = new Map<string, string>();
  // A build's log, shown as it comes (the prepare phase's evidence holds its last lines).
  const logged = new Map<string, string[]>();
  let last: Deployment | undefined;
  for await (const d of client.deploymentEvents(id)) {
    last = d;
    if (json) continue;
    for (const p of d.phases) {
      if (p.status === "pending") continue;
      const line = phaseLine(p);
      const say = () => {
        if (printed.get(p.name) === line) return;
        printed.set(p.name, line);
        process.stdout.write(`${line}\n`);
      };
      // A running phase's line comes before its log; a finished one's after the rest of it.
      if (p.status === "running") say();
      printBuildLog(p, printed, logged);
      say();
    }
  }
  const d = last ?? (await client.deployments.get(id));
  if (!json) warnOutsideVolumes(d);
  return d;
}

interface SnapshotSays {
  outside_volumes?: Record<string, { paths: number; examples: string[] }>;
  live?: { services: Record<string, unknown>; skipped: Record<string, string> };
}

const snapshotEvidence = (d: Deployment) =>
  d.phases.find((p) => p.name === "snapshot")?.evidence as SnapshotSays | null;

/**
 * The services a live snapshot kept the processes of (and those kept disk-only, with why); null
 * for a snapshot of volumes only.
 */
export function liveOf(d: Deployment): string | null {
  const live = snapshotEvidence(d)?.live;
  if (!live) return null;
  const skipped = Object.entries(live.skipped).map(([svc, why]) => `${svc} disk-only: ${printableLine(why)}`);
  return [Object.keys(live.services).join(", ") || "none", ...skipped].join("; ");
}

/**
 * A version keeps its volumes (a live one also its services' layers): files a service wrote elsewhere (its container's own layer) are not
 * in it nor in its forks. Said on stderr after a deployment whose snapshot saw some.
 */
export function warnOutsideVolumes(d: Deployment): void {
  const ev = snapshotEvidence(d);
  for (const [svc, w] of Object.entries(ev?.outside_volumes ?? {}))
    if (!ev?.live?.services[svc])
      process.stderr.write(
        `warning: ${svc} wrote ${w.paths} path${w.paths === 1 ? "" : "s"} outside its volumes (${w.examples.map((e) => printableLine(e)).join(", ")}${w.paths > w.examples.length ? ", …" : ""}): a version keeps volumes only, so this version and its forks do not have them; declare a volume where they belong\n`,
      );
}
