/**
 * `denv port ENV PORT`: what `docker compose port` is to Compose, for an environment whose services
 * listen on no host port. A URL that reaches the port (HTTP and WebSocket) is made and printed
 * once (it is the credential); without a port, the environment's port URLs are listed; --revoke
 * ends them.
 */
import type { Command } from "commander";
import { ageOf, printJson, printTable, UsageError } from "../output.ts";
import { run } from "./command-runner.ts";

export function registerPortCommand(program: Command): void {
  const port = program
    .command("port")
    .description(
      "A URL that reaches a TCP port of an environment's service (shown once); without PORT, its port URLs",
    )
    .argument("<env>")
    .argument("[port]", "the port the service listens on, inside its container")
    .option("--service <name>", "the service (default: the agent's, else the first)")
    .option("--revoke", "revoke the port's URLs (all of the environment's without PORT)")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExamples:\n  denv port shop/alpha 8000 --service web    # a URL for web's port 8000\n  denv port shop/alpha                       # the port URLs made so far\n  denv port shop/alpha --revoke              # none of them answers any more",
    );
  port.action(
    run(
      port,
      async (
        client,
        json,
        env: string,
        at: string | undefined,
        o: { service?: string; revoke?: boolean },
      ) => {
        if (at !== undefined && !/^\d{1,5}$/.test(at))
          throw new UsageError(`${at}: a port is a number from 1 to 65535`);
        if (o.revoke) {
          const r =
            at === undefined ? await client().envs.revokePorts(env) : await client().envs.revokePort(env, at);
          if (json) printJson(r);
          else process.stdout.write(`revoked ${r.revoked} port URL(s)\n`);
          return 0;
        }
        if (at === undefined) {
          const r = await client().envs.ports(env);
          if (json) printJson(r);
          else
            printTable(
              ["PORT", "SERVICE", "AGE", "ID"],
              r.ports.map((p) => [String(p.port), p.service ?? "-", ageOf(p.created_at), p.id]),
            );
          return 0;
        }
        const r = await client().envs.openPort(env, at, o.service ? { service: o.service } : {});
        if (json) printJson(r);
        else {
          process.stdout.write(`${r.url}\n`);
          if (r.ingress_url)
            process.stderr.write(`its ingress name (with the environment's token): ${r.ingress_url}\n`);
        }
        return 0;
      },
    ),
  );
}
