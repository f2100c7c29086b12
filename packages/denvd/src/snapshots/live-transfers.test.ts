/**
 * A live version's process images moving to another host: the receiving host takes them only when
 * the bytes are what the sender counted and the tree is what the version's record says (its
 * digest), never a tar that reaches outside its directory, and never where its CPU lacks a flag
 * they were taken with. Two hosts' records and state directories; the images are files of random
 * bytes where CRIU's would be (nothing here restores them).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { PassThrough, Transform } from "node:stream";
import { after, test } from "node:test";
import type { OpCheckedParams } from "@denv/protocol";
import { pack } from "tar-stream";
import { type LiveRecord, StateStore } from "../host/state-store.ts";
import type { StackContext } from "../stack/stack-context.ts";
import { hostCpuFlags, missingCpuFlags } from "./cpu-flags.ts";
import { liveDigest, liveDir } from "./live-capture.ts";
import { liveIncomingDir } from "./live-transfers.ts";
import { VersionTransfers } from "./version-transfers.ts";

const runDir = join("/var/lib/denv-test", `live-transfers-${randomBytes(4).toString("hex")}`);
after(() => rm(runDir, { recursive: true, force: true }));

async function side(name: string) {
  const dir = join(runDir, name);
  await mkdir(dir, { recursive: true });
  const store = await StateStore.open(join(dir, "state"));
  const ctx = {
    store,
    // No volumes move here: the storage is only named.
    storage: { kind: "dir", transferFormats: ["tar"] },
    options: { stateDir: dir },
    log: () => {},
    version: (id: string) => {
      const v = store.version(id);
      if (!v) throw new Error(`no version ${id}`);
      return v;
    },
  } as unknown as StackContext;
  return { dir, ctx, store, transfers: new VersionTransfers(ctx) };
}

let n = 0;
/** A version on `a` whose service "sim" has process images (random bytes) and a sealed record. */
async function liveVersionOn(a: Awaited<ReturnType<typeof side>>, extraFlag?: string) {
  const id = `ver_${String(++n).padStart(12, "0")}`;
  const images = join(liveDir(a.ctx, id), "sim", "images");
  await mkdir(images, { recursive: true, mode: 0o700 });
  await writeFile(join(images, "pages-1.img"), randomBytes(200 * 1024), { mode: 0o600 });
  await writeFile(join(liveDir(a.ctx, id), "sim", "layer.tar"), randomBytes(10 * 1024), { mode: 0o600 });
  const live: LiveRecord = {
    services: {
      sim: {
        checkpointBytes: 200 * 1024,
        layerBytes: 10 * 1024,
        dumpMs: 5,
        digest: await liveDigest(a.ctx, id, "sim"),
      },
    },
    skipped: {},
    cpuFlags: [...(await hostCpuFlags()), ...(extraFlag ? [extraFlag] : [])],
  };
  await a.store.putVersion({
    id,
    stackId: "stk_0123456789ab",
    specHash: "h",
    spec: { hash: "h", services: {} } as never,
    images: {},
    snapshots: {},
    frozenMs: 1,
    createdAt: new Date().toISOString(),
    live,
  });
  return id;
}

/** Sends `sim`'s images from a to b (through `via`, if given); answers both counts. */
async function move(
  a: Awaited<ReturnType<typeof side>>,
  b: Awaited<ReturnType<typeof side>>,
  id: string,
  via?: Transform,
) {
  const wire = new PassThrough();
  const into = new PassThrough();
  (via ? wire.pipe(via) : wire).pipe(into);
  const p = { version_id: id, service: "sim" };
  const [sent, got] = await Promise.all([
    a.transfers.sendLive({ ...p, out_stream: 1 } as OpCheckedParams<"send_live">, wire as never),
    b.transfers.receiveLive({ ...p, in_stream: 2 } as OpCheckedParams<"receive_live">, into as never),
  ]);
  return { sent, got };
}

const adopt = (
  a: Awaited<ReturnType<typeof side>>,
  b: Awaited<ReturnType<typeof side>>,
  id: string,
  liveSha: string,
) =>
  b.transfers.adopt({
    version: a.transfers.describe(id).version,
    sha256: {},
    live_sha256: { sim: liveSha },
  } as OpCheckedParams<"adopt_version">);

test("process images sent whole are adopted with the version, the same tree as the sender's", async () => {
  const [a, b] = [await side("a1"), await side("b1")];
  const id = await liveVersionOn(a);
  const { sent, got } = await move(a, b, id);
  assert.equal(got.sha256, sent.sha256);
  const r = await adopt(a, b, id, sent.sha256);
  assert.deepEqual(r.live, ["sim"]);
  assert.equal(await liveDigest(b.ctx, id, "sim"), a.store.version(id)?.live?.services.sim?.digest);
  assert.equal(
    b.store.version(id)?.live?.services.sim?.digest,
    a.store.version(id)?.live?.services.sim?.digest,
  );
  assert.equal(existsSync(join(liveIncomingDir(b.ctx), id)), false, "nothing left staged");
});

test("a byte changed on the way, or images other than the record's, are refused and nothing is kept", async () => {
  const [a, b] = [await side("a2"), await side("b2")];
  const id = await liveVersionOn(a);
  // One byte flipped in the middle of the stream: the receiver's count differs from the sender's.
  let seen = 0;
  const flip = new Transform({
    transform(chunk: Buffer, _e, done) {
      const out = Buffer.from(chunk);
      const at = 100_000 - seen;
      if (at >= 0 && at < out.length) out[at] = (out[at] as number) ^ 0xff;
      seen += out.length;
      done(null, out);
    },
  });
  const cut = await move(a, b, id, flip);
  await assert.rejects(adopt(a, b, id, cut.sent.sha256), /process images arrived as .* sent as/);
  assert.equal(b.store.version(id), undefined);
  assert.equal(existsSync(join(liveIncomingDir(b.ctx), id)), false);
  assert.equal(existsSync(liveDir(b.ctx, id)), false);

  // A sending host that sends other images, counted honestly: the record's digest refuses them.
  await writeFile(join(liveDir(a.ctx, id), "sim", "images", "pages-1.img"), randomBytes(200 * 1024));
  const other = await move(a, b, id);
  await assert.rejects(adopt(a, b, id, other.sent.sha256), /arrived as sha256:.*recorded as sha256:/);
  assert.equal(b.store.version(id), undefined);
  assert.equal(existsSync(liveDir(b.ctx, id)), false);
});

test("a tar that reaches outside its directory is refused as it arrives; nothing lands outside", async () => {
  const b = await side("b3");
  const tar = pack();
  tar.entry({ name: "images/ok.img" }, "fine");
  tar.entry({ name: "../../escaped" }, "out");
  tar.finalize();
  await assert.rejects(
    b.transfers.receiveLive(
      { version_id: "ver_00000000beef", service: "sim", in_stream: 2 } as OpCheckedParams<"receive_live">,
      tar as never,
    ),
  );
  assert.equal(existsSync(join(b.dir, "escaped")), false);
  assert.equal(existsSync(join(liveIncomingDir(b.ctx), "escaped")), false);
  assert.equal(
    existsSync(join(liveIncomingDir(b.ctx), "ver_00000000beef", "sim", "images", "ok.img")),
    false,
  );
});

test("a host whose CPU lacks a flag the processes were taken with adopts the version disk-only, saying why", async () => {
  const [a, b] = [await side("a4"), await side("b4")];
  const id = await liveVersionOn(a, "denv_test_only_flag");
  const { sent } = await move(a, b, id);
  const r = await adopt(a, b, id, sent.sha256);
  assert.deepEqual(r.live, []);
  assert.match(r.live_refused ?? "", /CPU lacks denv_test_only_flag/);
  assert.ok(b.store.version(id), "the version itself is adopted");
  assert.equal(b.store.version(id)?.live, undefined);
  assert.equal(existsSync(liveDir(b.ctx, id)), false);
  assert.equal(existsSync(join(liveIncomingDir(b.ctx), id)), false);
});

test("CPU flags: read from cpuinfo's first processor; what a CPU lacks is listed", async () => {
  assert.deepEqual(
    await hostCpuFlags("processor\t: 0\nflags\t\t: fpu sse2 avx2 $(x)\nprocessor\t: 1\nflags\t\t: fpu\n"),
    ["avx2", "fpu", "sse2"],
  );
  assert.deepEqual(await hostCpuFlags("Features\t: fp asimd aes\n"), ["aes", "asimd", "fp"]);
  assert.deepEqual(missingCpuFlags(["avx2", "avx512f"], ["avx2", "sse2"]), ["avx512f"]);
  assert.deepEqual(missingCpuFlags(undefined, []), []);
});
