/** Versions: list them with what keeps each, delete one nothing uses, prune by a retention. */
import type { Command } from "commander";
import { ageOf, printJson, printTable, UsageError } from "../output.ts";
import { run } from "./command-runner.ts";

export function registerVersionCommands(program: Command): void {
  const version = program
    .command("version")
    .description("Versions: list, delete, prune (their snapshots fill the pool), replicate to another host");
  const list = version
    .command("list")
    .description("The team's versions, newest first, with what keeps each")
    .option("--project <name>", "only this project's")
    .option("--json", "print JSON");
  list.action(
    run(list, async (client, json, o: { project?: string }) => {
      const r = await client().versions.list({ query: o.project ? { project: o.project } : {} });
      if (json) printJson(r);
      else {
        printTable(
          ["VERSION", "PROJECT", "ENVIRONMENT", "AGE", "REPLICAS", "IN USE"],
          r.versions.map((v) => [
            v.id,
            v.project,
            v.environment,
            ageOf(v.created_at),
            String(v.replicas?.length ?? "-"),
            v.in_use.join("; ") || "-",
          ]),
        );
      }
      return 0;
    }),
  );
  const rm = version
    .command("rm")
    .description(
      "Delete a version nothing uses: its snapshots on every host holding them and its record (a host away deletes its copy when it is back)",
    )
    .argument("<version>", "ver_… or PROJECT@ver_…")
    .option("--json", "print JSON");
  rm.action(
    run(rm, async (client, json, ref: string) => {
      const r = await client().versions.delete(ref);
      if (json) printJson(r);
      else {
        process.stdout.write(`deleted ${r.deleted}\n`);
        if (r.left_on.length)
          process.stdout.write(
            `copies remain on ${r.left_on.join(", ")} (not connected): each is deleted when its host is back\n`,
          );
      }
      return 0;
    }),
  );
  const replicate = version
    .command("replicate")
    .description(
      "Copy a version's snapshots to another host (btrfs send/receive, incremental where both hold an earlier version): forks of it can run there too",
    )
    .argument("<version>", "ver_… or PROJECT@ver_…")
    .option("--to <host>", "the host (name or id) that takes the copy")
    .option("--copies <n>", "keep N copies on distinct hosts from now on (as x-denv.replicas)")
    .option("--json", "print JSON");
  replicate.action(
    run(replicate, async (client, json, ref: string, o: { to?: string; copies?: string }) => {
      if ((o.to === undefined) === (o.copies === undefined))
        throw new UsageError("name one of --to HOST (one copy there) or --copies N (kept from now on)");
      if (o.copies !== undefined) {
        const copies = Number(o.copies);
        if (!Number.isInteger(copies) || copies < 1 || copies > 16)
          throw new UsageError(`--copies ${o.copies}: a whole number from 1 to 16`);
        const k = await client().versions.keepReplicas(ref, { copies });
        if (json) printJson(k);
        else
          process.stdout.write(
            `${k.version_id}: ${k.holders.length} of ${k.copies} copies held (${k.holders.join(", ")})${k.made.length ? `; made ${k.made.length} now` : ""}\n`,
          );
        return k.holders.length >= k.copies ? 0 : 1;
      }
      const to = o.to as string;
      const r = await client().versions.copy(ref, { host: to });
      if (json) printJson(r);
      else if (r.already) process.stdout.write(`${to} already holds ${r.version_id}\n`);
      else
        process.stdout.write(
          `replicated ${r.version_id} to ${to}: ${(r.bytes / 1024 ** 2).toFixed(1)} MiB as ${r.format}${r.base_version_id ? ` (incremental on ${r.base_version_id})` : ""} in ${(r.ms / 1000).toFixed(1)} s, ${r.mib_per_s} MiB/s\n`,
        );
      return 0;
    }),
  );
  const prune = version
    .command("prune")
    .description("Retention: keep each live environment's newest N versions; delete the others nothing uses")
    .requiredOption("--keep <n>", "versions kept per environment")
    .option("--project <name>", "only this project's")
    .option("--dry-run", "only say what would be deleted")
    .option("--json", "print JSON");
  prune.action(
    run(prune, async (client, json, o: { keep: string; project?: string; dryRun?: boolean }) => {
      const keep = Number(o.keep);
      if (!Number.isInteger(keep) || keep < 1)
        throw new UsageError(`--keep ${o.keep}: a whole number, at least 1`);
      const r = await client().versions.prune({
        keep,
        ...(o.project ? { project: o.project } : {}),
        ...(o.dryRun ? { dry_run: true } : {}),
      });
      if (json) printJson(r);
      else {
        const verb = r.dry_run ? "would delete" : "deleted";
        process.stdout.write(`${verb} ${r.deleted.length}: ${r.deleted.join(" ") || "-"}\n`);
        for (const k of r.kept.filter((x) => !x.reason.startsWith("one of its")))
          process.stdout.write(`kept ${k.id}: ${k.reason}\n`);
        if (r.images_removed.length)
          process.stdout.write(`removed ${r.images_removed.length} built image(s) nothing pins any more\n`);
      }
      return 0;
    }),
  );
}
