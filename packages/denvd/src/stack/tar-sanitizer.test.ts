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

/** One raw header block, as a hostile or unusual producer would write it. */
function rawHeader(fields: {
  name: string;
  type: string;
  size?: number;
  prefix?: string;
  linkname?: string;
  mode?: number;
}) {
  const h = Buffer.alloc(512);
  h.write(fields.name, 0, 100, "latin1");
  h.write(`${(fields.mode ?? 0o644).toString(8).padStart(7, "0")}\0`, 100, "latin1");
  h.write("0000000\0", 108, "latin1");
  h.write("0000000\0", 116, "latin1");
  h.write(`${(fields.size ?? 0).toString(8).padStart(11, "0")}\0`, 124, "latin1");
  h.write("00000000000\0", 136, "latin1");
  h.write(fields.type, 156, "latin1");
  h.write(fields.linkname ?? "", 157, 100, "latin1");
  h.write("ustar\x0000", 257, "latin1");
  h.write(fields.prefix ?? "", 345, 155, "latin1");
  h.fill(0x20, 148, 156);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "latin1");
  return h;
}

function withData(header: Buffer, data: Buffer | string): Buffer {
  const d = Buffer.from(data);
  return Buffer.concat([header, d, Buffer.alloc((512 - (d.length % 512)) % 512)]);
}

function paxData(records: [string, string][]): Buffer {
  return Buffer.concat(
    records.map(([k, v]) => {
      const body = ` ${k}=${v}\n`;
      let n = body.length + 1;
      while (String(n).length + body.length !== n) n++;
      return Buffer.from(`${n}${body}`, "latin1");
    }),
  );
}

const END = Buffer.alloc(1024);

async function check(tarBytes: Buffer, options: { linksAreData?: boolean } = {}) {
  const out = new PassThrough();
  const chunks: Buffer[] = [];
  out.on("data", (c: Buffer) => chunks.push(c));
  // Fed in odd-sized pieces: headers and data split across chunks must read the same.
  const pieces = [];
  for (let i = 0; i < tarBytes.length; i += 333) pieces.push(tarBytes.subarray(i, i + 333));
  const result = await sanitizeTar(Readable.from(pieces), out, options);
  return { result, out: Buffer.concat(chunks) };
}

test("hostile headers: a prefix, a GNU long name, a PAX path or link that leaves the tree is refused", async () => {
  await assert.rejects(
    check(Buffer.concat([rawHeader({ name: "evil", type: "0", prefix: ".." }), END])),
    /entry name with "\.\."/,
  );
  const longName = withData(rawHeader({ name: "././@LongLink", type: "L", size: 12 }), "../../escape\0");
  await assert.rejects(
    check(Buffer.concat([longName, rawHeader({ name: "harmless", type: "0" }), END])),
    /"\.\."/,
  );
  const pax = paxData([["path", "/etc/cron.d/x"]]);
  await assert.rejects(
    check(
      Buffer.concat([
        withData(rawHeader({ name: "PaxHeader", type: "x", size: pax.length }), pax),
        rawHeader({ name: "ok", type: "0" }),
        END,
      ]),
    ),
    /absolute entry name \/etc\/cron.d\/x/,
  );
  const link = paxData([["linkpath", "../../../etc/shadow"]]);
  await assert.rejects(
    check(
      Buffer.concat([
        withData(rawHeader({ name: "PaxHeader", type: "x", size: link.length }), link),
        rawHeader({ name: "l", type: "2", linkname: "fine" }),
        END,
      ]),
    ),
    /symlink l → \.\.\/\.\.\/\.\.\/etc\/shadow escapes/,
  );
  const twice = paxData([["path", "a"]]);
  const paxTwice = withData(rawHeader({ name: "PaxHeader", type: "x", size: twice.length }), twice);
  await assert.rejects(
    check(Buffer.concat([paxTwice, paxTwice, rawHeader({ name: "b", type: "0" }), END])),
    /two PAX headers/,
  );
  const sparse = paxData([["GNU.sparse.major", "1"]]);
  await assert.rejects(
    check(
      Buffer.concat([
        withData(rawHeader({ name: "P", type: "x", size: sparse.length }), sparse),
        rawHeader({ name: "s", type: "0" }),
        END,
      ]),
    ),
    /sparse files are not accepted/,
  );
  await assert.rejects(
    check(Buffer.concat([rawHeader({ name: "dev", type: "3" }), END])),
    /dev is a character device/,
  );
  await assert.rejects(check(Buffer.concat([rawHeader({ name: "fifo", type: "6" }), END])), /fifo is a FIFO/);
  const bad = rawHeader({ name: "x", type: "0" });
  bad[0] = "y".charCodeAt(0); // the checksum no longer matches
  await assert.rejects(check(Buffer.concat([bad, END])), /checksum does not match/);
  await assert.rejects(check(Buffer.from("\x1f\x8b\x08\x00not a tar at all".padEnd(600, "z"))), /bad tar/);
  // Cut inside a file's data, and with no end marker.
  await assert.rejects(
    check(Buffer.concat([rawHeader({ name: "f", type: "0", size: 4096 }), Buffer.alloc(100)])),
    /ended inside f/,
  );
  await assert.rejects(check(rawHeader({ name: "f", type: "0" })), /ended before its end marker/);
});

test("what leaves is written anew: extended attributes, global headers, prefixes and long names do not pass as they came", async () => {
  const xattr = paxData([
    ["SCHILY.xattr.security.capability", "\x01\x00\x00\x02\xff\xff\xff\xff"],
    ["mtime", "1.5"],
  ]);
  const global = paxData([["path", "../../global"]]);
  const longName = `${"d/".repeat(70)}file`; // 144 bytes: a GNU long name in, a PAX path out
  const gnu = withData(
    rawHeader({ name: "././@LongLink", type: "L", size: longName.length + 1 }),
    `${longName}\0`,
  );
  const input = Buffer.concat([
    withData(rawHeader({ name: "pax_global_header", type: "g", size: global.length }), global),
    withData(rawHeader({ name: "PaxHeader", type: "x", size: xattr.length }), xattr),
    withData(rawHeader({ name: "cap", type: "0", size: 5, mode: 0o6755 }), "caps!"),
    withData(rawHeader({ name: "name", type: "0", size: 6, prefix: "in/a/prefix" }), "prefix"),
    withData(gnu, ""),
    withData(rawHeader({ name: "truncated", type: "0", size: 4 }), "long"),
    rawHeader({ name: "dir", type: "5", size: 1024 }), // a directory's size is not data
    END,
    Buffer.alloc(10240 - 512 * 2), // a record's padding after the end marker
  ]);
  const { result, out } = await check(input);
  assert.deepEqual(result, { entries: 4, bytes: 15 });
  const text = out.toString("latin1");
  assert.doesNotMatch(text, /SCHILY|security\.capability|global|@LongLink|mtime=/);
  const x = tar.extract();
  const seen: [string, string, string][] = [];
  x.on("entry", (h, s, next) => {
    const body: Buffer[] = [];
    s.on("data", (c) => body.push(c as Buffer));
    s.on("end", () => {
      seen.push([h.name, (h.mode ?? 0).toString(8), Buffer.concat(body).toString()]);
      next();
    });
  });
  await new Promise<void>((resolve, reject) => {
    x.on("finish", resolve).on("error", reject);
    x.end(out);
  });
  assert.deepEqual(seen, [
    ["cap", "755", "caps!"],
    ["in/a/prefix/name", "644", "prefix"],
    [longName, "644", "long"],
    ["dir/", "644", ""],
  ]);
  // No header of the output uses the prefix field: every reader takes the name from one place.
  for (let off = 0; off + 512 <= out.length; off += 512) {
    const block = out.subarray(off, off + 512);
    if (block.toString("latin1", 257, 263) === "ustar\0") assert.equal(block[345], 0, `prefix at ${off}`);
  }
});

test("GNU tar's own archives pass byte for byte: long names, non-UTF-8 names, large ids, empty and odd-sized files", async () => {
  const { mkdtempSync, writeFileSync, mkdirSync, readFileSync, rmSync } = await import("node:fs");
  const { execFileSync } = await import("node:child_process");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const root = mkdtempSync(join(tmpdir(), "tar-check-"));
  try {
    const src = join(root, "src");
    const deep = join(src, "x".repeat(90), "y".repeat(90));
    mkdirSync(deep, { recursive: true });
    const payload = Buffer.alloc(1024 * 1024 + 77);
    for (let i = 0; i < payload.length; i++) payload[i] = (i * 31) & 0xff;
    writeFileSync(join(deep, "z".repeat(120)), payload);
    writeFileSync(Buffer.from([...Buffer.from(`${src}/`), 0xff, 0xfe, 0x0a, 0x41]), "not utf-8\n");
    writeFileSync(join(src, "empty"), "");
    for (const format of ["gnu", "pax"]) {
      const archive = execFileSync(
        "tar",
        [
          `--format=${format}`,
          "--owner=3000000",
          "--group=12",
          "--numeric-owner",
          "-C",
          src,
          "-cf",
          "-",
          ".",
        ],
        {
          maxBuffer: 64 << 20,
        },
      );
      const { out } = await check(archive);
      const dest = join(root, `out-${format}`);
      mkdirSync(dest);
      execFileSync("tar", ["--numeric-owner", "-xf", "-", "-C", dest], { input: out });
      assert.deepEqual(
        readFileSync(join(dest, "x".repeat(90), "y".repeat(90), "z".repeat(120))),
        payload,
        format,
      );
      assert.equal(
        readFileSync(Buffer.from([...Buffer.from(`${dest}/`), 0xff, 0xfe, 0x0a, 0x41])).toString(),
        "not utf-8\n",
      );
      assert.equal(readFileSync(join(dest, "empty")).length, 0);
      const listed = execFileSync("tar", ["--numeric-owner", "-tvf", "-"], { input: out }).toString();
      assert.match(listed, /3000000\/12/, `${format}: a uid past the octal field's reach is kept (PAX)`);
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("a refusal reaches the reader of the checked tar as an error (an engine upload reading it is aborted, not left waiting)", async () => {
  const out = new PassThrough();
  const seen = new Promise<Error>((resolve) => out.on("error", resolve));
  await assert.rejects(
    sanitizeTar(Readable.from([rawHeader({ name: "../up", type: "0" }), END]), out),
    /entry name with "\.\."/,
  );
  assert.match((await seen).message, /bad tar: entry name with "\.\."/);
  assert.equal(out.destroyed, true);
});

test("the tree's own folder entry is not one of its entries: its owner and mode are answered apart", async () => {
  const pack = tar.pack();
  pack.entry({ name: "./", type: "directory", uid: 1000, gid: 1001, mode: 0o750 });
  pack.entry({ name: "a.txt", uid: 1000, gid: 1001, mode: 0o644 }, "a\n");
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack) chunks.push(c as Buffer);
  const out = new PassThrough();
  out.resume();
  const r = await sanitizeTar(Readable.from([Buffer.concat(chunks)]), out);
  assert.deepEqual(r, { entries: 1, bytes: 2, root: { uid: 1000, gid: 1001, mode: 0o750 } });
});
