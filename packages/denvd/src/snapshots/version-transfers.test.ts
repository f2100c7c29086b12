/**
 * A replica's bytes are checked before they become a version: `btrfs receive` takes a stream cut at
 * a command's boundary as whole (it exits 0 and marks the subvolume read-only), so the sha256 the
 * receiving host counted is compared with the sender's, and a mismatch keeps nothing. Real btrfs
 * pools on loop images; the records are denvd's own state files.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { PassThrough, Readable } from "node:stream";
import { after, test } from "node:test";
import type { ResolvedSpec } from "@denv/protocol";
import { waitFor } from "../../../../test/harness/wait-for.ts";
import { StateStore } from "../host/state-store.ts";
import type { StackContext } from "../stack/stack-context.ts";
import { BtrfsDriver } from "../storage/btrfs-driver.ts";
import { VersionTransfers } from "./version-transfers.ts";

const runDir = join("/var/lib/denv-test", `transfers-${randomBytes(4).toString("hex")}`);
const pools: BtrfsDriver[] = [];

after(async () => {
  for (const p of pools) await p.unmount().catch(() => {});
  await rm(runDir, { recursive: true, force: true });
});

/** A host's records and pool, as the transfer code sees them (no engine: no image is asked for). */
async function side(name: string) {
  const dir = join(runDir, name);
  await mkdir(dir, { recursive: true });
  const storage = new BtrfsDriver({ stateDir: dir, imageSizeBytes: 1024 ** 3 });
  pools.push(storage);
  await storage.init();
  const store = await StateStore.open(join(dir, "state"));
  const ctx = {
    store,
    storage,
    log: () => {},
    version: (id: string) => {
      const v = store.version(id);
      if (!v) throw new Error(`no version ${id}`);
      return v;
    },
  } as unknown as StackContext;
  return { storage, store, transfers: new VersionTransfers(ctx) };
}

test("a replica whose bytes differ from what was sent is refused, and nothing of it is kept", async () => {
  const a = await side("a");
  const b = await side("b");
  const ds = await a.storage.createDataset("ds1");
  await writeFile(join(ds.path, "f1"), randomBytes(256 * 1024));
  await writeFile(join(ds.path, "f2"), randomBytes(256 * 1024));
  const versionId = "ver_0123456789ab";
  await a.storage.snapshot("ds1", `${versionId}-data`);
  await a.store.putVersion({
    id: versionId,
    stackId: "stk_0123456789ab",
    specHash: "h",
    spec: {} as ResolvedSpec,
    images: {},
    snapshots: { data: `${versionId}-data` },
    frozenMs: 1,
    createdAt: new Date().toISOString(),
  });
  const described = a.transfers.describe(versionId);
  assert.deepEqual(described.formats, ["btrfs-send", "tar"]);
  const out = new PassThrough();
  const chunks: Buffer[] = [];
  out.on("data", (c: Buffer) => chunks.push(c));
  const sent = await a.transfers.send(
    { version_id: versionId, volume: "data", format: "btrfs-send", out_stream: 1 },
    out,
  );
  const whole = Buffer.concat(chunks);
  assert.equal(sent.bytes, whole.length);

  // The same stream cut at a command's boundary, halfway. Whether `btrfs receive` takes that as
  // whole depends on where it stops (it can exit 0 with the subvolume marked read-only): either
  // way no version may come of it. (A send stream: a 17-byte header, then commands of u32 length,
  // u16 type, u32 crc, payload.)
  const boundaries: number[] = [];
  for (let at = 17; at < whole.length; at += 10 + whole.readUInt32LE(at)) boundaries.push(at);
  const cut = whole.subarray(0, boundaries[Math.floor(boundaries.length / 2)]);
  const got = await b.transfers
    .receive(
      { version_id: versionId, snapshot_id: `${versionId}-data`, format: "btrfs-send", in_stream: 1 },
      Readable.from([cut]) as unknown as PassThrough,
    )
    .catch((err: Error) => err);
  if (!(got instanceof Error)) assert.notEqual(got.sha256, sent.sha256);
  else assert.deepEqual(await b.storage.listReceived(), [], "a failed receive leaves nothing staged");
  await assert.rejects(
    b.transfers.adopt({ version: described.version, sha256: { [`${versionId}-data`]: sent.sha256 } }),
    /not what was sent|was not received/,
  );
  assert.equal(b.store.version(versionId), undefined);
  assert.deepEqual(await b.storage.listReceived(), []);
  assert.ok(!(await b.storage.listSnapshots()).includes(`${versionId}-data`));

  // A stream that arrived whole but differs from what the sender counted (altered on the way).
  await b.transfers.receive(
    { version_id: versionId, snapshot_id: `${versionId}-data`, format: "btrfs-send", in_stream: 1 },
    Readable.from([whole]) as unknown as PassThrough,
  );
  assert.deepEqual(await b.storage.listReceived(), [`${versionId}-data`]);
  await assert.rejects(
    b.transfers.adopt({ version: described.version, sha256: { [`${versionId}-data`]: "0".repeat(64) } }),
    /not what was sent/,
  );
  assert.equal(b.store.version(versionId), undefined);
  assert.deepEqual(await b.storage.listReceived(), []);

  // The whole stream, and its sender's count: adopted, forkable, the same bytes.
  await b.transfers.receive(
    { version_id: versionId, snapshot_id: `${versionId}-data`, format: "btrfs-send", in_stream: 1 },
    Readable.from([whole]) as unknown as PassThrough,
  );
  await b.transfers.adopt({ version: described.version, sha256: { [`${versionId}-data`]: sent.sha256 } });
  assert.ok(b.store.version(versionId));
  const clone = await b.storage.clone(`${versionId}-data`, "clone1");
  assert.deepEqual(await readFile(join(clone.path, "f2")), await readFile(join(ds.path, "f2")));
  // Adopting again (an answer lost, the call sent again) changes nothing.
  await b.transfers.adopt({ version: described.version, sha256: { [`${versionId}-data`]: sent.sha256 } });
});

test("a version being sent cannot be deleted from under the transfer", async () => {
  const a = await side("c");
  const ds = await a.storage.createDataset("ds2");
  await writeFile(join(ds.path, "f"), randomBytes(4 * 1024 * 1024));
  const versionId = "ver_ba9876543210";
  await a.storage.snapshot("ds2", `${versionId}-data`);
  const rec = {
    id: versionId,
    stackId: "stk_0123456789ab",
    specHash: "h",
    spec: {} as ResolvedSpec,
    images: {},
    snapshots: { data: `${versionId}-data` },
    frozenMs: 1,
    createdAt: new Date().toISOString(),
  };
  await a.store.putVersion(rec);
  // A reader that takes nothing: the send stalls on flow control, holding the snapshot.
  const out = new PassThrough({ highWaterMark: 1024 });
  const sending = a.transfers.send(
    { version_id: versionId, volume: "data", format: "tar", out_stream: 1 },
    out,
  );
  sending.catch(() => {});
  await waitFor("the stalled send to hold its snapshot", () => a.transfers.holdsAny(rec));
  assert.equal(a.transfers.holdsAny(rec), true);
  out.destroy(new Error("the reader went away"));
  await assert.rejects(sending);
  assert.equal(a.transfers.holdsAny(rec), false);
});
