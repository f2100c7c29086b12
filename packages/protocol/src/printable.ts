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
