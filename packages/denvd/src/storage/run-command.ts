import { DenvError } from "@denv/protocol";
import { runHostCommand } from "../host-command.ts";

/** Runs a host command (btrfs, zfs, cp, mount) and returns its stdout; failures become storage_error. */
export async function runCommand(
  file: string,
  args: string[],
  options: { timeoutMs?: number } = {},
): Promise<string> {
  const failed = (detail: string, cause?: unknown) =>
    new DenvError("storage_error", `${file} ${args.join(" ")} failed: ${detail}`, { cause });
  let r: Awaited<ReturnType<typeof runHostCommand>>;
  try {
    r = await runHostCommand(file, args, { timeoutMs: options.timeoutMs ?? 120_000 });
  } catch (err) {
    throw failed((err as Error).message, err);
  }
  if (r.exitCode === 0 && !r.timedOut) return r.stdout;
  const said = r.stderr.trim().split("\n").slice(-3).join(" | ");
  throw failed(
    r.timedOut ? `timed out after ${options.timeoutMs ?? 120_000} ms` : said || `exit status ${r.exitCode}`,
  );
}
