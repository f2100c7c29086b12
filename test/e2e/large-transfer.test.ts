/**
 * A file far larger than memory each way through the API (10 GiB unless DENV_TRANSFER_GIB says
 * otherwise), with the server and denvd each in its own process: every MiB lands where it belongs,
 * and neither process's peak memory grows with the file. The figures are printed; the benchmark
 * (bench/transfer-bench.ts) times the same path beside `docker cp`.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  getThroughApi,
  openTransferRig,
  peakRssBytes,
  putThroughApi,
  type TransferRig,
} from "../../bench/transfer-rig.ts";

const GIB = 1024 ** 3;
const size = Math.round(Number(process.env.DENV_TRANSFER_GIB ?? "10") * GIB);
/** Flat: what the processes hold at rest plus a few windows, nowhere near the file's size. */
const RSS_LIMIT_BYTES = 512 * 1024 ** 2;
const mib = (n: number) => Math.round(n / 1024 ** 2);

let rig: TransferRig;

before(async () => {
  rig = await openTransferRig();
});

after(async () => {
  await rig?.close();
});

test(`a ${size / GIB} GiB file goes in and comes out whole, and memory stays flat`, async () => {
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
  const serverRss = peakRssBytes(rig.serverPid);
  const denvdRss = peakRssBytes(rig.denvdPid);
  process.stdout.write(
    `# ${size / GIB} GiB: put ${Math.round(size / 1024 ** 2 / (put.ms / 1000))} MiB/s, get ${Math.round(size / 1024 ** 2 / (got.ms / 1000))} MiB/s; peak RSS server ${mib(serverRss)} MiB, denvd ${mib(denvdRss)} MiB\n`,
  );
  assert.ok(serverRss < RSS_LIMIT_BYTES, `server peak RSS ${mib(serverRss)} MiB`);
  assert.ok(denvdRss < RSS_LIMIT_BYTES, `denvd peak RSS ${mib(denvdRss)} MiB`);
});
