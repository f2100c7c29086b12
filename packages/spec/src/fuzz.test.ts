/**
 * Fuzz: 10,000 mutations of the corpus files (lines dropped, duplicated, swapped, truncated; YAML
 * and interpolation tokens and refused compose fields spliced in) must each come back as a
 * structured result — a spec that satisfies the resolved-form schema, or errors whose codes are in
 * the rule table — never a crash, and never slower than 1 s. Seeded, so a failure replays.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { resolvedSpecSchema } from "@denv/protocol";
import { RULE_CODES } from "./issues.ts";
import { validateCompose } from "./validate-compose.ts";

const ITERATIONS = 10_000;
const dir = join(import.meta.dirname, "..", "testdata", "corpus");
const seeds = readdirSync(dir)
  .filter((f) => f.endsWith(".yaml"))
  .map((f) => readFileSync(join(dir, f), "utf8"));

const TOKENS = [
  ":",
  "- ",
  "{",
  "}",
  "[",
  "]",
  ",",
  "&a ",
  "*a",
  "<<: *a",
  "${X}",
  "${",
  "${X:?boom}",
  "$$",
  "null",
  "~",
  "!!binary ",
  "!!str ",
  "'",
  '"',
  "\t",
  "  ",
  "\n",
  "0x1F",
  "1e400",
  "-1",
  "true",
  "host",
  "? ",
  "|",
  ">",
  "privileged: true",
  "network_mode: host",
  "- /etc:/etc",
  "user: root",
  "cap_add: [ALL]",
  "image: ",
  "volumes:",
  "healthcheck: {test: NONE}",
  "depends_on: [x]",
  "x-denv: {agent: {service: x}}",
  "mem_limit: 1e9g",
  "\u0000",
  "\uFFFF",
  "😀",
  "%YAML 1.1\n---\n",
  "--- \n",
  "...",
  "#",
  "&b [*b]",
];

/** mulberry32: a small seeded PRNG, so every run mutates the same way. */
function rng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function mutate(text: string, rand: () => number): string {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
  let lines = text.split("\n");
  const n = 1 + Math.floor(rand() * 3);
  for (let k = 0; k < n; k++) {
    const i = Math.floor(rand() * lines.length);
    switch (Math.floor(rand() * 7)) {
      case 0:
        lines.splice(i, 1);
        break;
      case 1:
        lines.splice(i, 0, lines[i] ?? "");
        break;
      case 2: {
        const j = Math.floor(rand() * lines.length);
        [lines[i], lines[j]] = [lines[j] ?? "", lines[i] ?? ""];
        break;
      }
      case 3: {
        const line = lines[i] ?? "";
        const at = Math.floor(rand() * (line.length + 1));
        lines[i] = line.slice(0, at) + pick(TOKENS) + line.slice(at);
        break;
      }
      case 4:
        lines = lines.slice(0, i);
        break;
      case 5: {
        const indent = /^\s*/.exec(lines[i] ?? "")?.[0] ?? "";
        lines.splice(i, 0, indent + pick(TOKENS));
        break;
      }
      default: {
        const line = lines[i] ?? "";
        lines[i] = line.replace(/:\s*(.*)$/, `: ${pick(TOKENS)}`);
      }
    }
  }
  return lines.join("\n");
}

test(`fuzz: ${ITERATIONS} mutated compose files give only structured results`, () => {
  const rand = rng(0xde17);
  const codes = new Set<string>(RULE_CODES);
  let accepted = 0;
  let slowestMs = 0;
  for (let i = 0; i < ITERATIONS; i++) {
    const text = mutate(seeds[i % seeds.length] as string, rand);
    // CPU time, not wall time: a pathological input shows as work done, and a machine busy with
    // other processes (or this one's other files) does not make a validation look slow.
    const start = process.cpuUsage();
    let result: ReturnType<typeof validateCompose>;
    try {
      result = validateCompose(text, { env: {}, noBuild: rand() < 0.5 });
    } catch (err) {
      assert.fail(`iteration ${i} crashed: ${(err as Error).stack}\n--- input ---\n${text}`);
    }
    const used = process.cpuUsage(start);
    const ms = (used.user + used.system) / 1000;
    slowestMs = Math.max(slowestMs, ms);
    assert.ok(ms < 1000, `iteration ${i} took ${ms} ms of CPU`);
    if (result.ok) {
      accepted++;
      resolvedSpecSchema.parse(result.spec);
    } else {
      assert.ok(result.errors.length > 0, `iteration ${i}: refused without errors`);
      for (const e of result.errors) {
        assert.ok(codes.has(e.code), `iteration ${i}: unknown code ${e.code}`);
        assert.equal(typeof e.message, "string");
        assert.ok(Number.isInteger(e.line) && Number.isInteger(e.column));
      }
    }
  }
  // Both outcomes must be exercised, or the mutations are not reaching the rules.
  assert.ok(accepted > 100 && accepted < ITERATIONS - 100, `${accepted} accepted`);
  process.stdout.write(
    `# fuzz: ${ITERATIONS} files, ${accepted} accepted, slowest ${slowestMs.toFixed(1)} ms\n`,
  );
});
