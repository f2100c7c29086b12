import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { durationMs, readEpisode } from "./fidelity-commands.ts";

const dir = mkdtempSync(join(tmpdir(), "denv-episode-"));
const file = (name: string, text: string) => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};

test("an episode file: YAML or JSON steps, run: as shell text, command: as argv", () => {
  const yaml = file(
    "ok.yaml",
    'steps:\n  - service: opsbox\n    run: psql -c "select now()"\n  - command: [sleep, "1"]\n    timeout_ms: 5000\n',
  );
  assert.deepEqual(readEpisode(yaml), [
    { command: 'psql -c "select now()"', service: "opsbox" },
    { command: ["sleep", "1"], timeout_ms: 5000 },
  ]);
  assert.deepEqual(readEpisode(file("ok.json", '[{"run": "date", "user": "ubuntu"}, {"verifier": true}]')), [
    { command: "date", user: "ubuntu" },
    { verifier: true },
  ]);
});

test("a bad episode file is refused with the step and what is wrong", () => {
  const cases: [string, RegExp][] = [
    ["{", /not YAML or JSON/],
    ["steps: 3", /expected a list of steps/],
    ["[]", /expected a list of steps/],
    ["- 7", /step 1: expected a mapping/],
    ["- {run: date, command: [date]}", /step 1: give one of run:/],
    ["- {service: db}", /step 1: give one of run:/],
    ["- {run: date}\n- {run: ''}", /step 2: run: must be non-empty text/],
    ["- {command: [ls, 3]}", /step 1: command: must be a non-empty list of strings/],
    ["- {run: date, evil: true}", /step 1: unknown key evil/],
    ["- {run: date, timeout_ms: -1}", /step 1: timeout_ms/],
    ["- {verifier: true, run: date}", /step 1: verifier: true stands alone/],
    ["- {verifier: yes please}", /step 1: verifier: true stands alone/],
    // A billion laughs: aliases are refused, not expanded.
    ["a: &a [x, x]\nb: &b [*a, *a]\nsteps: [*b]", /not YAML or JSON/],
  ];
  for (const [text, re] of cases) assert.throws(() => readEpisode(file("bad.yaml", text)), re, text);
  assert.throws(() => readEpisode(join(dir, "missing.yaml")), /--script .*missing\.yaml: ENOENT/);
  const long = Array.from({ length: 257 }, () => "- {run: date}").join("\n");
  assert.throws(() => readEpisode(file("long.yaml", long)), /257 steps; at most 256/);
});

test("durations: 30s, 2m, 1500ms, a bare number of seconds; anything else named", () => {
  assert.equal(durationMs("30s", "--soak"), 30_000);
  assert.equal(durationMs("2m", "--soak"), 120_000);
  assert.equal(durationMs("1500ms", "--soak"), 1500);
  assert.equal(durationMs("4", "--soak"), 4000);
  assert.throws(() => durationMs("soon", "--soak"), /--soak soon: expected a duration/);
  assert.throws(() => durationMs("-1s", "--soak"), /expected a duration/);
});
