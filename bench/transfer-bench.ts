/**
 * Files through the API each way, beside `docker cp` of the same tar in the same run: MiB/s over
 * several samples, then one transfer of 10 GiB each way with the peak resident memory of the
 * server and of denvd (each its own process). The tar is made as it is sent and checked as it is
 * read on both paths, so the client's work is the same for denv and for its peer.
 */

import { type Metric, metricOf, shuffled } from "./bench-stats.ts";
import {
  dockerCpIn,
  dockerCpOut,
  getThroughApi,
  openTransferRig,
  peakRssBytes,
  putThroughApi,
  resetPeakRss,
} from "./transfer-rig.ts";

const MIB = 1024 ** 2;
const GIB = 1024 ** 3;
const log = (s: string) => process.stderr.write(`${s}\n`);
const rate = (bytes: number, ms: number) => Math.round((bytes / MIB / (ms / 1000)) * 10) / 10;

export async function transferBench(quick: boolean): Promise<Record<string, Metric>> {
  const rig = await openTransferRig();
  const results: Record<string, Metric> = {};
  try {
    const sampleBytes = quick ? GIB : 2 * GIB;
    const rounds = quick ? 2 : 5;
    const put: number[] = [];
    const get: number[] = [];
    const cpIn: number[] = [];
    const cpOut: number[] = [];
    /** PUT then GET of one tar through the API, read back whole; rates only when `timed`. */
    const throughApi = async (name: string, bytes: number, timed: boolean) => {
      const p = await putThroughApi(rig, "/home/bench", name, bytes);
      if (p.status !== 200) throw new Error(`PUT: ${JSON.stringify(p.body)}`);
      const g = await getThroughApi(rig, `/home/bench/${name}`);
      if (g.status !== 200 || g.wrong) throw new Error(`GET: ${g.status}, ${g.wrong} MiB out of place`);
      if (timed) put.push(rate(bytes, p.ms));
      if (timed) get.push(rate(bytes, g.ms));
    };
    /** The same tar in and out with `docker cp`, read back whole. */
    const throughDockerCp = async (name: string, bytes: number, timed: boolean) => {
      const inMs = await dockerCpIn(rig.containerId, "/home/bench", name, bytes);
      const o = await dockerCpOut(rig.containerId, `/home/bench/${name}`);
      if (o.wrong) throw new Error(`docker cp out: ${o.wrong} MiB out of place`);
      if (timed) cpIn.push(rate(bytes, inMs));
      if (timed) cpOut.push(rate(bytes, o.ms));
    };
    // The container's disk is not the subject: each round starts from the same free space.
    const clear = () =>
      fetch(`${rig.url}/v1/envs/${rig.sandboxId}/exec`, {
        method: "POST",
        headers: { authorization: `Bearer ${rig.key}`, "content-type": "application/json" },
        body: JSON.stringify({ command: "rm -f /home/bench/*", user: "root" }),
      });
    // One untimed warm-up of each path (256 MiB), then rounds in a shuffled order.
    await throughApi("warm-api.bin", 256 * MIB, false);
    await throughDockerCp("warm-cp.bin", 256 * MIB, false);
    await clear();
    for (let i = 0; i < rounds; i++) {
      const contestants = [
        () => throughApi(`api-${i}.bin`, sampleBytes, true),
        () => throughDockerCp(`cp-${i}.bin`, sampleBytes, true),
      ];
      for (const run of shuffled(contestants, 6000 + i)) await run();
      await clear();
      log(
        `  files ${sampleBytes / GIB} GiB round ${i + 1}: put ${put[i]} MiB/s (docker cp ${cpIn[i]}), get ${get[i]} MiB/s (docker cp ${cpOut[i]})`,
      );
    }
    const note = `${sampleBytes / GIB} GiB each, ${rounds} rounds, every byte read back`;
    results.files_put_mib_per_s = metricOf(put, "MiB/s", note);
    results.files_get_mib_per_s = metricOf(get, "MiB/s", note);
    results.files_put_peer_mib_per_s = metricOf(cpIn, "MiB/s", `docker cp -, ${note}`);
    results.files_get_peer_mib_per_s = metricOf(cpOut, "MiB/s", `docker cp to -, ${note}`);
    // The peak is of the transfer itself: each process's high-water mark starts again here.
    const big = quick ? GIB : 10 * GIB;
    const rest = [resetPeakRss(rig.serverPid), resetPeakRss(rig.denvdPid)].map((b) => Math.round(b / MIB));
    const p = await putThroughApi(rig, "/home/bench", "big.bin", big);
    if (p.status !== 200) throw new Error(`PUT ${big / GIB} GiB: ${JSON.stringify(p.body)}`);
    const g = await getThroughApi(rig, "/home/bench/big.bin");
    if (g.status !== 200 || g.wrong)
      throw new Error(`GET ${big / GIB} GiB: ${g.status}, ${g.wrong} MiB out of place`);
    const peaks = [peakRssBytes(rig.serverPid), peakRssBytes(rig.denvdPid)].map((b) => Math.round(b / MIB));
    const what = `${big / GIB} GiB each way`;
    results.files_big_put_mib_per_s = { value: rate(big, p.ms), unit: "MiB/s", note: what };
    results.files_big_get_mib_per_s = { value: rate(big, g.ms), unit: "MiB/s", note: what };
    results.files_peak_rss_mib_server = {
      value: peaks[0] as number,
      unit: "MiB",
      note: `peak resident memory of the server process over ${what}; ${rest[0]} MiB when it began`,
    };
    results.files_peak_rss_mib_denvd = {
      value: peaks[1] as number,
      unit: "MiB",
      note: `peak resident memory of the denvd process over ${what}; ${rest[1]} MiB when it began`,
    };
    log(
      `  files ${what}: put ${rate(big, p.ms)} MiB/s, get ${rate(big, g.ms)} MiB/s; peak RSS server ${peaks[0]} MiB (${rest[0]} at rest), denvd ${peaks[1]} MiB (${rest[1]})`,
    );
  } finally {
    await rig.close();
  }
  return results;
}
