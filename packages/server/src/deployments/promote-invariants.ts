/**
 * The invariants gate of a promote: the candidate version against the one the target runs now.
 * Nothing deleted (services, volumes, verifier, collected paths, warm commands), nothing disabled
 * (healthchecks), nothing silenced or loosened (caps, egress, the clock). Each check is listed
 * with what it found; the gate passes when none failed. Pure: two specs in, the checks out.
 */
import type { ResolvedSpec } from "@denv/protocol";

export interface InvariantCheck {
  check: string;
  ok: boolean;
  /** What was found: the names removed, the cap raised, … (empty when ok). */
  found: string[];
}

const names = (o: Record<string, unknown>) => Object.keys(o).sort();
const removed = (before: string[], after: string[]) => before.filter((x) => !after.includes(x));

function hasHealthcheck(spec: ResolvedSpec, svc: string): boolean {
  const s = spec.services[svc];
  if (!s || s.healthcheck_disabled || !s.healthcheck) return false;
  return s.healthcheck.test[0] !== "NONE";
}

export function promoteInvariants(current: ResolvedSpec, candidate: ResolvedSpec): InvariantCheck[] {
  const checks: InvariantCheck[] = [];
  const add = (check: string, found: string[]) => checks.push({ check, ok: found.length === 0, found });
  add("no service removed", removed(names(current.services), names(candidate.services)));
  add("no volume removed", removed(names(current.datasets), names(candidate.datasets)));
  add(
    "no healthcheck removed or disabled",
    names(current.services)
      .filter(
        (svc) => candidate.services[svc] && hasHealthcheck(current, svc) && !hasHealthcheck(candidate, svc),
      )
      .map((svc) => `service ${svc} had a healthcheck and has none`),
  );
  add("the verifier kept", current.verifier && !candidate.verifier ? ["x-denv.verifier was removed"] : []);
  add(
    "no collected path removed",
    removed(current.verifier?.collect ?? [], candidate.verifier?.collect ?? []).map((p) => `collect ${p}`),
  );
  add(
    "no warm command removed",
    current.warm
      .filter(
        (w) =>
          !candidate.warm.some(
            (c) => c.service === w.service && JSON.stringify(c.command) === JSON.stringify(w.command),
          ),
      )
      .map((w) => `${w.service}: ${JSON.stringify(w.command)}`),
  );
  const loosened: string[] = [];
  for (const svc of names(current.services)) {
    const a = current.services[svc]?.caps;
    const b = candidate.services[svc]?.caps;
    if (!a || !b) continue;
    if (b.memory_bytes > a.memory_bytes)
      loosened.push(`${svc}: memory ${a.memory_bytes} → ${b.memory_bytes} bytes`);
    if (b.pids > a.pids) loosened.push(`${svc}: pids ${a.pids} → ${b.pids}`);
    if (b.cpus > a.cpus) loosened.push(`${svc}: cpus ${a.cpus} → ${b.cpus}`);
  }
  add("no cap loosened", loosened);
  add(
    "egress not widened",
    current.egress === "deny" && candidate.egress === "allow" ? ["x-denv.egress deny → allow"] : [],
  );
  add(
    "the clock not loosened",
    current.clock !== "real" && candidate.clock === "real"
      ? [`x-denv.clock ${current.clock} → real`]
      : current.clock === "frozen-strict" && candidate.clock === "frozen"
        ? ["x-denv.clock frozen-strict → frozen"]
        : [],
  );
  return checks;
}
