import assert from "node:assert/strict";
import { PassThrough, Readable } from "node:stream";
import { test } from "node:test";
import tar from "tar-stream";
import { sanitizeTar } from "./tar-sanitizer.ts";

type Entry = {
  name: string;
  type?: "file" | "directory" | "symlink" | "link";
  linkname?: string;
  mode?: number;
  body?: string;
};

async function pack(entries: Entry[]): Promise<Buffer> {
  const p = tar.pack();
  for (const e of entries)
    p.entry({ name: e.name, type: e.type ?? "file", linkname: e.linkname, mode: e.mode }, e.body ?? "");
  p.finalize();
  const chunks: Buffer[] = [];
  for await (const c of p) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

async function sanitize(entries: Entry[]) {
  const out = new PassThrough();
  const chunks: Buffer[] = [];
  out.on("data", (c: Buffer) => chunks.push(c));
  await sanitizeTar(Readable.from(await pack(entries)), out);
  const x = tar.extract();
  const seen: { name: string; mode: number }[] = [];
  x.on("entry", (h, s, next) => {
    seen.push({ name: h.name, mode: h.mode ?? 0 });
    s.resume();
    s.on("end", next);
  });
  await new Promise<void>((resolve, reject) => {
    x.on("finish", resolve).on("error", reject);
    x.end(Buffer.concat(chunks));
  });
  return seen;
}

test("a chain of links that climbs out of the tree is refused at the first entry through a link", async () => {
  await assert.rejects(
    sanitize([
      { name: "a/", type: "directory" },
      { name: "a/b", type: "symlink", linkname: ".." },
      { name: "a/b/c", type: "symlink", linkname: ".." },
      { name: "a/b/c/FILE", body: "x" },
    ]),
    /a\/b\/c goes through \(or replaces\) the symbolic link a\/b/,
  );
});

test("an entry cannot replace a link the tar made, nor a hard link point through one", async () => {
  await assert.rejects(
    sanitize([
      { name: "d", type: "symlink", linkname: "sub" },
      { name: "d", body: "replaced" },
    ]),
    /replaces\) the symbolic link d/,
  );
  await assert.rejects(
    sanitize([
      { name: "sub/", type: "directory" },
      { name: "l", type: "symlink", linkname: "sub" },
      { name: "h", type: "link", linkname: "l/x" },
    ]),
    /hard link h points through the symbolic link l/,
  );
});

test("setuid and setgid bits are dropped; other modes and links inside the tree are kept", async () => {
  const seen = await sanitize([
    { name: "bin/", type: "directory", mode: 0o2755 },
    { name: "bin/tool", mode: 0o4755, body: "#!/bin/sh" },
    { name: "bin/plain", mode: 0o640 },
    { name: "link", type: "symlink", linkname: "bin/tool" },
  ]);
  assert.deepEqual(
    seen.map((e) => [e.name, e.mode.toString(8)]),
    [
      ["bin/", "755"],
      ["bin/tool", "755"],
      ["bin/plain", "640"],
      ["link", "644"],
    ],
  );
});
