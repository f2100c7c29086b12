import { DenvError } from "@denv/protocol";
import { type HostCommandResult, runHostBuiltin, runHostCommand } from "../host/host-command.ts";

const DEFAULT_TIMEOUT_MS = 120_000;

/** Runs a host command (btrfs, zfs, cp, mount) and returns its stdout; failures become storage_error. */
export async function runCommand(
  file: string,
  args: string[],
  options: { timeoutMs?: number } = {},
): Promise<string> {
  return runEither(null, file, args, options);
}

/**
 * Runs a host agent's built-in operation (`builtin`: its name and arguments) where the host agent
 * does it, else the command that does the same; either way its stdout, and a failure is a
 * storage_error naming the command.
 */
export async function runBuiltinOrCommand(
  builtin: { name: string; args: string[] },
  file: string,
  args: string[],
  options: { timeoutMs?: number } = {},
): Promise<string> {
  return runEither(builtin, file, args, options);
}

async function runEither(
  builtin: { name: string; args: string[] } | null,
  file: string,
  args: string[],
  options: { timeoutMs?: number },
): Promise<string> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const failed = (detail: string, cause?: unknown) =>
    new DenvError("storage_error", `${file} ${args.join(" ")} failed: ${detail}`, { cause });
  let r: HostCommandResult;
  try {
    r =
      (builtin && (await runHostBuiltin(builtin.name, builtin.args, { timeoutMs }))) ||
      (await runHostCommand(file, args, { timeoutMs }));
  } catch (err) {
    throw failed((err as Error).message, err);
  }
  if (r.exitCode === 0 && !r.timedOut) return r.stdout;
  const said = r.stderr.trim().split("\n").slice(-3).join(" | ");
  throw failed(r.timedOut ? `timed out after ${timeoutMs} ms` : said || `exit status ${r.exitCode}`);
}
