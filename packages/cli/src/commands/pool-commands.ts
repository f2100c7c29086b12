/** Warm pools: ready forks of a version kept aside, so a fork of it is handed over at once. */

import type { DenvClient, Operations } from "@denv/sdk";
import type { Command } from "commander";
import { printJson, printTable, UsageError } from "../output.ts";
import { run } from "./command-runner.ts";

/** A version id as given, or an environment's current version. */
async function versionOf(client: DenvClient, ref: string): Promise<string> {
  if (ref.startsWith("ver_")) return ref;
  const e = await client.envs.get(ref);
  if (!e.current_version_id)
    throw new UsageError(`${ref} has no version yet: snapshot it first (denv snapshot ${ref})`);
  return e.current_version_id;
}

type Pool = Operations["getV1Pools"]["response"]["pools"][number];

/** Drains a version's pool and says how many ready forks went. */
async function drain(client: DenvClient, version: string, json: boolean): Promise<number> {
  const r = await client.pools.drain(version);
  if (json) printJson(r);
  else process.stdout.write(`drained the pool of ${version} (${r.drained} ready forks destroyed)\n`);
  return 0;
}

function printPools(pools: Pool[]): void {
  printTable(
    ["VERSION", "SIZE", "READY", "WARMING", "HITS", "MISSES", "HIT RATE", "SOURCE", "LAST ERROR"],
    pools.map((p) => [
      p.version_id,
      String(p.size),
      String(p.ready),
      String(p.warming),
      String(p.hits),
      String(p.misses),
      p.hit_rate === null ? "-" : `${Math.round(p.hit_rate * 100)}%`,
      p.source,
      p.last_error ?? "-",
    ]),
  );
}

export function registerPoolCommands(program: Command): void {
  const pool = program
    .command("pool")
    .description(
      "Warm pools: ready forks of a version, handed over at once by fork, sandbox create and fan-out",
    );
  const set = pool
    .command("set")
    .description("Keep N ready forks of an environment's current version (or of a version id)")
    .argument("<env-or-version>", "an environment (its current version) or a version id (ver_…)")
    .requiredOption("--size <n>", "ready forks to keep (0 drains the pool)")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExamples:\n  denv pool set alpha --size 8\n  denv pool set ver_abc123 --size 0    (drains it)",
    );
  set.action(
    run(set, async (client, json, ref: string, o: { size: string }) => {
      const size = Number(o.size);
      if (!Number.isInteger(size) || size < 0 || size > 256)
        throw new UsageError(`--size ${o.size} must be a whole number from 0 to 256`);
      const version = await versionOf(client(), ref);
      if (size === 0) return drain(client(), version, json);
      const r = await client().pools.keep(version, { size });
      if (json) printJson(r);
      else
        process.stdout.write(`pool of ${version}: ${r.size} kept, ${r.ready} ready, ${r.warming} warming\n`);
      return 0;
    }),
  );
  const show = pool
    .command("show")
    .description("Pools with what each holds and its hit rate (all of them, or one)")
    .argument("[env-or-version]", "an environment (its current version) or a version id")
    .option("--json", "print JSON");
  show.action(
    run(show, async (client, json, ref: string | undefined) => {
      const pools = ref
        ? [await client().pools.get(await versionOf(client(), ref))]
        : (await client().pools.list()).pools;
      if (json) printJson(ref ? pools[0] : { pools });
      else printPools(pools);
      return 0;
    }),
  );
  const rm = pool
    .command("rm")
    .description("Drain a pool: its ready forks are destroyed; forks already taken stay")
    .argument("<env-or-version>", "an environment (its current version) or a version id")
    .option("--json", "print JSON");
  rm.action(
    run(rm, async (client, json, ref: string) => {
      return drain(client(), await versionOf(client(), ref), json);
    }),
  );
}
