/**
 * `denv logs ENV`: what the environment's services wrote, as `docker compose logs` shows it
 * ("service | line", the service names aligned), the last --tail lines of each or those --since a
 * time, and with --follow the lines written from then on, until Ctrl-C. --json prints the API's
 * lines as they are. The lines are a container's bytes: printed for people, their control
 * characters are shown as U+FFFD, so a service cannot drive the terminal that reads them.
 */
import { printableLine } from "@denv/protocol";
import type { LogLine } from "@denv/sdk";
import type { Command } from "commander";
import { run } from "./command-runner.ts";

/** "service | line" with the service padded to `width` (and the time first, when asked for). */
export function logLineText(l: LogLine, width: number, timestamps: boolean): string {
  return `${l.service.padEnd(width)} | ${timestamps && l.time ? `${l.time} ` : ""}${printableLine(l.line)}`;
}

export function registerLogsCommand(program: Command): void {
  const logs = program
    .command("logs")
    .description("What an environment's services wrote (every service, or --service), as docker compose logs")
    .argument("<env>")
    .option("--service <name>", "one service's lines")
    .option("-f, --follow", "go on with lines as they are written, until Ctrl-C")
    .option("--tail <n>", "the last N lines of each service")
    .option("--since <when>", "lines from a time (2026-12-06T14:00:00Z) or a duration back (90s, 10m, 2h)")
    .option("-t, --timestamps", "show each line's time")
    .option("--json", "print the API's lines as they are (NDJSON)")
    .addHelpText(
      "after",
      "\nExamples:\n  denv logs shop/alpha --tail 50\n  denv logs rollout-017 --service web -f",
    );
  logs.action(
    run(
      logs,
      async (
        client,
        json,
        env: string,
        o: { service?: string; follow?: boolean; tail?: string; since?: string; timestamps?: boolean },
      ) => {
        if (o.tail !== undefined && !/^\d{1,6}$/.test(o.tail))
          throw new Error(`--tail ${o.tail}: a count of lines (0 to 999999)`);
        const stop = new AbortController();
        const interrupted = () => stop.abort();
        process.once("SIGINT", interrupted);
        let width = o.service?.length ?? 0;
        try {
          await client().logs(
            env,
            {
              ...(o.service ? { service: o.service } : {}),
              ...(o.tail !== undefined ? { tail: Number(o.tail) } : {}),
              ...(o.since ? { since: o.since } : {}),
              follow: o.follow === true,
              signal: stop.signal,
            },
            (l) => {
              width = Math.max(width, l.service.length);
              const text = json ? JSON.stringify(l) : logLineText(l, width, o.timestamps === true);
              if (!process.stdout.write(`${text}\n`))
                return new Promise<void>((resolve) => process.stdout.once("drain", () => resolve()));
            },
          );
        } finally {
          process.off("SIGINT", interrupted);
        }
        return 0;
      },
    ),
  );
}
