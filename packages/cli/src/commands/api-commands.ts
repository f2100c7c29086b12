/**
 * The commands that talk to a denv server through the SDK: login here; project and deploy,
 * environments (fork, snapshot, rollback, verify, env, deployment), exec and files, hosts and
 * clouds each in their own module. Every one takes --json; human output shows progress for
 * anything long; errors say what to do next.
 */
import { DenvClient } from "@denv/sdk";
import type { Command } from "commander";
import { readConfig, writeConfig } from "../config.ts";
import { printJson, UsageError } from "../output.ts";
import { type GlobalOpts, run } from "./command-runner.ts";
import { registerEnvironmentCommands } from "./environment-commands.ts";
import { registerExecCommands } from "./exec-commands.ts";
import { registerExportCommands } from "./export-commands.ts";
import { registerFidelityCommands } from "./fidelity-commands.ts";
import { registerFileCommands } from "./file-commands.ts";
import { registerHostCommands } from "./host-commands.ts";
import { registerImportCommands } from "./import-commands.ts";
import { registerPoolCommands } from "./pool-commands.ts";
import { registerProjectCommands } from "./project-commands.ts";
import { registerVersionCommands } from "./version-commands.ts";

export { printPhaseLog } from "./command-runner.ts";

export function registerApiCommands(program: Command): void {
  program.option("--server <url>", "the denv server (default: DENV_SERVER, then `denv login`'s)");
  program.option("--api-key <key>", "the API key (default: DENV_API_KEY, then `denv login`'s)");

  const login = program
    .command("login")
    .description("Save the server and API key this CLI uses, after checking them")
    .option("--json", "print JSON");
  login.action(
    run(login, async (_c, json) => {
      const o = login.optsWithGlobals() as GlobalOpts;
      const server = o.server ?? process.env.DENV_SERVER ?? readConfig().server;
      const apiKey = o.apiKey ?? process.env.DENV_API_KEY;
      if (!server) throw new UsageError("give --server URL (`denv up` prints it)");
      if (!apiKey) throw new UsageError("give --api-key KEY or set DENV_API_KEY (`denv up` prints the key)");
      const client = new DenvClient({ baseUrl: server, apiKey });
      const hosts = await client.call("getV1Hosts", {});
      const path = writeConfig({ server, api_key: apiKey });
      if (json) printJson({ ok: true, server, config: path, hosts: hosts.hosts.length });
      else process.stdout.write(`logged in to ${server} (${hosts.hosts.length} host(s)); saved to ${path}\n`);
      return 0;
    }),
  );
  login.addHelpText("after", "\nExample:\n  denv login --server http://127.0.0.1:7070 --api-key dk_...");

  registerProjectCommands(program);
  registerEnvironmentCommands(program);
  registerExecCommands(program);
  registerFileCommands(program);
  registerHostCommands(program);
  registerPoolCommands(program);
  registerFidelityCommands(program);
  registerVersionCommands(program);
  registerImportCommands(program);
  registerExportCommands(program);
}
