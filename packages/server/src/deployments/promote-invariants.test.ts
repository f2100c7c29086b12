import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import type { ResolvedSpec } from "@denv/protocol";
import { validateCompose } from "@denv/spec";
import { promoteInvariants } from "./promote-invariants.ts";

const opsWorld = readFileSync(
  join(import.meta.dirname, "../../../../examples/ops-world/docker-compose.yaml"),
  "utf8",
);

function spec(edit: (text: string) => string = (t) => t): ResolvedSpec {
  const r = validateCompose(edit(opsWorld), { env: {} });
  assert.ok(r.ok, JSON.stringify(!r.ok && r.errors));
  return r.spec;
}

const failed = (current: ResolvedSpec, candidate: ResolvedSpec) =>
  promoteInvariants(current, candidate)
    .filter((c) => !c.ok)
    .map((c) => `${c.check}: ${c.found.join(", ")}`);

test("the same spec, or one that only tightens, passes every check, each listed", () => {
  const checks = promoteInvariants(spec(), spec());
  assert.equal(checks.length, 9);
  assert.ok(checks.every((c) => c.ok && c.found.length === 0));
  assert.deepEqual(
    failed(
      spec(),
      spec((t) => t.replace("mem_limit: 2g", "mem_limit: 1g")),
    ),
    [],
  );
});

test("a dropped healthcheck, service, volume, collected path or warm command is named", () => {
  const noHealth = spec((t) =>
    t.replace(
      / {4}healthcheck:\n {6}test: \["CMD-SHELL", "pg_isready -U postgres"\]\n {6}interval: 2s\n {6}retries: 30\n/,
      "",
    ),
  );
  assert.deepEqual(failed(spec(), noHealth), [
    "no healthcheck removed or disabled: service db had a healthcheck and has none",
  ]);
  const disabled = spec((t) => t.replace('test: ["CMD-SHELL", "pg_isready -U postgres"]', "disable: true"));
  assert.deepEqual(failed(spec(), disabled), [
    "no healthcheck removed or disabled: service db had a healthcheck and has none",
  ]);
  const noCollect = spec((t) => t.replace('collect: ["/home/ubuntu/answer.txt"]', "collect: []"));
  assert.deepEqual(failed(spec(), noCollect), ["no collected path removed: collect /home/ubuntu/answer.txt"]);
  const noQueue = spec((t) =>
    t
      .replace(/ {2}queue:\n( {4}.*\n)+/, "")
      .replace("depends_on: [db, queue]", "depends_on: [db]")
      .replace("volumes: { pg: {}, redis: {}, home: {} }", "volumes: { pg: {}, home: {} }"),
  );
  assert.deepEqual(failed(spec(), noQueue), ["no service removed: queue", "no volume removed: redis"]);
  const noWarm = spec((t) => t.replace('    - "psql -h db -U postgres -f /seed/orders.sql"', '    - "true"'));
  assert.equal(failed(spec(), noWarm).length, 1);
  assert.match(failed(spec(), noWarm)[0] ?? "", /^no warm command removed: opsbox/);
});

test("loosened caps, widened egress and a real clock are each named", () => {
  const loose = spec((t) =>
    t
      .replace("mem_limit: 2g", "mem_limit: 4g")
      .replace("pids_limit: 512", "pids_limit: 4096")
      .replace("egress: deny", "egress: allow")
      .replace("clock: frozen", "clock: real"),
  );
  assert.deepEqual(failed(spec(), loose), [
    "no cap loosened: opsbox: memory 2147483648 → 4294967296 bytes, opsbox: pids 512 → 4096",
    "egress not widened: x-denv.egress deny → allow",
    "the clock not loosened: x-denv.clock frozen → real",
  ]);
});
