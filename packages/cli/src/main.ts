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
