/**
 * An episode's diff as a reader audits it: the counts, one row per change (its mark, volume and
 * path, what changed), each text diff folded under its row, and the rows each database counted.
 * Every name and line is set as text: a file name or content the agent wrote is shown, never run.
 */
import type { Answer } from "./console-api.ts";
import { h } from "./dom.ts";

type Diff = Answer<"getV1EnvsByIdDiff">;
type Entry = Diff["entries"][number];

const MARK = { created: "A", deleted: "D", modified: "M" } as const;

function size(n: number | undefined): string {
  if (n === undefined) return "";
  return n < 1024
    ? `${n} B`
    : n < 1024 ** 2
      ? `${(n / 1024).toFixed(1)} KiB`
      : `${(n / 1024 ** 2).toFixed(1)} MiB`;
}

const mode = (m: number | undefined) => (m === undefined ? "?" : m.toString(8).padStart(4, "0"));

function what(e: Entry): string {
  const out: string[] = [];
  if (e.type !== "file") out.push(e.type.replace("_", " "));
  if (e.type_before) out.push(`was ${e.type_before.replace("_", " ")}`);
  if (e.changed?.includes("mode")) out.push(`mode ${mode(e.mode_before)} → ${mode(e.mode_after)}`);
  if (e.changed?.includes("owner")) out.push(`owner ${e.owner_before} → ${e.owner_after}`);
  if (e.changed?.includes("content")) out.push(`${size(e.bytes_before)} → ${size(e.bytes_after)}`);
  else if (e.change === "created" && e.bytes_after !== undefined) out.push(size(e.bytes_after));
  else if (e.change === "deleted" && e.bytes_before !== undefined) out.push(size(e.bytes_before));
  if (e.target_after !== undefined) out.push(`→ ${e.target_after}`);
  else if (e.target_before !== undefined) out.push(`was → ${e.target_before}`);
  if (e.content_compared === false) out.push("not compared (budget)");
  if (e.diff_omitted) out.push(`no text diff: ${e.diff_omitted.replaceAll("_", " ")}`);
  return out.join(", ");
}

/** The headline a diff phase shows in the timeline. */
export function diffHeadline(d: Pick<Diff, "summary">): string {
  const s = d.summary;
  return `${s.created} created · ${s.modified} modified · ${s.deleted} deleted`;
}

export function diffView(d: Diff): HTMLElement {
  const rows = d.entries.map((e) =>
    h(
      "tr",
      { class: `d-${e.change}` },
      h("td", { class: "mark" }, MARK[e.change]),
      h(
        "td",
        {},
        h("code", {}, `${e.volume}/${e.path}`),
        e.diff ? h("details", {}, h("summary", {}, "diff"), h("pre", { class: "text patch" }, e.diff)) : null,
      ),
      h("td", { class: "muted" }, what(e)),
    ),
  );
  const total = d.summary.created + d.summary.modified + d.summary.deleted;
  return h(
    "section",
    { class: "diff", id: "episode-diff" },
    h(
      "p",
      {},
      `${diffHeadline(d)} since ${d.against} (+${size(d.summary.bytes_added) || "0 B"}, −${size(d.summary.bytes_removed) || "0 B"})`,
    ),
    rows.length > 0
      ? h("table", { class: "diff-table" }, h("tbody", {}, rows))
      : h("p", { class: "muted" }, "no file changed"),
    d.truncated
      ? h(
          "p",
          { class: "muted" },
          `${total - d.entries.length} more counted, not listed (bound ${d.bounds.max_entries})`,
        )
      : null,
    d.databases.map((db) =>
      h(
        "p",
        {},
        h("strong", {}, `${db.service} (${db.engine} ${db.database}) `),
        db.error
          ? h("span", { class: "reason" }, `not asked: ${db.error}`)
          : db.tables.length === 0
            ? h("span", { class: "muted" }, "no rows changed")
            : db.tables.map((t) => `${t.table} +${t.inserted} ~${t.updated} −${t.deleted}`).join(", "),
        h("span", { class: "muted", title: db.how }, " (approximate)"),
      ),
    ),
    Object.entries(d.volumes).flatMap(([vol, v]) =>
      v.left_out.map((l) => h("p", { class: "muted" }, `${vol}: ${l.entries} left out — ${l.why}`)),
    ),
  );
}
