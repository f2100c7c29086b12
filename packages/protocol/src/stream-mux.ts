/**
 * Byte streams over the host's one WebSocket, beside its JSON messages: port tunnels, file tars
 * and exec's stdin, stdout and stderr all travel as binary frames, never as base64 in JSON.
 *
 * A frame is u8 kind, u32 stream id (big-endian), then the payload. The server picks every id
 * and names it in the operation that uses it; the host opens its side when the operation arrives.
 *
 * Flow control is per stream, by credit (as HTTP/2 does): a sender may have at most its stream's
 * window unacknowledged, and the receiver grants more only as its reader takes bytes. So a 10 GiB
 * file costs each side at most a window of memory, however slow the reader, and a slow stream never
 * holds up the others or the connection's heartbeats. A peer that sends past the credit it was
 * given is breaking the protocol: that stream is failed, not buffered.
 *
 * A window starts at STREAM_INITIAL_WINDOW_BYTES and doubles with each grant while its reader keeps
 * taking bytes, up to STREAM_WINDOW_BYTES, as far as the receiver's WindowBudget allows (the server
 * keeps one per team): a stream whose reader stops holds at most the window it had reached, and a
 * team's streams together at most the budget plus one initial window each, however many it opens.
 */
import { Duplex } from "node:stream";

/** Closes a stream this side is done with: its END once every write is out, then its CLOSE. */
export function finishStream(stream: Duplex): Promise<void> {
  if (stream.destroyed) return Promise.resolve();
  return new Promise<void>((resolve) => {
    stream.end(() => {
      stream.destroy();
      resolve();
    });
    stream.once("error", () => resolve());
  });
}

/** Bytes on the stream. */
export const STREAM_DATA = 1;
/** The sender will write no more on this stream (a half-close). */
export const STREAM_END = 2;
/** The stream is gone in both directions; before an END it means the sender gave up. */
export const STREAM_CLOSE = 3;
/** The receiver took bytes: the payload (u32) is how many more the sender may send. */
export const STREAM_CREDIT = 4;

/** The most unacknowledged bytes a sender may have on one stream (a window's full size). */
export const STREAM_WINDOW_BYTES = 8 * 1024 * 1024;
/** A new stream's window, both sides: it grows from here as its reader takes bytes. */
export const STREAM_INITIAL_WINDOW_BYTES = 64 * 1024;

/**
 * What a receiver's streams may hold beyond their initial windows, together: windows grow only
 * while the budget has room (and give their growth back when they close).
 */
export class WindowBudget {
  readonly limitBytes: number;
  /** Bytes of growth held by open streams now. */
  usedBytes = 0;

  constructor(limitBytes: number) {
    this.limitBytes = limitBytes;
  }

  /** Up to `wantBytes` of growth, as much as there is room for. */
  take(wantBytes: number): number {
    const n = Math.max(0, Math.min(wantBytes, this.limitBytes - this.usedBytes));
    this.usedBytes += n;
    return n;
  }

  giveBack(bytes: number): void {
    this.usedBytes = Math.max(0, this.usedBytes - bytes);
  }
}
/** The largest payload of one DATA frame. */
export const STREAM_CHUNK_BYTES = 1024 * 1024;

/** A frame's header: u8 kind, u32 stream id. */
const FRAME_HEAD_BYTES = 5;

export function encodeStreamFrame(kind: number, streamId: number, payload?: Buffer): Buffer {
  return encodeStreamFramev(kind, streamId, payload ? [payload] : [], payload?.length ?? 0);
}

/** One frame from several pieces: the header and the pieces copied once, into one buffer. */
function encodeStreamFramev(kind: number, streamId: number, pieces: Buffer[], bytes: number): Buffer {
  const frame = Buffer.allocUnsafe(FRAME_HEAD_BYTES + bytes);
  frame[0] = kind;
  frame.writeUInt32BE(streamId >>> 0, 1);
  let at = FRAME_HEAD_BYTES;
  for (const p of pieces) at += p.copy(frame, at);
  return frame;
}

/**
 * Payloads that arrived as a whole frame: the frame's own header sits in the 5 bytes before each,
 * in a buffer nothing else writes. A stream that sends one on (the server relaying a host's stream
 * to another host) rewrites that header in place and sends the same memory: no copy per hop.
 */
const framedPayloads = new WeakSet<Buffer>();

export function decodeStreamFrame(frame: Buffer): { kind: number; streamId: number; payload: Buffer } | null {
  if (frame.length < FRAME_HEAD_BYTES) return null;
  const payload = frame.subarray(FRAME_HEAD_BYTES);
  framedPayloads.add(payload);
  return { kind: frame[0] as number, streamId: frame.readUInt32BE(1), payload };
}

/**
 * Chunks their producer hands over whole: it never reads them again and nothing else holds them
 * (an HTTP request's body chunks, each its own copy out of the parser; a stream's payloads once
 * its reader said it reads each once). Their last reader frees them: a stream that copied one into
 * a frame or sent it on, an HTTP answer once it is written.
 */
const handedOver = new WeakSet<Buffer>();

/** Marks a chunk as handed over (see `handedOver`); returns it. */
export function handOver(chunk: Buffer): Buffer {
  handedOver.add(chunk);
  return chunk;
}

/**
 * Frees a buffer's memory now rather than when the collector finds it dead. V8 starts a collection
 * for memory outside its heap only after 64 MiB more of it, so a relay's spent frames and chunks
 * (a GiB is a thousand of them) piled up in malloc's heap, which keeps the pages after they are
 * freed: most of a relaying server's peak was that. The buffer's ArrayBuffer is detached, so any
 * view of it left somewhere reads as empty (never as reused memory). Only a buffer that is the
 * whole of its ArrayBuffer is freed: a slice of Node's shared pool, or of a larger read, is left to
 * the collector. The caller must be the buffer's last reader.
 */
export function releaseBuffer(buf: Buffer): void {
  const ab = buf.buffer;
  if (!(ab instanceof ArrayBuffer) || buf.byteOffset !== 0 || buf.byteLength !== ab.byteLength) return;
  const detachable = ab as ArrayBuffer & { transfer?: (n: number) => ArrayBuffer; detached?: boolean };
  if (typeof detachable.transfer !== "function" || detachable.detached) return;
  try {
    detachable.transfer(0);
  } catch {
    // An ArrayBuffer that may not be detached (one with a detach key) is left to the collector.
  }
}

/**
 * What the last reader of a handed-over chunk calls once done with it: frees the chunk, or the
 * whole frame it arrived in. Anything not handed over is left alone.
 */
export function releaseHandedOver(chunk: Buffer): void {
  if (!handedOver.has(chunk)) return;
  handedOver.delete(chunk);
  if (framedPayloads.has(chunk) && chunk.byteOffset === FRAME_HEAD_BYTES)
    releaseBuffer(Buffer.from(chunk.buffer, 0, chunk.length + FRAME_HEAD_BYTES));
  else releaseBuffer(chunk);
}

/** The frame around a payload that arrived framed, its header rewritten for this stream. */
function reframe(payload: Buffer, streamId: number): Buffer {
  const frame = Buffer.from(
    payload.buffer,
    payload.byteOffset - FRAME_HEAD_BYTES,
    payload.length + FRAME_HEAD_BYTES,
  );
  frame[0] = STREAM_DATA;
  frame.writeUInt32BE(streamId >>> 0, 1);
  return frame;
}

/**
 * Sends one frame; `done` is called once the socket took its bytes (or it failed). From then on
 * the frame's memory may be freed (see releaseBuffer): a sender that keeps it (one that hands frames
 * to a peer in memory) must copy it first, as a socket does.
 */
export type SendFrame = (frame: Buffer, done?: (err?: Error) => void) => void;

/** One stream: a Duplex whose writes wait for credit and whose reads grant it. */
export class MuxStream extends Duplex {
  readonly streamId: number;
  private readonly mux: StreamMux;
  /** Bytes this side may still send before the peer grants more. */
  private sendCredit = STREAM_INITIAL_WINDOW_BYTES;
  /** Bytes the peer may still send before this side grants more. */
  private peerCredit = STREAM_INITIAL_WINDOW_BYTES;
  /** The receiving window: what the peer may send plus what it sent and was not yet granted back. */
  private window = STREAM_INITIAL_WINDOW_BYTES;
  /** Of the window, what was taken from the budget (given back when the stream ends). */
  private grown = 0;
  /**
   * Bytes the reader took (received, and no longer in this stream's buffer) that were granted back
   * to the peer: only taken bytes are granted back, so what sits unread is never more than the window.
   */
  private credited = 0;
  private creditWaiter: (() => void) | null = null;
  private peerEnded = false;
  /** The peer closed the stream (or the connection went): nothing more is sent on it. */
  private gone = false;
  /** The peer broke the protocol on this stream (sent past its credit). */
  violated = false;
  /**
   * Set by whoever has this stream read once, chunk by chunk, by one reader (a relay, an HTTP
   * answer): each payload is then handed over, so whatever it goes to next frees it when done.
   */
  handsOverReads = false;
  /** Total bytes received and sent, for whoever reports on the transfer. */
  bytesIn = 0;
  bytesOut = 0;

  constructor(mux: StreamMux, streamId: number) {
    super({
      allowHalfOpen: true,
      highWaterMark: STREAM_CHUNK_BYTES,
      readableHighWaterMark: STREAM_CHUNK_BYTES,
    });
    this.mux = mux;
    this.streamId = streamId;
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.sendPieces([Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk)]).then(() => cb(), cb);
  }

  /**
   * What was written while the last frame was on its way goes out together, in frames of up to
   * STREAM_CHUNK_BYTES: a producer writing 64 KiB pieces (a pipe's reads) costs one frame and one
   * socket write per batch, not per piece.
   */
  override _writev(chunks: { chunk: Buffer }[], cb: (err?: Error | null) => void): void {
    const bufs = chunks.map((c) => (Buffer.isBuffer(c.chunk) ? c.chunk : Buffer.from(c.chunk)));
    this.sendPieces(bufs).then(() => cb(), cb);
  }

  /**
   * Sends the pieces in order as DATA frames within the credit the peer gave. A piece that arrived
   * framed and fits goes on in its own memory; the rest are gathered into frames with one copy.
   */
  private async sendPieces(pieces: Buffer[]): Promise<void> {
    let i = 0;
    let off = 0;
    while (i < pieces.length) {
      if (this.gone) throw new Error("the stream was closed by the other side");
      if (this.sendCredit <= 0) {
        await new Promise<void>((r) => {
          this.creditWaiter = r;
        });
        continue;
      }
      const first = pieces[i] as Buffer;
      if (first.length === 0) {
        i++;
        continue;
      }
      let frame: Buffer;
      let n: number;
      /** Whether the frame is this stream's to free once sent: one made here, or sent on handed over. */
      let spent: boolean;
      if (
        off === 0 &&
        framedPayloads.has(first) &&
        first.length <= Math.min(this.sendCredit, STREAM_CHUNK_BYTES)
      ) {
        // Sent once: the header is rewritten for this stream, so the payload cannot be sent again.
        framedPayloads.delete(first);
        spent = handedOver.delete(first);
        n = first.length;
        frame = reframe(first, this.streamId);
        i++;
      } else {
        const room = Math.min(this.sendCredit, STREAM_CHUNK_BYTES);
        const gathered: Buffer[] = [];
        const copied: Buffer[] = [];
        n = 0;
        while (i < pieces.length && n < room) {
          const p = pieces[i] as Buffer;
          const take = Math.min(p.length - off, room - n);
          gathered.push(off === 0 && take === p.length ? p : p.subarray(off, off + take));
          n += take;
          off += take;
          if (off === p.length) {
            copied.push(p);
            i++;
            off = 0;
          }
        }
        frame = encodeStreamFramev(STREAM_DATA, this.streamId, gathered, n);
        // A piece now wholly in the frame, and handed over, is read by no one again.
        for (const p of copied) releaseHandedOver(p);
        spent = true;
      }
      this.sendCredit -= n;
      this.bytesOut += n;
      const sent = frame;
      await new Promise<void>((resolve, reject) =>
        this.mux.send(sent, (err) => {
          // Called once the socket took the bytes (or failed): the frame's memory is spent.
          if (spent) releaseBuffer(sent);
          if (err) reject(err);
          else resolve();
        }),
      );
    }
  }

  override _final(cb: (err?: Error | null) => void): void {
    if (this.gone) {
      cb();
      return;
    }
    this.mux.send(encodeStreamFrame(STREAM_END, this.streamId), () => cb());
  }

  override _read(): void {
    this.grant();
  }

  /**
   * Bytes taken out of the buffer are granted back here, in batches, and at once when the reader
   * emptied the buffer: Readable calls _read before it takes the bytes, and not again until the next
   * push, so a grant made only there could wait on bytes the peer was never allowed to send.
   */
  override read(size?: number): Buffer | null {
    const chunk = super.read(size) as Buffer | null;
    if (chunk !== null) {
      const taken = this.owedTaken();
      if (taken > 0 && (this.readableLength === 0 || taken >= this.window / 4)) this.grant();
    }
    return chunk;
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.giveBackGrowth();
    this.mux.forget(this.streamId, this);
    if (!this.gone) {
      this.gone = true;
      this.mux.send(encodeStreamFrame(STREAM_CLOSE, this.streamId));
    }
    this.wake();
    cb(err);
  }

  /**
   * Gives the peer back the credit for what the reader took, and grows the window (doubling it, up
   * to STREAM_WINDOW_BYTES) by what the budget has room for: a reader that keeps taking bytes gets
   * a full window, one that stops holds no more than it had.
   */
  private grant(): void {
    const taken = this.owedTaken();
    if (taken === 0 || this.gone || this.peerEnded) return;
    const want = Math.min(this.window, STREAM_WINDOW_BYTES - this.window);
    const growth = want > 0 ? (this.mux.budget ? this.mux.budget.take(want) : want) : 0;
    this.window += growth;
    this.grown += growth;
    this.credited += taken;
    const n = taken + growth;
    this.peerCredit += n;
    const payload = Buffer.alloc(4);
    payload.writeUInt32BE(n);
    this.mux.send(encodeStreamFrame(STREAM_CREDIT, this.streamId, payload));
  }

  /** Bytes the reader took since the last grant: received, out of the buffer, not yet granted back. */
  private owedTaken(): number {
    return this.bytesIn - this.readableLength - this.credited;
  }

  /** The window's growth back to the budget, once: the stream is done receiving. */
  private giveBackGrowth(): void {
    if (this.grown === 0) return;
    this.mux.budget?.giveBack(this.grown);
    this.grown = 0;
  }

  private wake(): void {
    const w = this.creditWaiter;
    this.creditWaiter = null;
    w?.();
  }

  /** A frame for this stream, from the peer. */
  receive(kind: number, payload: Buffer): void {
    if (kind === STREAM_DATA) {
      if (this.peerEnded) return;
      if (payload.length > this.peerCredit) {
        this.violated = true;
        this.destroy(new Error("the other side sent more than the stream's window allows"));
        return;
      }
      this.peerCredit -= payload.length;
      this.bytesIn += payload.length;
      // No copy: a WebSocket message's buffer is never reused by the socket that read it.
      const room = this.push(this.handsOverReads ? handOver(payload) : payload);
      // Credit goes back in batches while the reader keeps up, and from _read once it catches up.
      if (room && this.owedTaken() >= this.window / 4) this.grant();
    } else if (kind === STREAM_END) {
      if (this.peerEnded) return;
      this.peerEnded = true;
      // Nothing more comes: what is still buffered is the reader's, the budget's room is not.
      this.giveBackGrowth();
      this.push(null);
    } else if (kind === STREAM_CLOSE) {
      this.gone = true;
      this.wake();
      this.mux.forget(this.streamId, this);
      // After its END the peer is only done with the stream: what it sent is still read to the end.
      if (this.peerEnded) this.end();
      else this.destroy(new Error("the other side closed the stream before its end"));
    } else if (kind === STREAM_CREDIT && payload.length >= 4) {
      this.sendCredit = Math.min(this.sendCredit + payload.readUInt32BE(0), 2 * STREAM_WINDOW_BYTES);
      this.wake();
    }
  }

  /** The connection under the stream is gone. */
  lost(): void {
    this.gone = true;
    this.wake();
    this.destroy(new Error("the connection carrying the stream closed"));
  }
}

/**
 * The streams of one connection. Ids are per connection: a frame reaches only a stream opened on
 * the connection it arrived on, so no id a peer makes up can touch another connection's streams.
 */
export class StreamMux {
  private readonly streams = new Map<number, MuxStream>();
  readonly send: SendFrame;
  /** What this side's receiving windows may grow by, together (shared by several muxes if given so). */
  readonly budget: WindowBudget | null;

  constructor(send: SendFrame, budget: WindowBudget | null = null) {
    this.send = send;
    this.budget = budget;
  }

  /** Opens (registers) a stream under an id; frames for it are kept from this moment. */
  open(streamId: number): MuxStream {
    if (this.streams.has(streamId)) throw new Error(`stream ${streamId} is already open`);
    const s = new MuxStream(this, streamId);
    this.streams.set(streamId, s);
    return s;
  }

  has(streamId: number): boolean {
    return this.streams.has(streamId);
  }

  get size(): number {
    return this.streams.size;
  }

  /** A binary frame from the peer. Frames for streams this side does not have are dropped. */
  onFrame(frame: Buffer): void {
    const f = decodeStreamFrame(frame);
    if (!f) return;
    this.streams.get(f.streamId)?.receive(f.kind, f.payload);
  }

  /** @internal A stream removing itself once destroyed. */
  forget(streamId: number, stream: MuxStream): void {
    if (this.streams.get(streamId) === stream) this.streams.delete(streamId);
  }

  /** The connection closed: every stream on it fails. */
  closeAll(): void {
    const all = [...this.streams.values()];
    this.streams.clear();
    for (const s of all) s.lost();
  }
}

/**
 * The `ws` client options for a link that carries streams: frames go unmasked where masking
 * protects no one. Masking exists so that bytes a browser page chose cannot pose as requests to a
 * proxy between it and the server; over TLS no proxy reads the bytes, and on loopback there is no
 * proxy. Elsewhere (plain ws:// across a network) the mask stays random. Unmasked, a frame is sent
 * from its own memory instead of a masked copy, and the receiver skips the unmasking pass.
 */
export function streamLinkMaskOptions(url: string | URL): { generateMask?: (mask: Buffer) => void } {
  const u = new URL(url);
  const host = u.hostname.replace(/^\[|\]$/g, "");
  const loopback = host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
  return u.protocol === "wss:" || loopback ? { generateMask: (mask) => mask.fill(0) } : {};
}
