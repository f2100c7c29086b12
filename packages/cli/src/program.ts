import { Command } from "commander";
import { registerApiCommands } from "./commands/api-commands.ts";
import { registerCompletionCommand } from "./commands/completion-command.ts";
import { registerInit } from "./commands/init.ts";
import { registerMcpCommand } from "./commands/mcp-command.ts";
import { registerServer } from "./commands/server.ts";
import { registerUp } from "./commands/up.ts";
import { registerValidate } from "./commands/validate.ts";

export const CLI_VERSION = "0.1.0";

/** Builds the `denv` command tree. Usage errors exit 2 (see main.ts). */
export function buildProgram(): Command {
  const program = new Command("denv")
    .description("denv: versioned, forkable environments for agents and reinforcement learning")
    .version(CLI_VERSION)
    .exitOverride()
    .showHelpAfterError("(run with --help for usage)")
    .configureOutput({ outputError: (text, write) => write(text) });
  registerInit(program);
  registerValidate(program);
  registerServer(program);
  registerApiCommands(program);
  registerUp(program);
  registerMcpCommand(program, CLI_VERSION);
  registerCompletionCommand(program);
  program.addHelpText(
    "after",
    `
Exit codes:
  0  success
  1  the operation failed, or the input was refused (the message says why)
  2  usage error (unknown command or option, missing argument)`,
  );
  return program;
}
