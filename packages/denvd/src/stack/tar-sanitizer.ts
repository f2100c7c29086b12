/**
 * Checks a tar stream before it reaches a container: entries must stay inside the directory they
 * are extracted to. Refused: absolute names, `..` components, NUL bytes, hard or symbolic links
 * whose target leaves the tree, entries (and hard links) that go through a symbolic link an earlier
 * entry made (a chain `a/b -> ..`, `a/b/c -> ..`, then `a/b/c/FILE` would land outside), entries
 * that replace such a link, and device, FIFO or other special entries. setuid and setgid bits are
 * dropped: an upload gives no one new powers.
 *
 * Every header is written anew from what was checked (one plain ustar header, with a PAX header
 * before it only for a long name, a large size or a large id), so whoever reads the output (the
 * agent, the engine, GNU tar) cannot read it differently from this check: no prefix field, GNU
 * long-name entry, global header or extended attribute passes. A file's bytes are forwarded as
 * they arrived, slices of the input's own buffers, never copied or re-packed: the check costs
 * header parsing, not a pass over the data.
 */
import { posix } from "node:path";
import type { Readable, Writable } from "node:stream";
import { finished } from "node:stream/promises";
import { DenvError } from "@denv/protocol";

const BLOCK = 512;
/** The most an extended header (PAX records, a GNU long name) may hold, as the agent allows. */
const META_LIMIT_BYTES = 1 << 20;
/** The largest size an octal size field holds (11 digits): anything larger goes in a PAX record. */
const OCTAL_SIZE_MAX = 0o77777777777;
const OCTAL_ID_MAX = 0o7777777;

function refuse(message: string): never {
  throw new DenvError("invalid_argument", `bad tar: ${message}`);
}

/** The normalised relative name of an entry, or a refusal. */
export function checkEntryName(name: string): string {
  if (name.includes("\0")) refuse(`entry name holds a NUL byte: ${JSON.stringify(name)}`);
  if (name.startsWith("/")) refuse(`absolute entry name ${name}`);
  if (name.split("/").includes("..")) refuse(`entry name with "..": ${name}`);
  const normalized = posix.normalize(name);
  if (normalized.startsWith("..")) refuse(`entry escapes the target: ${name}`);
  return normalized;
}

function checkLink(entryName: string, linkname: string, kind: "symlink" | "link"): void {
  if (linkname.includes("\0")) refuse(`link target holds a NUL byte in ${entryName}`);
  if (linkname.startsWith("/")) refuse(`${kind} ${entryName} points to an absolute path ${linkname}`);
  const base = kind === "symlink" ? posix.dirname(entryName) : ".";
  const resolved = posix.normalize(posix.join(base, linkname));
  if (resolved === ".." || resolved.startsWith("../"))
    refuse(`${kind} ${entryName} → ${linkname} escapes the target`);
}

/**
 * A header's text field up to its first NUL. Names are kept as bytes (latin1 maps each byte to one
 * character and back), so a name that is not UTF-8 is written out exactly as it came.
 */
function text(h: Buffer, offset: number, length: number): string {
  const end = h.indexOf(0, offset);
  return h.toString("latin1", offset, end === -1 || end > offset + length ? offset + length : end);
}

/** A numeric field: octal (spaces and NULs around it), or base-256 when its first byte has the high bit. */
function numeric(h: Buffer, offset: number, length: number, what: string): number {
  if ((h[offset] as number) & 0x80) {
    if (h[offset] === 0xff) refuse(`negative ${what}`);
    let v = (h[offset] as number) & 0x7f;
    for (let i = offset + 1; i < offset + length; i++) v = v * 256 + (h[i] as number);
    if (!Number.isSafeInteger(v)) refuse(`${what} too large`);
    return v;
  }
  const s = h.toString("latin1", offset, offset + length).replace(/^[ \0]+|[ \0]+$/g, "");
  if (s === "") return 0;
  if (!/^[0-7]+$/.test(s)) refuse(`a damaged header (${what} ${JSON.stringify(s)})`);
  return Number.parseInt(s, 8);
}

function checksumOk(h: Buffer): boolean {
  const stored = numeric(h, 148, 8, "checksum");
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const b = i >= 148 && i < 156 ? 0x20 : (h[i] as number);
    unsigned += b;
    signed += b > 127 ? b - 256 : b;
  }
  return stored === unsigned || stored === signed;
}

/** What a PAX header says of the entry after it: only the keys denv honours. */
interface Extended {
  path?: string;
  linkpath?: string;
  size?: number;
  uid?: number;
  gid?: number;
}

function decimal(value: string, key: string): number {
  if (!/^[0-9]{1,15}$/.test(value))
    refuse(`PAX record ${key}=${JSON.stringify(value.slice(0, 40))} is not a number`);
  return Number(value);
}

/**
 * PAX records (`LEN key=value\n`). path, linkpath, size, uid and gid are honoured; sparse files are
 * refused (their data is not what the size says); the rest (times, names of owners, extended
 * attributes such as file capabilities) is dropped.
 */
function parsePax(data: Buffer): Extended {
  const x: Extended = {};
  let off = 0;
  while (off < data.length) {
    const space = data.indexOf(0x20, off);
    if (space === -1 || space - off > 12) refuse("a damaged PAX header");
    const length = decimal(data.toString("latin1", off, space), "length");
    const end = off + length;
    if (length <= space - off + 1 || end > data.length || data[end - 1] !== 0x0a)
      refuse("a damaged PAX header");
    const record = data.toString("latin1", space + 1, end - 1);
    const eq = record.indexOf("=");
    if (eq <= 0) refuse("a damaged PAX header");
    const key = record.slice(0, eq);
    const value = record.slice(eq + 1);
    if (key.startsWith("GNU.sparse.")) refuse("sparse files are not accepted");
    if (key === "path") x.path = value;
    else if (key === "linkpath") x.linkpath = value;
    else if (key === "size") x.size = decimal(value, key);
    else if (key === "uid") x.uid = decimal(value, key);
    else if (key === "gid") x.gid = decimal(value, key);
    off = end;
  }
  return x;
}

function paxRecord(key: string, value: string): Buffer {
  const body = ` ${key}=${value}\n`;
  const bodyBytes = Buffer.byteLength(body, "latin1");
  let length = bodyBytes + 1;
  while (String(length).length + bodyBytes !== length) length++;
  return Buffer.from(`${length}${body}`, "latin1");
}

function octal(h: Buffer, offset: number, length: number, value: number): void {
  h.write(`${value.toString(8).padStart(length - 1, "0")}\0`, offset, length, "latin1");
}

interface Entry {
  name: string;
  type: "0" | "1" | "2" | "5";
  linkname: string;
  size: number;
  mode: number;
  uid: number;
  gid: number;
  /** The input header, for the fields copied as they were (mtime, owners' names). */
  header: Buffer;
}

function headerBlock(
  name: string,
  linkname: string,
  type: string,
  size: number,
  e: Entry,
  pax: boolean,
): Buffer {
  const h = Buffer.alloc(BLOCK);
  h.write(name, 0, 100, "latin1");
  octal(h, 100, 8, pax ? 0o644 : e.mode);
  octal(h, 108, 8, pax || e.uid > OCTAL_ID_MAX ? 0 : e.uid);
  octal(h, 116, 8, pax || e.gid > OCTAL_ID_MAX ? 0 : e.gid);
  octal(h, 124, 12, size);
  e.header.copy(h, 136, 136, 148); // mtime, as it came (octal or base-256)
  h[156] = type.charCodeAt(0);
  h.write(linkname, 157, 100, "latin1");
  h.write("ustar\x0000", 257, 8, "latin1");
  if (!pax) {
    e.header.copy(h, 265, 265, 297); // owner's name
    e.header.copy(h, 297, 297, 329); // group's name
  }
  octal(h, 329, 8, 0);
  octal(h, 337, 8, 0);
  h.fill(0x20, 148, 156);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, 8, "latin1");
  return h;
}

function padding(size: number): number {
  return (BLOCK - (size % BLOCK)) % BLOCK;
}

/** The headers (a PAX header first when the plain one cannot hold the entry) written for a checked entry. */
function encodeHeader(e: Entry): Buffer {
  const name = e.type === "5" && !e.name.endsWith("/") ? `${e.name}/` : e.name;
  const records: Buffer[] = [];
  const nameLength = Buffer.byteLength(name, "latin1");
  if (nameLength > 100) records.push(paxRecord("path", name));
  if (Buffer.byteLength(e.linkname, "latin1") > 100) records.push(paxRecord("linkpath", e.linkname));
  if (e.size > OCTAL_SIZE_MAX) records.push(paxRecord("size", String(e.size)));
  if (e.uid > OCTAL_ID_MAX) records.push(paxRecord("uid", String(e.uid)));
  if (e.gid > OCTAL_ID_MAX) records.push(paxRecord("gid", String(e.gid)));
  const plain = headerBlock(
    name.slice(0, 100),
    e.linkname.slice(0, 100),
    e.type,
    e.size > OCTAL_SIZE_MAX ? 0 : e.size,
    e,
    false,
  );
  if (records.length === 0) return plain;
  const body = Buffer.concat(records);
  const paxHeader = headerBlock("PaxHeader", "", "x", body.length, e, true);
  return Buffer.concat([paxHeader, body, Buffer.alloc(padding(body.length)), plain]);
}

/** Bytes the source holds before it pauses its input. */
const QUEUE_BYTES = 4 * 1024 * 1024;

/**
 * The input as exact reads (headers) and forwarded slices (data), from its own chunks. Chunks are
 * taken as 'data' events, one at a time: a Readable's read() would join whatever it holds into a
 * new buffer, a copy of every byte.
 */
class ByteSource {
  private readonly queue: Buffer[] = [];
  private queuedBytes = 0;
  private current: Buffer = Buffer.alloc(0);
  private ended = false;
  private failed: Error | undefined;
  private wake: (() => void) | undefined;
  private readonly input: Readable;

  constructor(input: Readable) {
    this.input = input;
    input.on("data", (chunk: Buffer | string | Uint8Array) => {
      const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
      this.queue.push(b);
      this.queuedBytes += b.length;
      if (this.queuedBytes >= QUEUE_BYTES) input.pause();
      this.wake?.();
    });
    // The readable side only: a stream's input is often a duplex whose writable side stays open.
    finished(input, { writable: false }).then(
      () => {
        this.ended = true;
        this.wake?.();
      },
      (err: Error) => {
        this.failed = err;
        this.wake?.();
      },
    );
  }

  private async more(): Promise<boolean> {
    while (this.queue.length === 0) {
      if (this.failed) throw this.failed;
      if (this.ended) return false;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
      this.wake = undefined;
    }
    this.current = this.queue.shift() as Buffer;
    this.queuedBytes -= this.current.length;
    if (this.queuedBytes < QUEUE_BYTES / 2 && this.input.isPaused()) this.input.resume();
    return true;
  }

  /** Exactly `n` bytes; null when the input ended before any of them; a refusal when it ended inside. */
  async take(n: number, what: string): Promise<Buffer | null> {
    if (this.current.length >= n) {
      const out = this.current.subarray(0, n);
      this.current = this.current.subarray(n);
      return out;
    }
    const parts: Buffer[] = [];
    let have = 0;
    while (have < n) {
      if (this.current.length === 0 && !(await this.more())) {
        if (have === 0) return null;
        refuse(`the tar ended inside ${what}`);
      }
      const piece = this.current.subarray(0, n - have);
      this.current = this.current.subarray(piece.length);
      parts.push(piece);
      have += piece.length;
    }
    return parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts, n);
  }

  /** Hands `n` bytes to `sink` as slices of the input's chunks. */
  async forward(n: number, what: string, sink: (b: Buffer) => Promise<void> | undefined): Promise<void> {
    let left = n;
    while (left > 0) {
      if (this.current.length === 0 && !(await this.more())) refuse(`the tar ended inside ${what}`);
      const piece = this.current.subarray(0, left);
      this.current = this.current.subarray(piece.length);
      left -= piece.length;
      const waiting = sink(piece);
      if (waiting) await waiting;
    }
  }

  /** Reads the input to its end (the zero blocks after the end marker, a record's padding). */
  async drain(): Promise<void> {
    this.current = Buffer.alloc(0);
    while (await this.more()) this.current = Buffer.alloc(0);
  }

  /** Stops reading: the input is let go (a refused upload's sender learns it stopped). */
  close(): void {
    this.input.destroy();
  }
}

/** Writes to `output` with its flow control; a refusal when the reader went away. */
function writer(output: Writable): (b: Buffer) => Promise<void> | undefined {
  return (b) => {
    if (output.destroyed) refuse("the reader of the checked tar went away");
    if (output.write(b)) return undefined;
    return new Promise<void>((resolve, reject) => {
      const done = () => {
        output.off("drain", done);
        output.off("close", closed);
        resolve();
      };
      const closed = () => {
        output.off("drain", done);
        output.off("close", closed);
        reject(new DenvError("invalid_argument", "bad tar: the reader of the checked tar went away"));
      };
      output.on("drain", done);
      output.on("close", closed);
    });
  };
}

const KIND: Record<string, string> = {
  "3": "character device",
  "4": "block device",
  "6": "FIFO",
  S: "GNU sparse file",
  V: "volume label",
  M: "multi-volume continuation",
  D: "GNU dump directory",
};

/** Reads `input`, checks every entry, and writes the checked tar to `output`. Rejects on the first bad entry. */
export async function sanitizeTar(
  input: Readable,
  output: Writable,
  options: {
    /**
     * A volume's symbolic links are its data (a replica's tar): kept whatever they point at, since
     * no entry may pass through one anyway. An upload's must stay inside the tree.
     */
    linksAreData?: boolean;
  } = {},
): Promise<{ entries: number; bytes: number; root?: { uid: number; gid: number; mode: number } }> {
  const source = new ByteSource(input);
  // The tree's own folder ("./"), when the tar says whose it is: the engine skips that entry.
  let root: { uid: number; gid: number; mode: number } | undefined;
  const write = writer(output);
  // The refusal is the caller's answer; the same error emitted on the output must not also
  // surface as an unhandled 'error' event where its reader listens for none.
  output.on("error", () => {});
  let entries = 0;
  let bytes = 0;
  // Names of the symbolic links this tar made: nothing may pass through or replace one.
  const links = new Set<string>();
  const throughLink = (name: string): string | undefined => {
    const parts = name.split("/");
    for (let i = 1; i <= parts.length; i++) {
      const prefix = parts.slice(0, i).join("/");
      if (links.has(prefix)) return prefix;
    }
    return undefined;
  };
  try {
    let extended: Extended | undefined;
    let longName: string | undefined;
    let longLink: string | undefined;
    for (;;) {
      const h = await source.take(BLOCK, "a header");
      if (!h) refuse("the tar ended before its end marker");
      if (h.every((b) => b === 0)) break;
      if (!checksumOk(h)) refuse("a damaged header (its checksum does not match; is it compressed?)");
      const type = h[156] === 0 ? "0" : String.fromCharCode(h[156] as number);
      const headerSize = numeric(h, 124, 12, "size");
      if (type === "x" || type === "g" || type === "L" || type === "K") {
        if (headerSize > META_LIMIT_BYTES) refuse("an extended header over 1 MiB");
        const data =
          (await source.take(headerSize + padding(headerSize), "an extended header")) ?? Buffer.alloc(0);
        if (data.length < headerSize) refuse("the tar ended inside an extended header");
        const body = data.subarray(0, headerSize);
        if (type === "g") continue; // global records: GNU tar and the engine ignore them; so does denv
        if (type === "x") {
          if (extended) refuse("two PAX headers for one entry");
          extended = parsePax(body);
        } else {
          const end = body.indexOf(0);
          const value = body.toString("latin1", 0, end === -1 ? body.length : end);
          if (type === "L") {
            if (longName !== undefined) refuse("two long names for one entry");
            longName = value;
          } else {
            if (longLink !== undefined) refuse("two long link names for one entry");
            longLink = value;
          }
        }
        continue;
      }
      const ustar = h.toString("latin1", 257, 265) === "ustar\x0000";
      const prefix = ustar ? text(h, 345, 155) : "";
      const rawName =
        extended?.path ?? longName ?? (prefix ? `${prefix}/${text(h, 0, 100)}` : text(h, 0, 100));
      const linkname = extended?.linkpath ?? longLink ?? text(h, 157, 100);
      const size = extended?.size ?? headerSize;
      const uid = extended?.uid ?? numeric(h, 108, 8, "uid");
      const gid = extended?.gid ?? numeric(h, 116, 8, "gid");
      numeric(h, 136, 12, "mtime"); // copied as it came, so it must read as a number
      extended = undefined;
      longName = undefined;
      longLink = undefined;

      const name = checkEntryName(rawName);
      const via = throughLink(name);
      if (via) refuse(`${name} goes through (or replaces) the symbolic link ${via} made earlier in the tar`);
      let kind: Entry["type"];
      if (type === "2") {
        if (options.linksAreData) {
          if (linkname.includes("\0")) refuse(`link target holds a NUL byte in ${name}`);
        } else checkLink(name, linkname, "symlink");
        links.add(name);
        kind = "2";
      } else if (type === "1") {
        checkLink(name, linkname, "link");
        const target = throughLink(posix.normalize(linkname));
        if (target) refuse(`hard link ${name} points through the symbolic link ${target}`);
        kind = "1";
      } else if (type === "5") kind = "5";
      else if (type === "0" || type === "7") kind = "0";
      else
        refuse(
          `${name} is a ${KIND[type] ?? `entry of type ${JSON.stringify(type)}`}; only files, directories and links inside the tree are accepted`,
        );
      // Directories and links are headers alone, whatever their size field says, as the engine
      // and the agent read them.
      const dataBytes = kind === "0" ? size : 0;
      const mode = numeric(h, 100, 8, "mode") & 0o1777;
      // The tree's own folder is not one of its entries (it is what they are extracted into).
      if (kind === "5" && (name === "." || name === "./")) root = { uid, gid, mode };
      else entries++;
      bytes += dataBytes;
      const waiting = write(
        encodeHeader({
          name,
          type: kind,
          linkname: kind === "1" || kind === "2" ? linkname : "",
          size: dataBytes,
          mode,
          uid,
          gid,
          header: h,
        }),
      );
      if (waiting) await waiting;
      if (dataBytes > 0) await source.forward(dataBytes + padding(dataBytes), name, write);
    }
    await source.drain();
    const end = write(Buffer.alloc(2 * BLOCK));
    if (end) await end;
    output.end();
    await finished(output, { readable: false });
  } catch (err) {
    const refusal =
      err instanceof DenvError
        ? err
        : new DenvError("invalid_argument", `bad tar: ${(err as Error).message}`, { cause: err });
    // As a pipeline would: the sender learns the upload stopped, and the reader gets the error
    // (an engine request reading the checked tar is aborted by it, not left waiting for more).
    source.close();
    output.destroy(refusal);
    throw refusal;
  }
  return root ? { entries, bytes, root } : { entries, bytes };
}
