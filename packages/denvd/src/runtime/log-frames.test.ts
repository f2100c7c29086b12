import assert from "node:assert/strict";
import { test } from "node:test";
import { LogFrames } from "./log-frames.ts";

const frame = (kind: number, text: string) => {
  const body = Buffer.from(text);
  const head = Buffer.alloc(8);
  head[0] = kind;
  head.writeUInt32BE(body.length, 4);
  return Buffer.concat([head, body]);
};

test("entries come whole however the socket cuts the frames, with their stream and time", () => {
  const bytes = Buffer.concat([
    frame(1, "2026-12-06T14:00:00.000000001Z listening on :8000\n"),
    frame(2, "2026-12-06T14:00:01.5Z Traceback (most recent call last):\n"),
    frame(1, "no time here\n"),
  ]);
  for (const cut of [1, 3, 8, 9, 17, bytes.length]) {
    const p = new LogFrames();
    const got = [];
    for (let i = 0; i < bytes.length; i += cut) got.push(...p.push(bytes.subarray(i, i + cut)));
    assert.deepEqual(got, [
      { stream: "stdout", time: "2026-12-06T14:00:00.000000001Z", line: "listening on :8000" },
      { stream: "stderr", time: "2026-12-06T14:00:01.5Z", line: "Traceback (most recent call last):" },
      { stream: "stdout", time: "", line: "no time here" },
    ]);
  }
});

test("a hostile stream: unknown kinds are skipped, a huge entry is cut, a short tail waits", () => {
  const p = new LogFrames();
  const big = frame(1, `2026-12-06T14:00:00Z ${"x".repeat(200_000)}`);
  const got = p.push(
    Buffer.concat([frame(9, "junk"), big, frame(2, "2026-12-06T14:00:00Z half")]).subarray(0, -2),
  );
  assert.equal(got.length, 1);
  assert.ok((got[0]?.line.length ?? 0) < 70_000, "cut to the most one entry keeps");
  assert.deepEqual(p.push(Buffer.from("lf")), [
    { stream: "stderr", time: "2026-12-06T14:00:00Z", line: "half" },
  ]);
});
