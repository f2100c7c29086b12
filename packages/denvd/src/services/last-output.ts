/**
 * A service's last lines of output, for the error that says it failed: what a user would run
 * `docker logs --tail` for. The bytes are the container's, so they are bounded (lines, and
 * characters per line) and made safe to print: a terminal control sequence in a service's output
 * must not reach the user's terminal through denv's error message.
 */
import { printableLine } from "@denv/protocol";
import type { ContainerRuntime } from "../runtime/container-runtime.ts";

/** How many of a failed service's last lines an error carries. */
export const LAST_LINES = 20;
const MAX_LINE_CHARS = 300;

/** The last `maxLines` lines of text, each cut to MAX_LINE_CHARS, control characters shown as U+FFFD. */
export function tailLines(bytes: Buffer, maxLines = LAST_LINES): string[] {
  const lines = bytes
    .toString("utf8")
    .replace(/\r\n/g, "\n")
    .split("\n")
    .map((l) => l.replace(/\r/g, ""));
  while (lines.length && lines.at(-1) === "") lines.pop();
  return lines.slice(-maxLines).map((l) => {
    const safe = printableLine(l);
    return safe.length > MAX_LINE_CHARS ? `${safe.slice(0, MAX_LINE_CHARS)}…` : safe;
  });
}

/** A container's last lines of output (stdout and stderr as written); none when it cannot be read. */
export async function lastOutputLines(runtime: ContainerRuntime, containerId: string): Promise<string[]> {
  try {
    return tailLines((await runtime.containerLogs(containerId, { tailLines: LAST_LINES })).combined);
  } catch {
    // Unreadable (the container is gone already): the error says what it can without them.
    return [];
  }
}

/** The lines as an error message's ending: "; its last output:\n  …", or nothing when there is none. */
export function outputEnding(lines: string[]): string {
  return lines.length ? `; its last output:\n${lines.map((l) => `  ${l}`).join("\n")}` : "; it wrote nothing";
}
