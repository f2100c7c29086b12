/**
 * `denv env egress ENV`: an environment's egress policy and its log (every connection through its
 * proxy); with --allow/--deny (or --none), the policy replaced while it runs. docs/egress.md.
 */
import type { Command } from "commander";
import { printJson, printTable } from "../output.ts";
import { run } from "./command-runner.ts";

/** Records shown without --json: the last ones. */
const SHOWN = 20;

export function registerEgressCommand(env: Command): void {
  const c = env
    .command("egress")
    .description(
      "An environment's egress policy and its log; with --allow/--deny, the policy replaced while it runs (open connections it no longer allows close)",
    )
    .argument("<env>")
    .option(
      "--allow <rule...>",
      "destinations to allow: name, *.name, a.b.c.d[/len], each [:port] (default ports 80 and 443)",
    )
    .option("--deny <rule...>", "destinations to refuse (deny wins)")
    .option("--none", "allow nothing: an empty allow list")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExamples:\n  denv env egress rollout-017\n  denv env egress rollout-017 --allow pkg.mirror.test '*.code-host.test' --deny secrets.code-host.test",
    );
  c.action(
    run(c, async (client, json, ref: string) => {
      const o = c.opts<{ allow?: string[]; deny?: string[]; none?: boolean }>();
      if (o.allow || o.deny || o.none) {
        const r = await client().envs.setEgress(ref, {
          allow: o.none ? [] : (o.allow ?? []),
          deny: o.deny ?? [],
        });
        if (json) printJson(r);
        else
          process.stdout.write(
            `egress of ${ref}: allow ${r.policy.allow.join(", ") || "nothing"}${r.policy.deny.length ? `; deny ${r.policy.deny.join(", ")}` : ""}${r.closed ? ` (${r.closed} open connection${r.closed === 1 ? "" : "s"} closed)` : ""}\n`,
          );
        return 0;
      }
      const r = await client().envs.egress(ref);
      if (json) {
        printJson(r);
        return 0;
      }
      process.stdout.write(
        r.policy
          ? `policy: allow ${r.policy.allow.join(", ") || "nothing"}${r.policy.deny.length ? `; deny ${r.policy.deny.join(", ")}` : ""}\n`
          : "no egress policy (deployed with egress deny or allow)\n",
      );
      const shown = r.records.slice(-SHOWN);
      if (shown.length)
        printTable(
          ["AT", "SERVICE", "DESTINATION", "", "RULE / WHY", "OUT", "IN"],
          shown.map((x) => [
            x.at,
            x.service ?? "-",
            x.destination,
            x.allowed ? "allowed" : "refused",
            x.allowed ? (x.rule ?? "") : x.reason,
            String(x.bytes_out),
            String(x.bytes_in),
          ]),
        );
      const more = r.earlier + r.records.length - shown.length;
      if (more) process.stdout.write(`(${more} earlier; --json for all)\n`);
      return 0;
    }),
  );
}
