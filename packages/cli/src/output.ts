/** How commands print: JSON for scripts (--json), plain lines for people, errors on stderr. */
import { DenvError } from "@denv/spec";

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Raised by commands for a usage problem (exit 2), e.g. a missing file argument. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** Maps any error to an exit code and a message on stderr (or a JSON error on stdout with --json). */
export function reportError(err: unknown, json: boolean): number {
  if (err instanceof UsageError) {
    if (json) printJson({ ok: false, error: { code: "invalid_argument", message: err.message } });
    else process.stderr.write(`error: ${err.message}\n`);
    return 2;
  }
  if (err instanceof DenvError) {
    if (json) printJson({ ok: false, ...err.toJSON() });
    else process.stderr.write(`error: ${err.message}\n`);
    return err.exitCode;
  }
  const message = err instanceof Error ? err.message : String(err);
  if (json) printJson({ ok: false, error: { code: "internal", message } });
  else process.stderr.write(`error: ${message}\n`);
  return 1;
}
