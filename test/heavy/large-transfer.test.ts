/**
 * A file far larger than memory each way through the API (10 GiB unless DENV_TRANSFER_GIB says
 * otherwise), with the server and denvd each in its own process: every MiB lands where it belongs,
 * and neither process's peak memory grows with the file. The figures are printed; the benchmark
 * (bench/transfer-bench.ts) times the same path beside `docker cp`.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  execStreamed,
  getThroughApi,
  openTransferRig,
  peakRssBytes,
  putThroughApi,
  resetPeakRss,
  type TransferRig,
} from "../../bench/transfer-rig.ts";

const GIB = 1024 ** 3;
const size = Math.round(Number(process.env.DENV_TRANSFER_GIB ?? "10") * GIB);
/**
 * Flat: what a process holds at rest, plus a few stream windows and the buffers the garbage
 * collector has not reclaimed yet; nowhere near the file's size.
 */
const RSS_GROWTH_LIMIT_BYTES = 256 * 1024 ** 2;
const mib = (n: number) => Math.round(n / 1024 ** 2);

let rig: TransferRig;

before(async () => {
  rig = await openTransferRig();
});

after(async () => {
  await rig?.close();
});

/** Resets both processes' peaks; returns a check of how far each grew past where it was. */
function watchMemory(what: string): () => void {
  const rest = [resetPeakRss(rig.serverPid), resetPeakRss(rig.denvdPid)] as const;
  return () => {
    const peak = [peakRssBytes(rig.serverPid), peakRssBytes(rig.denvdPid)] as const;
    process.stdout.write(
      `# ${what}: peak RSS server ${mib(peak[0])} MiB (${mib(rest[0])} at rest), denvd ${mib(peak[1])} MiB (${mib(rest[1])} at rest)\n`,
    );
    assert.ok(peak[0] - rest[0] < RSS_GROWTH_LIMIT_BYTES, `the server grew by ${mib(peak[0] - rest[0])} MiB`);
    assert.ok(peak[1] - rest[1] < RSS_GROWTH_LIMIT_BYTES, `denvd grew by ${mib(peak[1] - rest[1])} MiB`);
  };
}

test(`a ${size / GIB} GiB file goes in and comes out whole, and memory stays flat`, async () => {
  const memory = watchMemory(`${size / GIB} GiB each way`);
  const put = await putThroughApi(rig, "/home/big", "file.bin", size);
  assert.equal(put.status, 200, JSON.stringify(put.body));
  assert.equal(put.body.entries, 1);
  const stat = await fetch(`${rig.url}/v1/envs/${rig.sandboxId}/files/stat?path=/home/big/file.bin`, {
    headers: { authorization: `Bearer ${rig.key}` },
  });
  assert.equal(((await stat.json()) as { size: number }).size, size);
  const got = await getThroughApi(rig, "/home/big/file.bin");
  assert.equal(got.status, 200);
  assert.equal(got.wrong, 0, "every MiB carries its own index");
  assert.equal(got.blocksChecked, Math.ceil(size / 1024 ** 2));
  assert.ok(got.bytes >= size + 512 && got.bytes <= size + 512 + 10_240 + 512, `tar of ${got.bytes} bytes`);
  process.stdout.write(
    `# ${size / GIB} GiB: put ${Math.round(size / 1024 ** 2 / (put.ms / 1000))} MiB/s, get ${Math.round(size / 1024 ** 2 / (got.ms / 1000))} MiB/s\n`,
  );
  memory();
});

test("a command reads 1 GiB of stdin while it writes 1 GiB of output, and memory stays flat", async () => {
  const bytes = Math.min(size, GIB);
  const memory = watchMemory(`exec of ${bytes / GIB} GiB each way`);
  // cat: output as fast as input; neither side may wait for the other to finish first.
  const cat = await execStreamed(rig, { command: ["cat"] }, bytes);
  assert.equal(cat.status, 200);
  assert.equal(cat.error, null, JSON.stringify(cat.error));
  assert.equal(cat.result?.exit_code, 0, cat.stderr);
  assert.equal(cat.stdoutBytes, bytes);
  // Its input read whole by a command that writes nothing until the end.
  const count = await execStreamed(rig, { command: ["sh", "-c", "wc -c >&2"] }, bytes);
  assert.equal(count.result?.exit_code, 0);
  assert.equal(count.stderr.trim(), String(bytes));
  process.stdout.write(
    `# exec: cat of ${bytes / GIB} GiB at ${Math.round(bytes / 1024 ** 2 / (cat.ms / 1000))} MiB/s each way\n`,
  );
  memory();
});
