/**
 * The commands that talk to a denv server through the SDK: login and logout; project and deploy,
 * environments (fork, snapshot, rollback, verify, env, deployment), exec and files, hosts and
 * clouds each in their own module. Every one takes --json; human output shows progress for
 * anything long; errors say what to do next.
 */
import type { Command } from "commander";
import { registerDiffCommand } from "./diff-command.ts";
import { registerEnvironmentCommands } from "./environment-commands.ts";
import { registerExecCommands } from "./exec-commands.ts";
import { registerExportCommands } from "./export-commands.ts";
import { registerFidelityCommands } from "./fidelity-commands.ts";
import { registerFileCommands } from "./file-commands.ts";
import { registerGithubCommands } from "./github-commands.ts";
import { registerHostCommands } from "./host-commands.ts";
import { registerImportCommands } from "./import-commands.ts";
import { registerKeyCommands } from "./key-commands.ts";
import { registerLoginCommands } from "./login-commands.ts";
import { registerLogsCommand } from "./logs-command.ts";
import { registerMemberCommands } from "./member-commands.ts";
import { registerPoolCommands } from "./pool-commands.ts";
import { registerPortCommand } from "./port-command.ts";
import { registerProjectCommands } from "./project-commands.ts";
import { registerVersionCommands } from "./version-commands.ts";

export { printPhaseLog } from "./command-runner.ts";

export function registerApiCommands(program: Command): void {
  program.option("--server <url>", "the denv server (default: DENV_SERVER, then `denv login`'s)");
  program.option("--api-key <key>", "the API key (default: DENV_API_KEY, then `denv login`'s)");

  registerLoginCommands(program);
  registerProjectCommands(program);
  registerEnvironmentCommands(program);
  registerDiffCommand(program);
  registerExecCommands(program);
  registerLogsCommand(program);
  registerFileCommands(program);
  registerHostCommands(program);
  registerGithubCommands(program);
  registerKeyCommands(program);
  registerMemberCommands(program);
  registerPortCommand(program);
  registerPoolCommands(program);
  registerFidelityCommands(program);
  registerVersionCommands(program);
  registerImportCommands(program);
  registerExportCommands(program);
}
