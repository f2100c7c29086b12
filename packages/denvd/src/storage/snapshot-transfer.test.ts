/**
 * Snapshots moving between two pools, as replicas move between hosts: btrfs to btrfs as `btrfs
 * send`/`receive` (full, then incremental on a base both hold), btrfs to dir as a tar, and the
 * hostile cases: a stream that names another snapshot, a tar that climbs out, a stream cut short.
 * Real btrfs on loop images under /var/lib/denv-test, as the storage contract uses.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { chown, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { PassThrough, Readable } from "node:stream";
import { after, test } from "node:test";
import tar from "tar-stream";
import { BtrfsDriver } from "./btrfs-driver.ts";
import { DirDriver } from "./dir-driver.ts";
import type { SnapshotFormat, StorageDriver } from "./storage-driver.ts";

const runDir = join("/var/lib/denv-test", `transfer-${randomBytes(4).toString("hex")}`);
const a = new BtrfsDriver({ stateDir: join(runDir, "a"), imageSizeBytes: 2 * 1024 ** 3 });
const b = new BtrfsDriver({ stateDir: join(runDir, "b"), imageSizeBytes: 2 * 1024 ** 3 });
const d = new DirDriver(join(runDir, "d"));
const id = (p: string) => `${p}-${randomBytes(3).toString("hex")}`;

after(async () => {
  await a.unmount().catch(() => {});
  await b.unmount().catch(() => {});
  await rm(runDir, { recursive: true, force: true });
});

/** Sends a snapshot from one pool into another's staging; resolves to the bytes moved. */
async function move(
  from: StorageDriver,
  to: StorageDriver,
  snap: string,
  format: SnapshotFormat,
  base?: string,
): Promise<number> {
  const send = await from.sendSnapshot(snap, format, base ? { baseSnapshotId: base } : {});
  let bytes = 0;
  send.stream.on("data", (c: Buffer) => {
    bytes += c.length;
  });
  const pass = new PassThrough();
  send.stream.pipe(pass);
  await Promise.all([to.receiveSnapshot(snap, format, pass), send.done]);
  return bytes;
}

test("btrfs to btrfs: a full stream, then an incremental one on a base both hold", async () => {
  await Promise.all([a.init(), b.init()]);
  const ds = await a.createDataset(id("ds"));
  await writeFile(join(ds.path, "big"), randomBytes(4 * 1024 * 1024));
  await writeFile(join(ds.path, "owned"), "mine");
  await chown(join(ds.path, "owned"), 1000, 1000);
  await symlink("/etc/passwd", join(ds.path, "abs-link"));
  const s1 = (await a.snapshot(ds.id, id("s1"))).id;
  const full = await move(a, b, s1, "btrfs-send");
  // Staged: neither listed nor cloneable until committed.
  assert.ok(!(await b.listSnapshots()).includes(s1));
  assert.deepEqual(await b.listReceived(), [s1]);
  await b.commitReceived(s1);
  assert.ok((await b.listSnapshots()).includes(s1));
  assert.deepEqual(await b.listReceived(), []);
  const c1 = await b.clone(s1, id("c1"));
  assert.equal((await stat(join(c1.path, "owned"))).uid, 1000);
  assert.equal((await stat(join(c1.path, "big"))).size, 4 * 1024 * 1024);

  await writeFile(join(ds.path, "owned"), "changed");
  const s2 = (await a.snapshot(ds.id, id("s2"))).id;
  const incremental = await move(a, b, s2, "btrfs-send", s1);
  await b.commitReceived(s2);
  assert.ok(incremental < full / 10, `incremental ${incremental} bytes, full ${full}`);
  const c2 = await b.clone(s2, id("c2"));
  assert.equal(await readFile(join(c2.path, "owned"), "utf8"), "changed");
  assert.equal((await stat(join(c2.path, "big"))).size, 4 * 1024 * 1024);
  // A received snapshot is destroyed as any other.
  await b.destroyDataset(c1.id);
  await b.destroyDataset(c2.id);
  await b.destroySnapshot(s1);
  assert.ok(!(await b.listSnapshots()).includes(s1));
  assert.ok(!existsSync(join(b.poolPath, "received", s1)));
});

test("btrfs to dir, as a tar: owners and links kept", async () => {
  await Promise.all([a.init(), d.init()]);
  const ds = await a.createDataset(id("ds"));
  await writeFile(join(ds.path, "owned"), "mine");
  await chown(join(ds.path, "owned"), 1000, 1000);
  await symlink("../../outside", join(ds.path, "rel-link"));
  const s = (await a.snapshot(ds.id, id("s"))).id;
  await move(a, d, s, "tar");
  await d.commitReceived(s);
  const c = await d.clone(s, id("c"));
  assert.equal((await stat(join(c.path, "owned"))).uid, 1000);
  assert.equal(await readFile(join(c.path, "owned"), "utf8"), "mine");
  await assert.rejects(d.sendSnapshot(s, "btrfs-send"), /does not send or take btrfs-send/);
});

test("a stream that makes another snapshot than it was sent as is refused, and nothing is kept", async () => {
  await Promise.all([a.init(), b.init()]);
  const ds = await a.createDataset(id("ds"));
  const real = (await a.snapshot(ds.id, id("real"))).id;
  const send = await a.sendSnapshot(real, "btrfs-send");
  const claimed = id("claimed");
  await assert.rejects(b.receiveSnapshot(claimed, "btrfs-send", send.stream), /not the snapshot/);
  assert.deepEqual(await b.listReceived(), []);
  assert.ok(!(await b.listSnapshots()).includes(real));
});

test("a tar that climbs out, or writes through a link it made, is refused and leaves nothing", async () => {
  await d.init();
  const hostile = (entries: (p: tar.Pack) => void) => {
    const p = tar.pack();
    entries(p);
    p.finalize();
    return p as unknown as Readable;
  };
  const marker = join(runDir, `escaped-${randomBytes(3).toString("hex")}`);
  const up = hostile((p) => p.entry({ name: `../../../${marker}` }, "x"));
  await assert.rejects(d.receiveSnapshot(id("up"), "tar", up), /bad tar/);
  const through = hostile((p) => {
    p.entry({ name: "l", type: "symlink", linkname: runDir });
    p.entry({ name: "l/escaped" }, "x");
  });
  await assert.rejects(d.receiveSnapshot(id("through"), "tar", through), /bad tar/);
  assert.ok(!existsSync(marker));
  assert.ok(!existsSync(join(runDir, "escaped")));
  assert.deepEqual(await d.listReceived(), []);
});

test("a stream cut off mid-way fails the receive and leaves nothing staged", async () => {
  await d.init();
  const cut = new Readable({ read() {} });
  const receiving = d.receiveSnapshot(id("cut"), "tar", cut);
  const p = tar.pack();
  p.entry({ name: "f", size: 1024 * 1024 }).write(Buffer.alloc(1000));
  p.on("data", (c) => cut.push(c as Buffer));
  setTimeout(() => cut.destroy(new Error("the sending host went away")), 50);
  await assert.rejects(receiving);
  assert.deepEqual(await d.listReceived(), []);
});

test("a stream whose end comes long after its last byte (a relay across a network) is received whole", async () => {
  await Promise.all([a.init(), b.init()]);
  const ds = await a.createDataset(id("late"));
  await writeFile(join(ds.path, "f"), "small");
  const snap = (await a.snapshot(ds.id, id("late-s"))).id;
  const send = await a.sendSnapshot(snap, "btrfs-send", {});
  const chunks: Buffer[] = [];
  for await (const c of send.stream) chunks.push(c as Buffer);
  await send.done;
  // Every byte now, the end later: a receive that stops at the stream's end marker closes its
  // stdin first, and the relayed stream then fails as cut.
  const late = new PassThrough();
  late.write(Buffer.concat(chunks));
  setTimeout(() => late.end(), 500);
  await b.receiveSnapshot(snap, "btrfs-send", late);
  await b.commitReceived(snap);
  const c = await b.clone(snap, id("late-c"));
  assert.equal(await readFile(join(c.path, "f"), "utf8"), "small");
  await b.destroyDataset(c.id);
});

test("a stream with a second one after its end (read now that receive goes to EOF) is refused, and nothing is kept", async () => {
  await Promise.all([a.init(), b.init()]);
  const ds = await a.createDataset(id("two"));
  const first = (await a.snapshot(ds.id, id("first"))).id;
  const extra = (await a.snapshot(ds.id, id("extra"))).id;
  const bytesOf = async (snap: string) => {
    const send = await a.sendSnapshot(snap, "btrfs-send", {});
    const chunks: Buffer[] = [];
    for await (const c of send.stream) chunks.push(c as Buffer);
    await send.done;
    return Buffer.concat(chunks);
  };
  const both = Buffer.concat([await bytesOf(first), await bytesOf(extra)]);
  await assert.rejects(b.receiveSnapshot(first, "btrfs-send", Readable.from([both])), /not the snapshot/);
  assert.deepEqual(await b.listReceived(), []);
  assert.ok(!(await b.listSnapshots()).includes(extra));
});
