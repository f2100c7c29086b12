/** How commands print: JSON for scripts (--json), plain lines for people, errors on stderr. */

import { DenvError, ERROR_CODES, type ErrorCode } from "@denv/protocol/errors";
import { printableLine } from "@denv/protocol/printable";
import { DenvApiError } from "@denv/sdk";

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Raised by commands for a usage problem (exit 2), e.g. a missing file argument. */
export class UsageError extends Error {
  override name = "UsageError";
}

const HINTS: Partial<Record<string, string>> = {
  unauthenticated: "check the key: `denv login`",
  unavailable: "is the server up? (`denv up` starts a local one)",
};

/** The list that shows what exists of the noun a not-found names ("no version …"). */
const LISTS: Record<string, string> = {
  environment: "denv env list",
  version: "denv version list",
  project: "denv project list",
  deployment: "denv deployment list",
  host: "denv host list",
};

/**
 * What to do next after an error: for a not-found, the list of the noun it names (none when it
 * names no noun of a list, e.g. a service, whose message lists the ones there are).
 */
export function hintFor(code: string, message: string): string | undefined {
  if (code !== "not_found") return HINTS[code];
  const noun = /^no (environment|version|project|deployment|host)\b/.exec(message)?.[1];
  return noun ? `\`${LISTS[noun]}\` shows what exists` : undefined;
}

/** Rows under a header, each column as wide as its widest cell (the last one left ragged). */
export function tableText(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd();
  return `${[header, ...rows].map(line).join("\n")}\n`;
}

export function printTable(header: string[], rows: string[][]): void {
  // A cell is one line of printable text: what a server or a host named cannot move the cursor.
  const cells = rows.map((r) => r.map((c) => printableLine(c)));
  process.stdout.write(rows.length ? tableText(header, cells) : "none\n");
}

/** A bar of how much of something is done: [########------------] 8/20 forks. */
export function progressBar(done: number, total: number, what: string, width = 20): string {
  const filled = total > 0 ? Math.min(width, Math.round((done / total) * width)) : 0;
  return `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${done}/${total} ${what}`;
}

/**
 * Progress on stderr while a command waits: a bar redrawn in place on a terminal, a line per
 * change otherwise (a log keeps every step); `end()` leaves the last one standing.
 */
export function progressReporter(what: string): { show(done: number, total: number): void; end(): void } {
  const tty = process.stderr.isTTY === true;
  let last = "";
  return {
    show(done, total) {
      const line = progressBar(done, total, what);
      if (line === last) return;
      last = line;
      process.stderr.write(tty ? `\r${line}` : `${line}\n`);
    },
    end() {
      if (tty && last) process.stderr.write("\n");
    },
  };
}

/** How long ago a time was, as people say it in a table: 42s, 5m, 3h, 2d (a bad or future time: -). */
export function ageOf(iso: string, nowMs = Date.now()): string {
  const ms = nowMs - Date.parse(iso);
  if (!Number.isFinite(ms) || ms < -60_000) return "-";
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

/** Maps any error to an exit code and a message on stderr (or a JSON error on stdout with --json). */
export function reportError(err: unknown, json: boolean): number {
  if (err instanceof UsageError) {
    if (json) printJson({ ok: false, error: { code: "invalid_argument", message: err.message } });
    else process.stderr.write(`error: ${err.message}\n`);
    return 2;
  }
  if (err instanceof DenvError || err instanceof DenvApiError) {
    if (json) printJson({ ok: false, error: { code: err.code, message: err.message } });
    else {
      const hint = hintFor(err.code, err.message);
      process.stderr.write(
        `error: ${err.message}${hint && !err.message.includes("`") ? `\n  ${hint}` : ""}\n`,
      );
    }
    const table = ERROR_CODES as Record<string, { exitCode: number }>;
    return err.code === "invalid_argument" ? 2 : (table[err.code as ErrorCode]?.exitCode ?? 1);
  }
  const message = err instanceof Error ? err.message : String(err);
  if (json) printJson({ ok: false, error: { code: "internal", message } });
  else process.stderr.write(`error: ${message}\n`);
  return 1;
}
