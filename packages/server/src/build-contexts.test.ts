import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, readdirSync, utimesSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Readable } from "node:stream";
import { test } from "node:test";
import { BuildContexts, normalizedTar } from "./build-contexts.ts";

const digestOf = (b: Buffer) => `sha256:${createHash("sha256").update(b).digest("hex")}`;

test("a context is kept only under the digest it has; a forged or oversize one is never kept", async () => {
  const store = new BuildContexts(mkdtempSync(join(tmpdir(), "ctx-")), 1000);
  const body = Buffer.alloc(512, 7);
  assert.equal(await store.put("team_a", digestOf(body), Readable.from([body])), 512);
  assert.equal(await store.size("team_a", digestOf(body)), 512);
  assert.equal(await store.size("team_b", digestOf(body)), null);
  await assert.rejects(
    store.put("team_a", `sha256:${"1".repeat(64)}`, Readable.from([body])),
    /cut or changed/,
  );
  const big = Buffer.alloc(2000);
  await assert.rejects(store.put("team_a", digestOf(big), Readable.from([big])), /over 1000 bytes/);
  await assert.rejects(store.size("team_a", "sha256:../../x"), /not a sha256/);
  // Nothing but the one good context is left behind (no partial files).
  assert.deepEqual(readdirSync(join(store.dir, "team_a")), [`${digestOf(body).slice(7)}.tar`]);
});

test("prune lets go of what no project names, once it is older than the grace", async () => {
  const store = new BuildContexts(mkdtempSync(join(tmpdir(), "ctx-")));
  const [a, b, c] = [1, 2, 3].map((n) => Buffer.alloc(100, n)) as [Buffer, Buffer, Buffer];
  for (const x of [a, b, c]) await store.put("team_a", digestOf(x), Readable.from([x]));
  const old = new Date(Date.now() - 7200_000);
  for (const x of [a, b]) utimesSync(join(store.dir, "team_a", `${digestOf(x).slice(7)}.tar`), old, old);
  const removed = await store.prune("team_a", new Set([digestOf(a)]), 3600_000);
  assert.deepEqual(removed, [digestOf(b)]);
  assert.equal(await store.size("team_a", digestOf(a)), 100);
  assert.equal(await store.size("team_a", digestOf(c)), 100, "a fresh upload survives");
  assert.deepEqual(await store.prune("team_none", new Set(), 0), []);
});

test("normalizedTar: a source that fails before anyone reads (git refusing at once) fails the store, never hangs", async () => {
  for (const delayMs of [0, 1, 30]) {
    const source = new PassThrough();
    const tarred = normalizedTar(source);
    const fail = () => source.destroy(new Error("git said no"));
    if (delayMs === 0) fail();
    else setTimeout(fail, delayMs);
    const store = new BuildContexts(mkdtempSync(join(tmpdir(), "ctx-")));
    await assert.rejects(store.putStream("team_a", tarred), /git said no/);
    assert.deepEqual(readdirSync(join(store.dir, "team_a")), []);
  }
});

test("normalizedTar: the same entries make the same bytes, whatever their times", async () => {
  const tar = (await import("tar-stream")).default;
  const make = async (mtime: Date) => {
    const pack = tar.pack();
    pack.entry({ name: "d/", type: "directory", mtime });
    pack.entry({ name: "d/f", mtime }, "hello");
    pack.entry({ name: "d/l", type: "symlink", linkname: "/etc/shadow", mtime });
    pack.finalize();
    const chunks: Buffer[] = [];
    for await (const c of normalizedTar(pack as unknown as Readable)) chunks.push(c as Buffer);
    return Buffer.concat(chunks);
  };
  const one = await make(new Date(1000));
  const two = await make(new Date(2_000_000_000_000));
  assert.deepEqual(one, two);
  const names: string[] = [];
  const extract = tar.extract();
  extract.on("entry", (h, s, next) => {
    names.push(`${h.type}:${h.name}${h.linkname ? `->${h.linkname}` : ""}`);
    s.resume();
    s.on("end", next);
  });
  await new Promise((resolve, reject) => {
    extract.on("finish", () => resolve(undefined));
    extract.on("error", reject);
    extract.end(one);
  });
  assert.deepEqual(names, ["directory:d/", "file:d/f", "symlink:d/l->/etc/shadow"]);
});
