import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ConnectError,
  END_STREAM_FLAG,
  encodeEnvelope,
  endOfStream,
  readEnvelopes,
} from "./connect-protocol.ts";

async function* chunks(...parts: Uint8Array[]): AsyncGenerator<Uint8Array> {
  for (const p of parts) yield p;
}

async function readAll(body: AsyncIterable<Uint8Array>, max?: number) {
  const out: { flags: number; message: unknown }[] = [];
  for await (const e of readEnvelopes(body, max)) out.push(e);
  return out;
}

test("envelopes split anywhere across reads come back whole and in order", async () => {
  const wire = Buffer.concat([encodeEnvelope({ a: 1 }), encodeEnvelope({ b: "two" }), endOfStream()]);
  for (let cut = 1; cut < wire.length; cut++) {
    const got = await readAll(chunks(wire.subarray(0, cut), wire.subarray(cut)));
    assert.deepEqual(got, [
      { flags: 0, message: { a: 1 } },
      { flags: 0, message: { b: "two" } },
      { flags: END_STREAM_FLAG, message: {} },
    ]);
  }
});

test("the end of a failed stream carries its error's code and words", () => {
  const end = endOfStream(new ConnectError("not_found", "no process 7"));
  assert.equal(end[0], END_STREAM_FLAG);
  assert.deepEqual(JSON.parse(end.subarray(5).toString()), {
    error: { code: "not_found", message: "no process 7" },
  });
});

test("hostile bodies are refused, never read as something else", async () => {
  const refuse = async (body: AsyncIterable<Uint8Array>, words: RegExp, max?: number) =>
    assert.rejects(
      readAll(body, max),
      (e: unknown) => e instanceof ConnectError && e.code === "invalid_argument" && words.test(e.message),
    );
  // A length that claims 4 GiB: refused from its header, before any of it is held.
  const huge = Buffer.from([0, 0xff, 0xff, 0xff, 0xff]);
  await refuse(chunks(huge), /over the/);
  await refuse(chunks(encodeEnvelope({ x: "y".repeat(100) })), /over the 64-byte limit/, 64);
  // Cut inside a message: not a shorter message.
  await refuse(chunks(encodeEnvelope({ a: 1 }).subarray(0, 8)), /ended inside a message/);
  // Compressed, not JSON, JSON that is not an object.
  const compressed = encodeEnvelope({ a: 1 });
  compressed[0] = 1;
  await refuse(chunks(compressed), /compressed/);
  const notJson = Buffer.concat([Buffer.from([0, 0, 0, 0, 3]), Buffer.from("{{{")]);
  await refuse(chunks(notJson), /not JSON/);
  await refuse(chunks(encodeEnvelope([1, 2])), /not a JSON object/);
});
