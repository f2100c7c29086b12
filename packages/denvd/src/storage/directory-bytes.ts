import { runCommand } from "./run-command.ts";

/** Apparent bytes under a directory (`du -sb`): what copying it would move. */
export async function directoryBytes(path: string): Promise<number> {
  const out = await runCommand("du", ["-sb", path]);
  return Number(out.split(/\s/)[0]) || 0;
}
