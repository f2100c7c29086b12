/** API keys of the team: made (in denv's form or E2B's), listed, revoked. */
import type { Command } from "commander";
import { ageOf, printJson, printTable } from "../output.ts";
import { run } from "./command-runner.ts";

export function registerKeyCommands(program: Command): void {
  const key = program.command("key").description("API keys of your team");
  const create = key
    .command("create")
    .description("Make a key with your role in the team; it is shown once and stored hashed")
    .requiredOption("--name <name>", "what the key is for")
    .option("--e2b", "in E2B's form (e2b_ and 40 hex digits), for E2B's SDKs pointed at denv's /e2b")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv key create --name rollouts --e2b    # then E2B_API_KEY=<it>, E2B_API_URL=$DENV_SERVER/e2b",
    );
  create.action(
    run(create, async (client, json) => {
      const o = create.opts<{ name: string; e2b?: boolean }>();
      const r = await client().keys.create({ name: o.name, ...(o.e2b ? { format: "e2b" as const } : {}) });
      if (json) printJson(r);
      else process.stdout.write(`${r.key}\n`);
      return 0;
    }),
  );
  const list = key
    .command("list")
    .description("Keys: a team admin sees the team's, anyone else their own")
    .option("--json", "print JSON");
  list.action(
    run(list, async (client, json) => {
      const r = await client().keys.list();
      if (json) printJson(r);
      else {
        printTable(
          ["ID", "NAME", "PREFIX", "ROLE", "CREATED", ""],
          r.keys.map((k) => [
            k.id,
            k.name,
            k.prefix,
            k.role,
            ageOf(k.created_at),
            k.current ? "(this one)" : "",
          ]),
        );
      }
      return 0;
    }),
  );
  const revoke = key
    .command("revoke <id>")
    .description("Revoke a key (its sandboxes made through /e2b stop answering)")
    .option("--json", "print JSON");
  revoke.action(
    run(revoke, async (client, json, id: string) => {
      const r = await client().keys.revoke(id);
      if (json) printJson(r);
      else process.stdout.write(`revoked ${r.id}\n`);
      return 0;
    }),
  );
}
