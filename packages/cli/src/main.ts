import { CommanderError } from "commander";
import { reportError } from "./output.ts";
import { buildProgram } from "./program.ts";

/**
 * Runs the denv CLI with the given arguments and resolves to its exit code.
 * Exit codes: 0 success, 1 the operation failed or refused the input, 2 usage error.
 */
export async function main(argv: string[]): Promise<number> {
  // `denv ... | head` closes the pipe early; that is not an error.
  process.stdout.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code === "EPIPE") process.exit(0);
  });
  const program = buildProgram();
  // `denv replay --help` would print the top-level help and exit 0, as if replay were a command.
  const word = commandWord(argv);
  const known = (name: string) =>
    name === "help" || program.commands.some((c) => c.name() === name || c.aliases().includes(name));
  if (word !== undefined && !known(word) && (argv.includes("--help") || argv.includes("-h"))) {
    process.stderr.write(
      `error: unknown command '${word.slice(0, 64)}'\n(run denv --help for the commands)\n`,
    );
    return 2;
  }
  try {
    await program.parseAsync(argv, { from: "user" });
    return typeof process.exitCode === "number" ? process.exitCode : 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version end through here with exit code 0; usage errors with 2.
      return err.exitCode === 0 ? 0 : 2;
    }
    return reportError(err, argv.includes("--json"));
  }
}

/** The command word of argv: its first argument that is not a global option or an option's value. */
function commandWord(argv: string[]): string | undefined {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string;
    if (a === "--") return argv[i + 1];
    if (a === "--server" || a === "--api-key") i++;
    else if (!a.startsWith("-")) return a;
  }
  return undefined;
}
