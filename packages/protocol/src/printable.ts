/**
 * What of a container's bytes must not reach a terminal as it is: C0 controls but tab (ESC begins
 * every terminal sequence, CR and LF rewrite what is shown), DEL and C1, and the marks that reorder
 * text (bidirectional overrides, isolates, line and paragraph separators), which make a shown name
 * read as another. Every place that prints what a service or an agent wrote goes through here.
 */
const TERMINAL_CONTROLS =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: these are what is replaced
  /[\u0000-\u0008\u000a-\u001f\u007f-\u009f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** The text with each such character replaced by what `by` makes of it. */
export function replaceTerminalControls(text: string, by: (ch: string) => string): string {
  return text.replace(TERMINAL_CONTROLS, by);
}

/** A line of a container's bytes made safe to print: each such character shown as U+FFFD. */
export function printableLine(text: string): string {
  return replaceTerminalControls(text, () => "\ufffd");
}

/** Bytes as people read them: 512 B, 12.3 MiB, 4 GiB (binary units; a whole number shown whole). */
export function bytesText(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes) || bytes < 0) return "unknown";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let n = bytes;
  let u = 0;
  while (n >= 1024 && u < units.length - 1) {
    n /= 1024;
    u++;
  }
  const shown = Number.isInteger(n) || u === 0 ? String(Math.round(n)) : n.toFixed(n < 10 ? 2 : 1);
  return `${shown} ${units[u]}`;
}
