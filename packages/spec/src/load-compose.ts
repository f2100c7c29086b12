/**
 * Reads compose text as Docker Compose does: YAML 1.2 with anchors, aliases and merge keys, unique
 * keys, and interpolation of every string value. Refuses files over 1 MiB and alias-expansion bombs.
 * Keeps the parsed document so that any field path can be mapped back to its line and column.
 */
import { type Document, isMap, isPair, isScalar, isSeq, LineCounter, parseDocument } from "yaml";
import { type Env, interpolate } from "./interpolate.ts";
import { type FieldPath, formatPath, type RuleCode, type Severity, type SpecIssue } from "./issues.ts";

export const MAX_COMPOSE_BYTES = 1024 * 1024;
/** More alias expansions than this in one file is treated as an expansion bomb. */
export const MAX_ALIAS_COUNT = 10_000;

export interface LoadedCompose {
  /** The file as plain data, interpolated; undefined when it could not be read at all. */
  data: Record<string, unknown> | undefined;
  issues: SpecIssue[];
  /** 1-based line and column of a field path, or of its nearest ancestor present in the text. */
  positionOf(path: FieldPath): { line: number; column: number };
}

export class IssueList {
  readonly issues: SpecIssue[] = [];
  private readonly position: (path: FieldPath) => { line: number; column: number };
  constructor(position: (path: FieldPath) => { line: number; column: number }) {
    this.position = position;
  }

  add(severity: Severity, code: RuleCode, path: FieldPath, message: string): void {
    const { line, column } = this.position(path);
    this.issues.push({ code, severity, message, path: formatPath(path), line, column });
  }
  error(code: RuleCode, path: FieldPath, message: string): void {
    this.add("error", code, path, message);
  }
  warn(code: RuleCode, path: FieldPath, message: string): void {
    this.add("warning", code, path, message);
  }
  get hasErrors(): boolean {
    return this.issues.some((i) => i.severity === "error");
  }
}

export function loadCompose(text: string, env: Env): LoadedCompose {
  const lineCounter = new LineCounter();
  const noPosition = () => ({ line: 0, column: 0 });
  if (Buffer.byteLength(text, "utf8") > MAX_COMPOSE_BYTES) {
    const list = new IssueList(noPosition);
    list.error(
      "file_too_large",
      [],
      `the compose file is over ${MAX_COMPOSE_BYTES} bytes (1 MiB); split it up`,
    );
    return { data: undefined, issues: list.issues, positionOf: noPosition };
  }
  let doc: Document.Parsed;
  try {
    // logLevel "error": the library's warnings (e.g. collection keys stringified) would go to the
    // process's stderr; the rules below report what matters.
    doc = parseDocument(text, {
      lineCounter,
      merge: true,
      uniqueKeys: true,
      prettyErrors: false,
      logLevel: "error",
    });
  } catch (err) {
    const list = new IssueList(noPosition);
    list.error("yaml_syntax", [], `the file is not valid YAML: ${(err as Error).message}`);
    return { data: undefined, issues: list.issues, positionOf: noPosition };
  }
  const positionOf = (path: FieldPath) => nodePosition(doc, lineCounter, path);
  const list = new IssueList(positionOf);
  const offsetPos = (offset: number | undefined) => {
    if (offset === undefined) return { line: 0, column: 0 };
    const p = lineCounter.linePos(offset);
    return { line: p.line, column: p.col };
  };
  for (const e of doc.errors) {
    const code: RuleCode = e.code === "DUPLICATE_KEY" ? "yaml_duplicate_key" : "yaml_syntax";
    const { line, column } = offsetPos(e.pos[0]);
    const message = e.message.split("\n")[0]?.replace(/ at line \d+, column \d+:?$/, "") ?? "invalid YAML";
    list.issues.push({
      code,
      severity: "error",
      message: `${message}; fix the YAML`,
      path: "",
      line,
      column,
    });
  }
  if (list.hasErrors) return { data: undefined, issues: list.issues, positionOf };

  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT });
  } catch (err) {
    const message = (err as Error).message;
    if (/alias/i.test(message)) {
      list.error(
        "yaml_alias_bomb",
        [],
        `the file expands aliases more than ${MAX_ALIAS_COUNT} times (an expansion bomb); write the values out`,
      );
    } else {
      list.error("yaml_syntax", [], `the file is not valid YAML: ${message}`);
    }
    return { data: undefined, issues: list.issues, positionOf };
  }
  if (raw === null || raw === undefined) {
    list.error("no_services", [], "the file is empty; a compose file needs a services: block");
    return { data: undefined, issues: list.issues, positionOf };
  }
  if (typeof raw !== "object" || Array.isArray(raw)) {
    list.error(
      "not_a_mapping",
      [],
      "the top level of a compose file must be a mapping (services:, volumes:, ...)",
    );
    return { data: undefined, issues: list.issues, positionOf };
  }
  if (isCyclic(raw, new Set())) {
    list.error(
      "yaml_alias_bomb",
      [],
      "an alias refers to a node that contains it (a recursive structure); write the values out",
    );
    return { data: undefined, issues: list.issues, positionOf };
  }
  const data = interpolateTree(raw, [], env, list) as Record<string, unknown>;
  return { data, issues: list.issues, positionOf };
}

/** True when a value contains itself (an alias inside its own anchor: `&a [*a]`). */
function isCyclic(value: unknown, ancestors: Set<unknown>): boolean {
  if (value === null || typeof value !== "object") return false;
  if (ancestors.has(value)) return true;
  ancestors.add(value);
  const children = Array.isArray(value) ? value : Object.values(value);
  const cyclic = children.some((c) => isCyclic(c, ancestors));
  ancestors.delete(value);
  return cyclic;
}

function interpolateTree(value: unknown, path: (string | number)[], env: Env, list: IssueList): unknown {
  if (typeof value === "string") {
    if (!value.includes("$")) return value;
    const r = interpolate(value, env);
    for (const p of r.problems) {
      if (p.kind === "required")
        list.error("interpolation_required", path, `\${${p.variable}}: ${p.message}`);
      else if (p.kind === "syntax")
        list.error("interpolation_syntax", path, `${p.message}; write a literal $ as $$`);
      else
        list.warn(
          "interpolation_unset",
          path,
          `variable ${p.variable} is not set; it became an empty string (set it, or give a default with \${${p.variable}:-value})`,
        );
    }
    return r.value;
  }
  if (Array.isArray(value)) return value.map((v, i) => interpolateTree(v, [...path, i], env, list));
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = interpolateTree(v, [...path, k], env, list);
    return out;
  }
  return value;
}

function nodePosition(
  doc: Document.Parsed,
  lc: LineCounter,
  path: FieldPath,
): { line: number; column: number } {
  let node: unknown = doc.contents;
  let best: unknown = node;
  for (const key of path) {
    let next: unknown;
    if (isMap(node)) {
      const pair = node.items.find(
        (p) => isPair(p) && isScalar(p.key) && String(p.key.value) === String(key),
      );
      if (pair) next = pair.value ?? pair.key;
    } else if (isSeq(node) && typeof key === "number") {
      next = node.items[key];
    }
    if (next === undefined || next === null) break;
    node = next;
    best = next;
  }
  const range = (best as { range?: [number, number, number] } | null)?.range;
  if (!range) return { line: 0, column: 0 };
  const p = lc.linePos(range[0]);
  return { line: p.line, column: p.col };
}
