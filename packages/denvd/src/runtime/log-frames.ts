/**
 * The engine's log stream for a container without a TTY: frames of an 8-byte header (byte 0 the
 * stream, 1 stdout and 2 stderr; bytes 4–7 the length, big-endian) and that many bytes, each one
 * entry the engine kept, with `timestamps` its time first ("2026-12-06T14:00:00.123456789Z line").
 * Frames arrive cut anywhere by the socket: what is not whole yet waits for the next chunk.
 */
import type { LogEntry } from "./container-runtime.ts";

/** The most of one entry kept: the engine splits longer lines at 16 KiB itself. */
const MAX_ENTRY_BYTES = 64 * 1024;

export class LogFrames {
  private pending: Buffer = Buffer.alloc(0);

  /** The whole entries in what came so far (with `chunk`), in order. */
  push(chunk: Buffer): LogEntry[] {
    this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    const out: LogEntry[] = [];
    let at = 0;
    while (at + 8 <= this.pending.length) {
      const size = this.pending.readUInt32BE(at + 4);
      if (at + 8 + size > this.pending.length) break;
      const kind = this.pending[at];
      const body = this.pending.subarray(at + 8, at + 8 + Math.min(size, MAX_ENTRY_BYTES));
      at += 8 + size;
      if (kind !== 1 && kind !== 2) continue;
      out.push(entryOf(kind === 2 ? "stderr" : "stdout", body.toString("utf8")));
    }
    this.pending = this.pending.subarray(at);
    return out;
  }
}

/** An entry's time and text ("TIME text"); an entry with no time keeps its text whole. */
export function entryOf(stream: LogEntry["stream"], text: string): LogEntry {
  const body = text.endsWith("\n") ? text.slice(0, -1) : text;
  const space = body.indexOf(" ");
  const time = space > 0 ? body.slice(0, space) : "";
  if (/^\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)$/.test(time))
    return { stream, time, line: body.slice(space + 1) };
  return { stream, time: "", line: body };
}

/** A container's output as the engine multiplexes it without a TTY (8-byte frames, byte 0 the stream: 1 stdout, 2 stderr), apart and together. */
export function demuxOutput(raw: Buffer): { stdout: Buffer; stderr: Buffer; combined: Buffer } {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  const both: Buffer[] = [];
  let i = 0;
  while (i + 8 <= raw.length) {
    const size = raw.readUInt32BE(i + 4);
    const frame = raw.subarray(i + 8, i + 8 + size);
    (raw[i] === 2 ? err : out).push(frame);
    both.push(frame);
    i += 8 + size;
  }
  return { stdout: Buffer.concat(out), stderr: Buffer.concat(err), combined: Buffer.concat(both) };
}

/** An engine time (RFC 3339, up to nanoseconds) in ms since the epoch; NaN when it is not one. */
export function timeMs(time: string): number {
  return Date.parse(time.replace(/(\.\d{3})\d+/, "$1"));
}
