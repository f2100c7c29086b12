/**
 * Generates the SDK's reference (docs/sdk/typescript.md) from its doc comments: every exported
 * class, function, interface and type of the public modules, with each public member's signature
 * and comment. A test regenerates it and compares, so the reference cannot go stale.
 *
 *   node packages/sdk/src/generate-docs.ts          writes docs/sdk/typescript.md
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** The modules whose exports make the public surface, in the order the reference shows them. */
const MODULES = ["sandbox.ts", "sandbox-files.ts", "errors.ts", "client.ts"];

interface Item {
  signature: string;
  doc: string;
  members: Item[];
}

/** The comment text of a JSDoc block: its lines without the leading stars. */
function commentText(block: string): string {
  return block
    .replace(/^\/\*\*\s?/, "")
    .replace(/\s*\*\/$/, "")
    .split("\n")
    .map((l) => l.replace(/^\s*\* ?/, ""))
    .join("\n")
    .trim();
}

/** A declaration's signature: from its first line up to its body's `{` (or its end). */
function signatureAt(lines: string[], i: number): string {
  const parts: string[] = [];
  let depth = 0;
  for (let j = i; j < lines.length && j < i + 40; j++) {
    const line = lines[j] as string;
    for (let k = 0; k < line.length; k++) {
      const ch = line[k];
      if (ch === "(" || ch === "<" || ch === "[") depth++;
      else if (ch === ")" || ch === ">" || ch === "]") depth--;
      else if (
        (ch === "{" || ch === ";" || ch === "=") &&
        depth <= 0 &&
        !/=>\s*$/.test(line.slice(0, k + 2))
      ) {
        if (ch === "=" && line[k + 1] === ">") continue;
        parts.push(line.slice(0, k));
        return parts.join(" ").replace(/\s+/g, " ").trim();
      }
    }
    parts.push(line);
  }
  return parts.join(" ").replace(/\s+/g, " ").trim();
}

const TOP = /^export (?:abstract )?(class|function|async function|interface|type|const) (\w+)/;
const MEMBER = /^ {2}(?:readonly |static |async |get |set )*(?:\[Symbol\.\w+\]|[a-zA-Z]\w*)\s*[(<:?]/;

export function extract(source: string): Item[] {
  const lines = source.split("\n");
  const items: Item[] = [];
  let doc = "";
  let current: Item | null = null;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    const trimmed = line.trim();
    if (trimmed.startsWith("/**")) {
      let block = line;
      while (!block.includes("*/") && i + 1 < lines.length) block += `\n${lines[++i]}`;
      doc = commentText(block.trim());
      continue;
    }
    if (TOP.test(line)) {
      current = { signature: signatureAt(lines, i), doc, members: [] };
      items.push(current);
      // Members are read only inside a class's or interface's body: one that ends on its own line
      // (`export class X extends Y {}`) has none, and what follows it is not its.
      if (!line.startsWith("export class") && !line.startsWith("export interface")) current = null;
      else if (/\{\s*\}\s*$/.test(line)) current = null;
      doc = "";
      continue;
    }
    if (line.startsWith("}")) current = null;
    if (
      current &&
      MEMBER.test(line) &&
      !/^ {2}(private|protected) /.test(line) &&
      !/^ {2}constructor/.test(line)
    ) {
      current.members.push({ signature: signatureAt(lines, i).replace(/^\s+/, ""), doc, members: [] });
    }
    if (trimmed && !trimmed.startsWith("//") && !trimmed.startsWith("*")) doc = "";
  }
  return items;
}

/**
 * The generated named methods (schema.gen.ts's NamedOperations), by group: each method's call as a
 * user writes it, and its summary with the route it sends.
 */
export function namedMethods(source: string): string[] {
  const out: string[] = [];
  const lines = source.split("\n");
  let doc = "";
  let group: string | null = null;
  for (const line of lines) {
    const g = /^ {2}readonly (\w+) = \{$/.exec(line);
    if (g) {
      group = g[1] as string;
      out.push("", `#### \`client.${group}\``, "");
      continue;
    }
    if (/^ {2}\};$/.test(line)) group = null;
    const d = /^ {4}\/\*\* (.*) \*\/$/.exec(line);
    if (d) doc = d[1] as string;
    const m = /^ {4}(\w+): \((.*)\): (Promise<\w+>) =>$/.exec(line);
    if (group && m) out.push(`- \`${group}.${m[1]}(${m[2]}): ${m[3]}\` — ${doc}`);
  }
  return out;
}

export function renderDocs(dir = import.meta.dirname): string {
  const out: string[] = [
    "# @denv/sdk reference",
    "",
    "Generated from the doc comments by `node packages/sdk/src/generate-docs.ts`; do not edit.",
    "",
  ];
  for (const file of MODULES) {
    const items = extract(readFileSync(join(dir, file), "utf8")).filter((it) => it.doc || it.members.length);
    if (!items.length) continue;
    out.push(`## ${file}`, "");
    for (const it of items) {
      out.push(`### \`${it.signature}\``, "");
      if (it.doc) out.push(it.doc, "");
      for (const m of it.members) {
        out.push(`- \`${m.signature}\`${m.doc ? ` — ${m.doc.replace(/\n+/g, " ")}` : ""}`);
      }
      if (it.members.length) out.push("");
    }
  }
  out.push(
    "## Named methods (schema.gen.ts)",
    "",
    "Every route of the API as a method of `DenvClient` (and of `Denv`'s `client`), generated from the",
    "server's routes: path parameters in the path's order, then the body, then `{ query }`.",
    ...namedMethods(readFileSync(join(dir, "schema.gen.ts"), "utf8")),
  );
  return `${out.join("\n").trim()}\n`;
}

if (import.meta.main) {
  const target = join(import.meta.dirname, "..", "..", "..", "docs", "sdk", "typescript.md");
  writeFileSync(target, renderDocs());
  process.stdout.write(`wrote ${target}\n`);
}
