/**
 * Reads compose text as Docker Compose does: YAML 1.2 with anchors, aliases and merge keys, unique
 * keys, and interpolation of every string value. Refuses files over 1 MiB and alias-expansion bombs.
 * Keeps the parsed document so that any field path can be mapped back to its line and column.
 */
import { type Document, isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, visit } from "yaml";
import { type Env, interpolate } from "./interpolate.ts";
import { type FieldPath, formatPath, type RuleCode, type Severity, type SpecIssue } from "./issues.ts";

export const MAX_COMPOSE_BYTES = 1024 * 1024;
/** More alias expansions than this in one file is treated as an expansion bomb. */
export const MAX_ALIAS_COUNT = 10_000;
/**
 * What the file may expand to once aliases are resolved and variables interpolated: string bytes
 * and nodes, counted as they are produced. Aliases of a long string are cheap in YAML and count
 * once against MAX_ALIAS_COUNT, yet each is interpolated (and reported on) again: without this, a
 * 450 KB file expands to gigabytes of work.
 */
export const MAX_EXPANDED_BYTES = 8 * 1024 * 1024;
export const MAX_EXPANDED_NODES = 200_000;
/** Issues kept for one file; the rest are counted in one last issue. */
export const MAX_ISSUES = 200;

class ExpansionBudgetExceeded extends Error {}

export interface LoadedCompose {
  /** The file as plain data, interpolated; undefined when it could not be read at all. */
  data: Record<string, unknown> | undefined;
  issues: IssueList;
  /** 1-based line and column of a field path, or of its nearest ancestor present in the text. */
  positionOf(path: FieldPath): { line: number; column: number };
}

export class IssueList {
  readonly issues: SpecIssue[] = [];
  /** Issues past MAX_ISSUES, counted instead of kept. */
  dropped = 0;
  private droppedError = false;
  private readonly position: (path: FieldPath) => { line: number; column: number };
  constructor(position: (path: FieldPath) => { line: number; column: number }) {
    this.position = position;
  }

  /** Every error reported, kept or not: a rule asks whether its checks added any. */
  errorCount = 0;

  add(severity: Severity, code: RuleCode, path: FieldPath, message: string): void {
    if (this.issues.length >= MAX_ISSUES)
      this.push({ code, severity, message, path: "", line: 0, column: 0 });
    else this.push({ code, severity, message, path: formatPath(path), ...this.position(path) });
  }

  /** Keeps an issue, or counts it once MAX_ISSUES are kept. */
  push(issue: SpecIssue): void {
    if (issue.severity === "error") this.errorCount++;
    if (this.issues.length >= MAX_ISSUES) {
      this.dropped++;
      this.droppedError ||= issue.severity === "error";
    } else this.issues.push(issue);
  }

  /** Adds issues found elsewhere (the loader's), within the same cap. */
  take(other: IssueList): void {
    for (const i of other.issues) this.push(i);
    this.errorCount += other.errorCount - other.issues.filter((i) => i.severity === "error").length;
    this.dropped += other.dropped;
    this.droppedError ||= other.droppedError;
  }

  /** The issues, with one more saying how many were left out. */
  all(): SpecIssue[] {
    if (this.dropped === 0) return this.issues;
    return [
      ...this.issues,
      {
        code: "too_many_issues",
        severity: this.droppedError ? "error" : "warning",
        message: `${this.dropped} more issues are not shown; fix the ones above first`,
        path: "",
        line: 0,
        column: 0,
      },
    ];
  }
  error(code: RuleCode, path: FieldPath, message: string): void {
    this.add("error", code, path, message);
  }
  warn(code: RuleCode, path: FieldPath, message: string): void {
    this.add("warning", code, path, message);
  }
  get hasErrors(): boolean {
    return this.errorCount > 0;
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
    return { data: undefined, issues: list, positionOf: noPosition };
  }
  let doc: Document.Parsed;
  try {
    // logLevel "error": the library's warnings (e.g. collection keys stringified) would go to the
    // process's stderr; the rules below report what matters.
    // uniqueKeys is checked below in linear time: the library compares each key with every earlier
    // key of its map, which makes a 1 MiB file of one large map take half a minute.
    doc = parseDocument(text, {
      lineCounter,
      merge: true,
      uniqueKeys: false,
      prettyErrors: false,
      logLevel: "error",
    });
  } catch (err) {
    const list = new IssueList(noPosition);
    list.error("yaml_syntax", [], `the file is not valid YAML: ${(err as Error).message}`);
    return { data: undefined, issues: list, positionOf: noPosition };
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
    list.push({
      code,
      severity: "error",
      message: `${message}; fix the YAML`,
      path: "",
      line,
      column,
    });
  }
  if (!list.hasErrors) {
    for (const offset of duplicateKeyOffsets(doc)) {
      list.push({
        code: "yaml_duplicate_key",
        severity: "error",
        message: "Map keys must be unique; fix the YAML",
        path: "",
        ...offsetPos(offset),
      });
    }
  }
  if (list.hasErrors) return { data: undefined, issues: list, positionOf };

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
    return { data: undefined, issues: list, positionOf };
  }
  if (raw === null || raw === undefined) {
    list.error("no_services", [], "the file is empty; a compose file needs a services: block");
    return { data: undefined, issues: list, positionOf };
  }
  if (typeof raw !== "object" || Array.isArray(raw)) {
    list.error(
      "not_a_mapping",
      [],
      "the top level of a compose file must be a mapping (services:, volumes:, ...)",
    );
    return { data: undefined, issues: list, positionOf };
  }
  if (isCyclic(raw, new Set())) {
    list.error(
      "yaml_alias_bomb",
      [],
      "an alias refers to a node that contains it (a recursive structure); write the values out",
    );
    return { data: undefined, issues: list, positionOf };
  }
  let data: Record<string, unknown>;
  try {
    const budget = { bytes: 0, nodes: 0, warned: new Set<string>() };
    data = interpolateTree(raw, [], env, list, budget) as Record<string, unknown>;
  } catch (err) {
    if (!(err instanceof ExpansionBudgetExceeded)) throw err;
    list.error(
      "compose_too_complex",
      [],
      `the file expands to more than ${MAX_EXPANDED_BYTES / 1024 ** 2} MiB or ${MAX_EXPANDED_NODES} values once aliases and variables are resolved; write it out without repeating large values`,
    );
    return { data: undefined, issues: list, positionOf };
  }
  return { data, issues: list, positionOf };
}

interface ExpansionBudget {
  bytes: number;
  nodes: number;
  /** Variables already reported unset: one warning each, however often they appear. */
  warned: Set<string>;
}

function spend(budget: ExpansionBudget, bytes: number): void {
  budget.bytes += bytes;
  budget.nodes++;
  if (budget.bytes > MAX_EXPANDED_BYTES || budget.nodes > MAX_EXPANDED_NODES)
    throw new ExpansionBudgetExceeded();
}

/** Where each repeated key of a mapping starts (merge keys `<<` may repeat, as YAML allows). */
function duplicateKeyOffsets(doc: Document.Parsed): number[] {
  const offsets: number[] = [];
  visit(doc, {
    Map(_key, map) {
      const seen = new Set<string>();
      for (const pair of map.items) {
        if (!isScalar(pair.key)) continue;
        const value = pair.key.value;
        if (value === "<<") continue;
        const key = `${typeof value}:${String(value)}`;
        if (seen.has(key)) offsets.push(pair.key.range?.[0] ?? 0);
        else seen.add(key);
      }
    },
  });
  return offsets;
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

function interpolateTree(
  value: unknown,
  path: (string | number)[],
  env: Env,
  list: IssueList,
  budget: ExpansionBudget,
): unknown {
  if (typeof value === "string") {
    spend(budget, value.length);
    if (!value.includes("$")) return value;
    const r = interpolate(value, env);
    spend(budget, r.value.length);
    for (const p of r.problems) {
      if (p.kind === "required")
        list.error("interpolation_required", path, `\${${p.variable}}: ${p.message}`);
      else if (p.kind === "syntax")
        list.error("interpolation_syntax", path, `${p.message}; write a literal $ as $$`);
      else if (!budget.warned.has(p.variable)) {
        budget.warned.add(p.variable);
        list.warn(
          "interpolation_unset",
          path,
          `variable ${p.variable} is not set; it became an empty string (set it, or give a default with \${${p.variable}:-value})`,
        );
      }
    }
    return r.value;
  }
  if (Array.isArray(value)) {
    spend(budget, 0);
    return value.map((v, i) => interpolateTree(v, [...path, i], env, list, budget));
  }
  if (value !== null && typeof value === "object") {
    spend(budget, 0);
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      spend(budget, k.length);
      out[k] = interpolateTree(v, [...path, k], env, list, budget);
    }
    return out;
  }
  spend(budget, 0);
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
