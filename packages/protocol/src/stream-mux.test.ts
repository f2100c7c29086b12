import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { once } from "node:events";
import { pipeline } from "node:stream/promises";
import { test } from "node:test";
import { elapse } from "../../../test/harness/wait-for.ts";
import {
  encodeStreamFrame,
  finishStream,
  handOver,
  releaseBuffer,
  releaseHandedOver,
  STREAM_CHUNK_BYTES,
  STREAM_CLOSE,
  STREAM_CREDIT,
  STREAM_DATA,
  STREAM_END,
  STREAM_INITIAL_WINDOW_BYTES,
  STREAM_WINDOW_BYTES,
  StreamMux,
  streamLinkMaskOptions,
  WindowBudget,
} from "./stream-mux.ts";

/**
 * Two muxes joined as over a socket: frames arrive later, in order, and are counted in flight. A
 * sender may free a frame once done is called, so the bytes are copied then, as a socket does.
 */
function pair(budgetB: WindowBudget | null = null) {
  const inFlight = { bytes: 0, max: 0 };
  let a!: StreamMux;
  let b!: StreamMux;
  const deliver = (to: () => StreamMux) => (frame: Buffer, done?: (err?: Error) => void) => {
    inFlight.bytes += frame.length;
    inFlight.max = Math.max(inFlight.max, inFlight.bytes);
    const copy = Buffer.from(frame);
    setImmediate(() => {
      inFlight.bytes -= copy.length;
      to().onFrame(copy);
    });
    done?.();
  };
  a = new StreamMux(deliver(() => b));
  b = new StreamMux(
    deliver(() => a),
    budgetB,
  );
  return { a, b, inFlight };
}

test("a stream carries bytes both ways with ends and the same content", async () => {
  const { a, b } = pair();
  const left = a.open(7);
  const right = b.open(7);
  const data = Buffer.alloc(3 * STREAM_WINDOW_BYTES + 12345, 7);
  for (let i = 0; i < data.length; i += 4099) data[i] = i & 0xff;
  const got: Buffer[] = [];
  right.on("data", (c: Buffer) => got.push(c));
  const ended = once(right, "end");
  left.end(data);
  await ended;
  assert.equal(
    createHash("sha256").update(Buffer.concat(got)).digest("hex"),
    createHash("sha256").update(data).digest("hex"),
  );
  right.end(Buffer.from("back"));
  const back: Buffer[] = [];
  for await (const c of left) back.push(c as Buffer);
  assert.equal(Buffer.concat(back).toString(), "back");
});

test("a reader that does not read holds the sender to one window", async () => {
  const { a, b, inFlight } = pair();
  const left = a.open(1);
  const right = b.open(1);
  let written = 0;
  const big = Buffer.alloc(STREAM_CHUNK_BYTES);
  // Writes until the sender is told to wait, for a while: nothing reads on the other side.
  const deadline = Date.now() + 300;
  while (Date.now() < deadline) {
    if (left.writableNeedDrain)
      await elapse(20, "the sender is told to wait and must stay held: nothing reads");
    else {
      left.write(big);
      written += big.length;
    }
  }
  assert.ok(right.readableLength <= STREAM_WINDOW_BYTES, `receiver buffered ${right.readableLength}`);
  assert.ok(inFlight.max <= STREAM_WINDOW_BYTES + 64 * 1024, `in flight at most ${inFlight.max}`);
  assert.ok(written <= STREAM_WINDOW_BYTES + 4 * STREAM_CHUNK_BYTES, `accepted ${written} bytes`);
  // Once read, the rest flows.
  left.end();
  let total = 0;
  for await (const c of right) total += (c as Buffer).length;
  assert.ok(total >= written);
});

/** Writes to `left` without end until it has been told to wait `quietTurns` times in a row. */
async function writeUntilHeld(left: import("node:stream").Writable, quietTurns = 10): Promise<number> {
  let written = 0;
  let held = 0;
  const piece = Buffer.alloc(64 * 1024);
  while (held < quietTurns) {
    if (left.writableNeedDrain) {
      held++;
      await elapse(10, "a writer held for several turns in a row is held, not between grants");
    } else {
      held = 0;
      left.write(piece);
      written += piece.length;
    }
  }
  return written;
}

/** Reads `bytes` from a stream, then stops reading (paused, nothing more taken). */
async function readThenStop(r: import("node:stream").Readable, bytes: number): Promise<void> {
  let got = 0;
  await new Promise<void>((resolve) => {
    const onData = (c: Buffer) => {
      got += c.length;
      if (got >= bytes) {
        r.off("data", onData);
        r.pause();
        resolve();
      }
    };
    r.on("data", onData);
  });
}

test("a window starts small and grows to a full one while its reader keeps up; a stopped reader holds what it had", async () => {
  const { a, b } = pair();
  const left = a.open(2);
  const right = b.open(2);
  // Before any reading, the sender is held to the first window.
  const first = await writeUntilHeld(left);
  assert.ok(right.readableLength <= STREAM_INITIAL_WINDOW_BYTES, `held ${right.readableLength} at first`);
  assert.ok(first <= STREAM_INITIAL_WINDOW_BYTES + 2 * 1024 * 1024, `accepted ${first}`);
  // A reader that keeps up is given a full window, then stops: at most that window is held.
  const reading = readThenStop(right, 48 * 1024 * 1024);
  while (right.readableFlowing !== false) await writeUntilHeld(left, 1);
  await reading;
  await writeUntilHeld(left);
  assert.ok(right.readableLength > 4 * STREAM_INITIAL_WINDOW_BYTES, `grew: held ${right.readableLength}`);
  assert.ok(right.readableLength <= STREAM_WINDOW_BYTES, `held ${right.readableLength}`);
  left.destroy();
  right.destroy();
});

test("a receiver's budget bounds what its streams together hold, however many stop reading", async () => {
  const budget = new WindowBudget(2 * 1024 * 1024);
  const { a, b } = pair(budget);
  const streams = Array.from({ length: 8 }, (_, i) => ({ left: a.open(10 + i), right: b.open(10 + i) }));
  for (const { left, right } of streams) {
    const reading = readThenStop(right, 8 * 1024 * 1024);
    while (right.readableFlowing !== false) await writeUntilHeld(left, 1);
    await reading;
    await writeUntilHeld(left);
  }
  const held = streams.reduce((n, s) => n + s.right.readableLength, 0);
  assert.ok(budget.usedBytes <= budget.limitBytes);
  assert.ok(
    held <= budget.limitBytes + streams.length * STREAM_INITIAL_WINDOW_BYTES,
    `8 stopped readers hold ${held} bytes against a budget of ${budget.limitBytes}`,
  );
  // Their growth goes back to the budget when they close.
  for (const { left, right } of streams) {
    left.destroy();
    right.destroy();
  }
  assert.equal(budget.usedBytes, 0);
});

test("a peer sending past its credit fails the stream instead of being buffered", async () => {
  const sent: Buffer[] = [];
  const mux = new StreamMux((f) => sent.push(f));
  const s = mux.open(3);
  const failed = once(s, "error");
  const flood = Buffer.alloc(STREAM_CHUNK_BYTES);
  for (let i = 0; i < STREAM_WINDOW_BYTES / STREAM_CHUNK_BYTES + 2; i++)
    mux.onFrame(encodeStreamFrame(STREAM_DATA, 3, flood));
  const [err] = await failed;
  assert.match((err as Error).message, /more than the stream's window/);
  assert.equal(mux.has(3), false);
  assert.ok(s.readableLength <= STREAM_WINDOW_BYTES);
  // Its CLOSE went back to the peer.
  assert.ok(sent.some((f) => f[0] === STREAM_CLOSE && f.readUInt32BE(1) === 3));
});

test("frames for streams not opened on this connection reach nothing", () => {
  const mux = new StreamMux(() => {});
  const s = mux.open(5);
  let got = 0;
  s.on("data", (c: Buffer) => {
    got += c.length;
  });
  mux.onFrame(encodeStreamFrame(STREAM_DATA, 6, Buffer.from("not yours")));
  mux.onFrame(encodeStreamFrame(STREAM_CLOSE, 6));
  mux.onFrame(Buffer.from([1, 2]));
  assert.equal(got, 0);
  assert.equal(s.destroyed, false);
});

test("a close before the end is an error; after the end, what was sent is still read", async () => {
  const mux = new StreamMux(() => {});
  const cut = mux.open(1);
  const err = once(cut, "error");
  mux.onFrame(encodeStreamFrame(STREAM_DATA, 1, Buffer.from("half")));
  mux.onFrame(encodeStreamFrame(STREAM_CLOSE, 1));
  assert.match(((await err)[0] as Error).message, /before its end/);

  const whole = mux.open(2);
  mux.onFrame(encodeStreamFrame(STREAM_DATA, 2, Buffer.from("all of it")));
  mux.onFrame(encodeStreamFrame(STREAM_END, 2));
  mux.onFrame(encodeStreamFrame(STREAM_CLOSE, 2));
  const parts: Buffer[] = [];
  for await (const c of whole) parts.push(c as Buffer);
  assert.equal(Buffer.concat(parts).toString(), "all of it");
});

test("finishStream sends the end, then the close; a lost connection fails open streams", async () => {
  const sent: Buffer[] = [];
  const mux = new StreamMux((f, done) => {
    sent.push(f);
    done?.();
  });
  const s = mux.open(9);
  s.write(Buffer.from("x"));
  await finishStream(s);
  assert.deepEqual(
    sent.map((f) => f[0]),
    [STREAM_DATA, STREAM_END, STREAM_CLOSE],
  );
  const open = mux.open(10);
  const err = once(open, "error");
  mux.closeAll();
  assert.match(((await err)[0] as Error).message, /connection/);
});

test("a relayed stream goes on in the memory it arrived in, its content the same", async () => {
  // host a -> server -> host b, as the control plane relays a snapshot between two hosts.
  const { a, b: fromA } = pair();
  const { a: toB, b } = pair();
  const arrived = new Set<ArrayBufferLike>();
  const onFrame = fromA.onFrame.bind(fromA);
  fromA.onFrame = (frame) => {
    arrived.add(frame.buffer);
    onFrame(frame);
  };
  let forwarded = 0;
  let copied = 0;
  const send = toB.send;
  (toB as { send: typeof send }).send = (frame, done) => {
    if (frame[0] === STREAM_DATA) {
      if (arrived.has(frame.buffer)) forwarded++;
      else copied++;
    }
    send(frame, done);
  };
  const src = a.open(3);
  const inbound = fromA.open(3);
  const outbound = toB.open(9);
  const dst = b.open(9);
  const relayed = pipeline(inbound, outbound);
  const data = randomBytes(2 * STREAM_WINDOW_BYTES + 777);
  src.end(data);
  // The reader starts late: the relay's credit toward b runs out and payloads are split to fit.
  await elapse(50, "the reader must start late, after the relay's credit toward it ran out");
  const got: Buffer[] = [];
  for await (const c of dst) got.push(c as Buffer);
  await relayed;
  assert.equal(Buffer.compare(Buffer.concat(got), data), 0);
  assert.ok(forwarded > 0, `no frame went on in place (${copied} copied)`);
  assert.ok(forwarded >= copied, `${forwarded} forwarded in place, ${copied} copied`);
});

test("a payload is sent in place once: writing it again copies it, and its bytes are unchanged", async () => {
  const { a, b } = pair();
  const { a: c, b: d } = pair();
  const inbound = b.open(1);
  const out1 = c.open(2);
  const out2 = c.open(4);
  const in1 = d.open(2);
  const in2 = d.open(4);
  a.open(1).end(Buffer.from("the same bytes twice"));
  const [chunk] = (await once(inbound, "data")) as [Buffer];
  out1.end(chunk);
  out2.end(chunk);
  const read = async (s: typeof in1) => {
    const got: Buffer[] = [];
    for await (const x of s) got.push(x as Buffer);
    return Buffer.concat(got).toString();
  };
  assert.deepEqual(await Promise.all([read(in1), read(in2)]), [
    "the same bytes twice",
    "the same bytes twice",
  ]);
});

test("a stream frees what was handed over once copied, and its own frames once sent; nothing else", async () => {
  const sent: Buffer[] = [];
  const mux = new StreamMux((f, done) => {
    sent.push(Buffer.from(f));
    done?.();
  });
  const s = mux.open(1);
  const mine = Buffer.alloc(64 * 1024, 7);
  const given = handOver(Buffer.alloc(64 * 1024, 8));
  const pooled = handOver(Buffer.from("a slice of node's shared pool"));
  const bigger = Buffer.alloc(128 * 1024, 9);
  const slice = handOver(bigger.subarray(0, 64 * 1024));
  const frames: Buffer[] = [];
  const send = mux.send;
  (mux as { send: typeof send }).send = (frame, done) => {
    frames.push(frame);
    send(frame, done);
  };
  // The peer's credit for all of it (a window starts small and grows as a reader takes bytes).
  const credit = Buffer.alloc(4);
  credit.writeUInt32BE(1024 * 1024);
  mux.onFrame(encodeStreamFrame(STREAM_CREDIT, 1, credit));
  for (const b of [mine, given, pooled, slice]) s.write(b);
  await finishStream(s);
  // What crossed the link is every byte, in order.
  const data = sent.filter((f) => f[0] === STREAM_DATA).map((f) => f.subarray(5));
  assert.equal(
    Buffer.compare(
      Buffer.concat(data),
      Buffer.concat([
        Buffer.alloc(64 * 1024, 7),
        Buffer.alloc(64 * 1024, 8),
        Buffer.from("a slice of node's shared pool"),
        Buffer.alloc(64 * 1024, 9),
      ]),
    ),
    0,
  );
  // The caller's own buffer is untouched; a handed-over one is freed (read as empty, never reused).
  assert.equal(mine.length, 64 * 1024);
  assert.ok(mine.every((b) => b === 7));
  assert.equal(given.length, 0);
  // A slice of memory shared with others is never freed, handed over or not.
  assert.equal(pooled.toString(), "a slice of node's shared pool");
  assert.equal(slice.length, 64 * 1024);
  assert.equal(bigger.length, 128 * 1024);
  // The stream's own data frames were freed once sent.
  const dataFrames = frames.filter((f) => f.length === 0 || f[0] === STREAM_DATA);
  assert.ok(dataFrames.length > 0);
  assert.ok(
    dataFrames.every((f) => f.length === 0 || f.byteLength !== f.buffer.byteLength),
    "a frame of its own left for the collector",
  );
});

test("a stream read by one reader hands its payloads over; only their reader's release frees them", async () => {
  const mux = new StreamMux(() => {});
  const kept = mux.open(1);
  const given = mux.open(2);
  given.handsOverReads = true;
  const frameA = encodeStreamFrame(STREAM_DATA, 1, Buffer.alloc(64 * 1024, 1));
  const frameB = encodeStreamFrame(STREAM_DATA, 2, Buffer.alloc(64 * 1024, 2));
  mux.onFrame(frameA);
  mux.onFrame(frameB);
  const [a] = (await once(kept, "data")) as [Buffer];
  const [b] = (await once(given, "data")) as [Buffer];
  // Not handed over: a release is a no-op, the bytes stay.
  releaseHandedOver(a);
  assert.equal(a.length, 64 * 1024);
  assert.equal(frameA.length, 64 * 1024 + 5);
  // Handed over: the whole frame it arrived in is freed.
  assert.equal(b.length, 64 * 1024);
  releaseHandedOver(b);
  assert.equal(b.length, 0);
  assert.equal(frameB.length, 0);
  // A buffer that is not the whole of its memory is never freed.
  const whole = Buffer.alloc(10_000);
  releaseBuffer(whole.subarray(1));
  assert.equal(whole.length, 10_000);
});

test("a link's frames go unmasked only over TLS or on loopback", () => {
  const zero = (url: string) => {
    const o = streamLinkMaskOptions(url);
    if (!o.generateMask) return false;
    const mask = Buffer.from([1, 2, 3, 4]);
    o.generateMask(mask);
    return mask.equals(Buffer.alloc(4));
  };
  for (const url of [
    "wss://denv.example.com/v1/hosts/connect",
    "ws://127.0.0.1:8080/",
    "ws://localhost/",
    "ws://[::1]:9/",
  ])
    assert.equal(zero(url), true, url);
  // Plain ws:// across a network keeps ws's random masks, whatever the name looks like.
  for (const url of [
    "ws://10.0.0.5:8080/",
    "ws://denv.example.com/",
    "ws://127.0.0.1.attacker.io/",
    "ws://localhost.attacker.io/",
    "ws://[::ffff:10.0.0.1]/",
  ])
    assert.equal(zero(url), false, url);
});
