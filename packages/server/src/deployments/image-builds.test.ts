import assert from "node:assert/strict";
import { Readable } from "node:stream";
import { test } from "node:test";
import { buildKey, readLog } from "./image-builds.ts";

// biome-ignore lint/suspicious/noControlCharactersInRegex: the bytes the reader must have dropped
const CONTROL = /[\x00-\x08\x0b-\x1f\x7f]/;

test("a host's build log is read as hostile bytes: control bytes dropped, lines cut at 400, a line without end bounded", async () => {
  const lines: string[] = [];
  const hostile = [
    Buffer.from("Step 1/2 : FROM x\x1b[31m\x07\x00\n"),
    Buffer.from(`${"A".repeat(5000)}\n`),
    Buffer.from("B".repeat(10_000)),
    Buffer.from("\nlast"),
  ];
  await readLog(Readable.from(hostile), (l) => lines.push(l));
  assert.equal(lines[0], "Step 1/2 : FROM x[31m");
  assert.ok(
    lines.every((l) => l.length <= 400 && !CONTROL.test(l)),
    JSON.stringify(lines.map((l) => l.length)),
  );
  assert.equal(lines.at(-1), "last");
  assert.ok(lines.length <= 8, `${lines.length} lines`);
});

test("the build key is what decides the image: not the context's path, but each of the rest", () => {
  const b = {
    context: "app",
    dockerfile: "Dockerfile",
    args: { A: "1" },
    target: null,
    cache_from: [],
    no_cache: false,
    labels: {},
    network: "default" as const,
    context_digest: `sha256:${"a".repeat(64)}`,
  };
  assert.equal(buildKey(b), buildKey({ ...b, context: "elsewhere" }));
  for (const change of [
    { args: { A: "2" } },
    { target: "x" },
    { dockerfile: "D2" },
    { context_digest: `sha256:${"b".repeat(64)}` },
  ])
    assert.notEqual(buildKey(b), buildKey({ ...b, ...change }), JSON.stringify(change));
});
