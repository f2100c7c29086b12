/** Versions: list them with what keeps each, delete one nothing uses, prune by a retention. */
import type { Command } from "commander";
import { printJson, UsageError } from "../output.ts";
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
      const r = await client().call("getV1Versions", { query: o.project ? { project: o.project } : {} });
      if (json) printJson(r);
      else {
        process.stdout.write("VERSION\tPROJECT\tENVIRONMENT\tCREATED\tIN USE\tREPLICAS\n");
        for (const v of r.versions)
          process.stdout.write(
            `${v.id}\t${v.project}\t${v.environment}\t${v.created_at}\t${v.in_use.join("; ") || "-"}\t${v.replicas?.length ?? "-"}\n`,
          );
      }
      return 0;
    }),
  );
  const rm = version
    .command("rm")
    .description("Delete a version nothing uses: its snapshots on its host and its record")
    .argument("<version>", "ver_… or PROJECT@ver_…")
    .option("--json", "print JSON");
  rm.action(
    run(rm, async (client, json, ref: string) => {
      const r = await client().call("deleteV1VersionsById", { params: { id: ref } });
      if (json) printJson(r);
      else process.stdout.write(`deleted ${r.deleted}\n`);
      return 0;
    }),
  );
  const replicate = version
    .command("replicate")
    .description(
      "Copy a version's snapshots to another host (btrfs send/receive, incremental where both hold an earlier version): forks of it can run there too",
    )
    .argument("<version>", "ver_… or PROJECT@ver_…")
    .requiredOption("--to <host>", "the host (name or id) that takes the copy")
    .option("--json", "print JSON");
  replicate.action(
    run(replicate, async (client, json, ref: string, o: { to: string }) => {
      const r = await client().call("postV1VersionsByIdReplicas", {
        params: { id: ref },
        body: { host: o.to },
      });
      if (json) printJson(r);
      else if (r.already) process.stdout.write(`${o.to} already holds ${r.version_id}\n`);
      else
        process.stdout.write(
          `replicated ${r.version_id} to ${o.to}: ${(r.bytes / 1024 ** 2).toFixed(1)} MiB as ${r.format}${r.base_version_id ? ` (incremental on ${r.base_version_id})` : ""} in ${(r.ms / 1000).toFixed(1)} s, ${r.mib_per_s} MiB/s\n`,
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
      const r = await client().call("postV1VersionsPrune", {
        body: { keep, ...(o.project ? { project: o.project } : {}), ...(o.dryRun ? { dry_run: true } : {}) },
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
