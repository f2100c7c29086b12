import { execFile } from "node:child_process";
import { DenvError } from "@denv/protocol";

/** Runs a host command (btrfs, zfs, cp, mount) and returns its stdout; failures become storage_error. */
export function runCommand(
  file: string,
  args: string[],
  options: { timeoutMs?: number } = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      file,
      args,
      { encoding: "utf8", timeout: options.timeoutMs ?? 120_000, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (err) {
          const detail = (stderr || err.message).trim().split("\n").slice(-3).join(" | ");
          reject(
            new DenvError("storage_error", `${file} ${args.join(" ")} failed: ${detail}`, { cause: err }),
          );
        } else resolve(stdout);
      },
    );
  });
}
