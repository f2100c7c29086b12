/**
 * One timeout policy for commands, end to end. The caller's timeout for a command (SDKs, CLI, MCP,
 * Python, the adapters) travels unchanged to denvd, which kills the command's process tree when it
 * passes and answers with `timed_out` and the output so far. Every layer between waits for the
 * command's own deadline plus a margin for the round trip, never a limit of its own; streams carry
 * a keep-alive while a command is quiet, so no transport cuts one that is still running, and a
 * client's wait that does run out answers `timeout`, never `unavailable`.
 */

/** The longest a command may be given (RL episodes run for hours). */
export const MAX_COMMAND_TIMEOUT_MS = 24 * 3600_000;

/** What every layer adds to a command's own deadline for the answer's round trip. */
export const DEADLINE_MARGIN_MS = 60_000;

/** How often a quiet command's stream carries a keep-alive (an empty frame or line). */
export const KEEPALIVE_INTERVAL_MS = 15_000;

/**
 * How long a layer between the caller and denvd waits for a command's answer: its own timeout
 * (or the longest one may have) plus the margin.
 */
export function commandDeadlineMs(timeoutMs?: number | null): number {
  return Math.min(timeoutMs ?? MAX_COMMAND_TIMEOUT_MS, MAX_COMMAND_TIMEOUT_MS) + DEADLINE_MARGIN_MS;
}
