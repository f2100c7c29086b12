import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { ComposeValidator } from "./compose-validator.ts";
import { MAX_ISSUES } from "./load-compose.ts";
import { validateCompose } from "./validate-compose.ts";

const seed = readFileSync(
  join(import.meta.dirname, "../../cli/src/templates/rl-environment/docker-compose.yaml"),
  "utf8",
);

/** The attack from the security review: aliases of one anchored string full of `$`. */
function aliasBomb(aliases: number, chars = 450_000): string {
  let text = `x-big: &big "${"$a".repeat(chars / 2)}"\nservices:\n  s:\n    image: x\n    environment:\n`;
  for (let i = 0; i < aliases; i++) text += `      V${i}: *big\n`;
  return text;
}

const validators: ComposeValidator[] = [];
const validator = (o?: ConstructorParameters<typeof ComposeValidator>[0]) => {
  const v = new ComposeValidator(o);
  validators.push(v);
  return v;
};
after(async () => {
  await Promise.all(validators.map((v) => v.close()));
});

test("aliases of a large string are refused by the expansion budget, with a handful of issues", () => {
  for (const n of [40, 150, 2000]) {
    const r = validateCompose(aliasBomb(n), {});
    assert.equal(r.ok, false);
    assert.ok(!r.ok && r.errors.some((e) => e.code === "compose_too_complex"), `n=${n}`);
    assert.ok(r.errors.length + r.warnings.length <= MAX_ISSUES + 1);
  }
});

test("an unset variable used a thousand times is reported once", () => {
  let text = "services:\n  s:\n    image: x\n    environment:\n";
  for (let i = 0; i < 1000; i++) text += `      V${i}: "$MISSING"\n`;
  const r = validateCompose(text, {});
  assert.ok(r.ok);
  assert.equal(r.warnings.filter((w) => w.code === "interpolation_unset").length, 1);
});

test("past the issue cap, one last issue counts the rest and the file stays refused", () => {
  let text = "services:\n";
  for (let i = 0; i < 500; i++) text += `  s${i}:\n    image: x\n    privileged: true\n`;
  const r = validateCompose(text, {});
  assert.ok(!r.ok);
  assert.equal(r.errors.length, MAX_ISSUES + 1);
  const last = r.errors.at(-1);
  assert.equal(last?.code, "too_many_issues");
  assert.match(last?.message ?? "", /^300 more issues/);
});

test("in the worker, a file validates exactly as in the calling thread", async () => {
  const r = await validator().validate(seed, { env: {}, dotenv: "X=1\n" });
  assert.deepEqual(r, validateCompose(seed, { env: {}, dotenv: "X=1\n" }));
});

test("the calling thread keeps running while a hostile file is checked", async () => {
  const v = validator();
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  const r = await v.validate(aliasBomb(40));
  clearInterval(timer);
  assert.ok(!r.ok && r.errors[0]?.code === "compose_too_complex");
  // The timer ran while the worker worked: the event loop was never held.
  assert.ok(ticks > 0);
});

test("a file that outruns the time budget is refused with the budget named", async () => {
  const v = validator({ timeoutMs: 1, workers: 1 });
  const r = await v.validate(seed);
  assert.ok(!r.ok);
  assert.equal(r.errors[0]?.code, "compose_too_complex");
  assert.match(r.errors[0]?.message ?? "", /took longer than 0.001 s/);
});

test("a file that needs more memory than the cap is refused, and the pool keeps working", async () => {
  const v = validator({ maxHeapMb: 24, workers: 1, timeoutMs: 60_000 });
  // Within the expansion budget (120,000 values), yet far beyond 24 MiB once parsed.
  let text = "services:\n  s:\n    image: x\n    labels:\n";
  for (let i = 0; i < 60_000; i++) text += `      l${i}: x\n`;
  const r = await v.validate(text);
  assert.ok(!r.ok, "refused");
  assert.equal(r.errors[0]?.code, "compose_too_complex");
  assert.match(r.errors[0]?.message ?? "", /needed more than 24 MiB/);
  const ok = await v.validate(seed);
  assert.ok(ok.ok);
});
