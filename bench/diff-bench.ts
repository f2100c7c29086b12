/**
 * The episode diff, beside its peers in the same run: `GET /v1/envs/{id}/diff` of an ops-world
 * fork whose version holds 1 GiB more in the agent's home (1,024 files of 1 MiB) and whose episode
 * rewrote 4 KiB in 100 of them (their sizes unchanged: the hard case), against `rsync -rcn
 * --delete` and `diff -r` of the same trees (each volume's snapshot against the fork's dataset).
 * Every sample is checked: the diff lists exactly the 100 files (modified, in content alone), and
 * rsync and diff -r name the same 100. (`$$` in the compose file: a `$` Compose does not substitute.)
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import type { Metric } from "./api-bench.ts";
import { log, openBenchRig } from "./bench-rig.ts";
import { metricOf, shuffled } from "./bench-stats.ts";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..");
const FILES = 1024;
const CHANGED = 100;
/** The version's extra gigabyte: 1,024 files of 1 MiB of random bytes in the agent's home. */
const WARM = `mkdir -p /home/ubuntu/data && cd /home/ubuntu/data && python3 -c 'import os\nfor i in range(1, ${FILES + 1}): open("f%d" % i, "wb").write(os.urandom(1 << 20))'`;

/** Lines a command printed (its exit status 1 means "differences found" for diff). */
async function lines(cmd: string, args: string[]): Promise<string[]> {
  const r = await run(cmd, args, { maxBuffer: 64 * 1024 * 1024 }).catch(
    (err: { code?: number; stdout?: string }) => {
      if (err.code === 1 && typeof err.stdout === "string") return { stdout: err.stdout };
      throw err;
    },
  );
  return r.stdout.split("\n").filter(Boolean);
}

export async function diffBench(quick: boolean): Promise<Record<string, Metric>> {
  const rig = await openBenchRig("diff");
  const { api } = rig;
  try {
    const compose = readFileSync(join(root, "examples/ops-world/docker-compose.yaml"), "utf8").replace(
      '    - "psql -h db -U postgres -f /seed/orders.sql"',
      `    - "psql -h db -U postgres -f /seed/orders.sql"\n    - ${JSON.stringify(WARM)}`,
    );
    await api("POST", "/v1/projects", { name: "ops-diff", kind: "rl-environment", source: "./ops-diff" });
    await api("PUT", "/v1/projects/ops-diff/source", { compose });
    const deployed = await api("POST", "/v1/projects/ops-diff/deploy?wait=true", { env: "alpha" });
    if (deployed.status !== "succeeded") throw new Error(`deploy: ${deployed.reason}`);
    const versionId = deployed.version_id as string;
    const version = rig.denvd.versions().find((v) => v.id === versionId);
    if (!version) throw new Error(`version ${versionId} is not on the bench's host`);
    const fork = await api("POST", "/v1/sandboxes", { from_version: versionId, name: "episode" });
    // The episode: 4 KiB rewritten in the middle of every tenth file, sizes unchanged.
    const episode = await api("POST", `/v1/envs/${fork.id}/exec`, {
      service: "opsbox",
      command: [
        "bash",
        "-c",
        `cd /home/ubuntu/data && for i in $(seq 1 ${CHANGED}); do head -c 4096 /dev/urandom | dd of=f$((i * 10)) bs=4096 seek=100 conv=notrunc status=none; done`,
      ],
    });
    if (episode.exit_code !== 0) throw new Error(`episode: ${episode.stderr}`);
    const row = await rig.server.store
      .selectFrom("environments")
      .select("stack_id")
      .where("id", "=", fork.id)
      .executeTakeFirstOrThrow();
    const stack = rig.denvd.stack(row.stack_id as string);
    // The peers compare the same pairs of trees the diff does: each volume's snapshot and dataset.
    const pairs = await Promise.all(
      Object.entries(stack.datasets).map(async ([vol, ds]) => ({
        vol,
        before: `${await rig.storage.snapshotTree(version.snapshots[vol] as string)}/`,
        after: `${rig.storage.datasetPath(ds)}/`,
      })),
    );
    const expected = Array.from({ length: CHANGED }, (_, i) => `data/f${(i + 1) * 10}`).sort();
    type Who = "denv" | "rsync" | "diffr";
    const hot: Record<Who, number[]> = { denv: [], rsync: [], diffr: [] };
    const cold: Record<Who, number[]> = { denv: [], rsync: [], diffr: [] };
    const measure = async (who: Who, keep: Record<Who, number[]> | null, dropCaches = false) => {
      // Cold: every contender starts from an empty page cache (metadata and data alike), as an
      // audit of a rollout the machine has not touched since would.
      if (dropCaches) {
        await run("sync");
        await run("sh", ["-c", "echo 3 > /proc/sys/vm/drop_caches"]);
      }
      const t = performance.now();
      let named: string[] = [];
      if (who === "denv") {
        const d = await api("GET", `/v1/envs/${fork.id}/diff?max_entries=1000`);
        const home = (
          d.entries as { volume: string; path: string; change: string; changed?: string[] }[]
        ).filter((e) => e.volume === "home");
        // Each of them modified in its content alone: a create or a delete would be a wrong answer.
        named = home.map((e) =>
          e.change === "modified" && e.changed?.join() === "content" ? e.path : `${e.change} ${e.path}`,
        );
      } else {
        for (const p of pairs) {
          const out =
            who === "rsync"
              ? await lines("rsync", ["-rcn", "--delete", "--out-format=%n", p.after, p.before])
              : await lines("diff", ["-r", p.before, p.after]);
          if (p.vol === "home")
            named =
              who === "rsync"
                ? out.filter((l) => !l.endsWith("/"))
                : out.map((l) => /\/(data\/f\d+) and /.exec(l)?.[1] ?? l);
        }
      }
      const ms = performance.now() - t;
      const got = [...named].sort();
      if (JSON.stringify(got) !== JSON.stringify(expected))
        throw new Error(
          `${who} named ${got.length} paths in home, not the ${CHANGED} changed: ${got.slice(0, 5).join(", ")}`,
        );
      keep?.[who].push(ms);
    };
    // One untimed round (the trees in the page cache for every contender alike), then shuffled
    // rounds hot, then shuffled rounds each from a dropped page cache.
    for (const who of ["denv", "rsync", "diffr"] as const) await measure(who, null);
    const rounds = quick ? 3 : 10;
    for (let i = 0; i < rounds; i++)
      for (const who of shuffled(["denv", "rsync", "diffr"] as const, 7000 + i)) await measure(who, hot);
    for (let i = 0; i < rounds; i++)
      for (const who of shuffled(["denv", "rsync", "diffr"] as const, 7100 + i))
        await measure(who, cold, true);
    const say = (s: Record<Who, number[]>) =>
      `denv ${s.denv.map(Math.round).join(" ")} ms; rsync -rcn ${s.rsync.map(Math.round).join(" ")}; diff -r ${s.diffr.map(Math.round).join(" ")}`;
    log(`diff, hot: ${say(hot)}`);
    log(`diff, cold: ${say(cold)}`);
    await api("DELETE", `/v1/envs/${fork.id}`);
    return {
      diff_p50_ms: metricOf(
        hot.denv,
        "ms",
        `GET /v1/envs/{id}/diff: ops-world + 1 GiB, ${CHANGED} files changed`,
      ),
      diff_rsync_p50_ms: metricOf(hot.rsync, "ms", "rsync -rcn --delete of each volume's two trees"),
      diff_diffr_p50_ms: metricOf(hot.diffr, "ms", "diff -r of each volume's two trees"),
      diff_cold_p50_ms: metricOf(cold.denv, "ms", "the same diff from a dropped page cache"),
      diff_cold_rsync_p50_ms: metricOf(cold.rsync, "ms", "rsync -rcn from a dropped page cache"),
      diff_cold_diffr_p50_ms: metricOf(cold.diffr, "ms", "diff -r from a dropped page cache"),
    };
  } finally {
    await rig.close();
  }
}
