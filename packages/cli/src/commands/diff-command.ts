/** `denv diff ENV [VERSION]`: what the agent changed in an environment since a version. */
import { type DiffEvidence, replaceTerminalControls } from "@denv/protocol";
import type { Command } from "commander";
import { printJson } from "../output.ts";
import { run } from "./command-runner.ts";

const MARK = { created: "A", deleted: "D", modified: "M" } as const;

/** A container's file content shown on a terminal: no control sequence of its own reaches it. */
export function printable(text: string): string {
  return replaceTerminalControls(text, (ch) => `\\u{${(ch.codePointAt(0) as number).toString(16)}}`);
}

function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}

const mode = (m: number | undefined) => (m === undefined ? "?" : m.toString(8).padStart(4, "0"));

/** The diff as lines a person reads: a summary, one line per change, the text diffs indented. */
export function formatDiff(d: DiffEvidence, options: { patch: boolean }): string {
  const s = d.summary;
  const out = [
    `${d.of} against ${d.against}: ${s.created} created, ${s.deleted} deleted, ${s.modified} modified (+${bytes(s.bytes_added)}, -${bytes(s.bytes_removed)})`,
  ];
  for (const e of d.entries) {
    const what: string[] = [e.type === "file" ? "" : e.type];
    if (e.type_before) what.push(`was ${e.type_before}`);
    if (e.changed?.includes("mode")) what.push(`mode ${mode(e.mode_before)} → ${mode(e.mode_after)}`);
    if (e.changed?.includes("owner")) what.push(`owner ${e.owner_before} → ${e.owner_after}`);
    if (e.changed?.includes("content") && e.bytes_before !== undefined && e.bytes_after !== undefined)
      what.push(
        `${bytes(e.bytes_before)} → ${bytes(e.bytes_after)}${e.content_compared === false ? " (not compared)" : ""}`,
      );
    else if (e.change === "created" && e.bytes_after !== undefined) what.push(bytes(e.bytes_after));
    else if (e.change === "deleted" && e.bytes_before !== undefined) what.push(bytes(e.bytes_before));
    if (e.target_before !== undefined && e.change !== "created") what.push(`-> ${e.target_before}`);
    if (e.target_after !== undefined)
      what.push(`${e.change === "modified" ? "now " : ""}-> ${e.target_after}`);
    if (e.diff_omitted) what.push(`(no text diff: ${e.diff_omitted.replaceAll("_", " ")})`);
    out.push(`${MARK[e.change]}  ${e.volume}/${e.path}  ${what.filter(Boolean).join(", ")}`.trimEnd());
    if (options.patch && e.diff)
      for (const line of e.diff.replace(/\n$/, "").split("\n")) out.push(`     ${printable(line)}`);
  }
  if (d.truncated)
    out.push(
      `… ${s.created + s.deleted + s.modified - d.entries.length} more changes counted, not listed (the bound is ${d.bounds.max_entries}: --max-entries)`,
    );
  // What the walk left out (past its depth, the names it walks, or its time): never silently.
  const WHY = {
    depth: "nested past the depth bound",
    entries: "past the names the diff walks",
    time: "past the diff's time",
  };
  for (const n of d.not_diffed ?? [])
    out.push(`?  ${n.volume}/${printable(n.path)}/  not diffed: ${WHY[n.why]}`);
  const unlisted = (d.not_diffed_count ?? 0) - (d.not_diffed?.length ?? 0);
  if (unlisted > 0) out.push(`… ${unlisted} more subtrees not diffed, not listed`);
  for (const db of d.databases) {
    if (db.error) {
      out.push(`${db.service} (${db.engine}): not asked: ${db.error}`);
      continue;
    }
    const rows = db.tables.map((t) => `${t.table} +${t.inserted} ~${t.updated} -${t.deleted}`);
    out.push(
      `${db.service} (${db.engine} ${db.database}, approximate): ${rows.length > 0 ? rows.join(", ") : "no rows changed"}`,
    );
  }
  return `${out.join("\n")}\n`;
}

export function registerDiffCommand(program: Command): void {
  const diff = program
    .command("diff")
    .description(
      "What changed in an environment since a version (default: the one it was forked from): files created, modified and deleted in every volume, text diffs, and rows changed in its PostgreSQL services",
    )
    .argument("<env>")
    .argument("[version]", "the version to compare with (ver_…, PROJECT@ver_…)")
    .option("--max-entries <n>", "changes listed (the rest are counted)", (v) => Number.parseInt(v, 10))
    .option("--no-patch", "leave the text diffs out")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExamples:\n  denv diff rollout-017\n  denv diff rollout-017 ops-world@ver_0123456789ab --no-patch\n\nA  created, D  deleted, M  modified. Links and special files are reported, never followed.",
    );
  diff.action(
    run(
      diff,
      async (
        client,
        json,
        env: string,
        version: string | undefined,
        o: { maxEntries?: number; patch: boolean },
      ) => {
        const d = await client().envs.diff(env, {
          query: {
            ...(version ? { against: version } : {}),
            ...(o.maxEntries ? { max_entries: String(o.maxEntries) } : {}),
          },
        });
        if (json) printJson(d);
        else process.stdout.write(formatDiff(d, { patch: o.patch }));
        return 0;
      },
    ),
  );
}
