/**
 * The acceptance of the security review, as a user meets it: `denv validate` refuses an agent that
 * is root by another spelling (user "+0", "-0:-0") and sysctls outside the allowlist, each with its
 * reason, its path and its line.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

const bin = join(import.meta.dirname, "..", "..", "packages", "cli", "bin", "denv.js");

function validate(compose: string) {
  const dir = mkdtempSync(join(tmpdir(), "denv-validate-"));
  writeFileSync(join(dir, "compose.yaml"), compose);
  const r = spawnSync(process.execPath, [bin, "validate", dir, "--json"], { encoding: "utf8" });
  const human = spawnSync(process.execPath, [bin, "validate", dir], { encoding: "utf8" });
  return { code: r.status, out: JSON.parse(r.stdout), human: human.stdout + human.stderr };
}

test('denv validate refuses user "+0" and "-0:-0" for the agent, saying it is root', () => {
  for (const user of ["+0", "-0:-0", "000"]) {
    const r = validate(
      `x-denv: { kind: rl-environment, agent: { service: box } }\nservices:\n  box:\n    image: ubuntu\n    user: "${user}"\n`,
    );
    assert.equal(r.code, 1);
    const e = r.out.errors.find((x: any) => x.code === "agent_root");
    assert.ok(e, JSON.stringify(r.out.errors));
    assert.equal(e.path, "services.box.user");
    assert.equal(e.line, 5);
    assert.match(e.message, /runs as root .* must never be root/);
    assert.match(r.human, /agent_root/);
  }
});

test("denv validate refuses sysctls outside the allowlist, each with its reason", () => {
  const r = validate(
    "services:\n  box:\n    image: ubuntu\n    sysctls:\n      net.ipv6.conf.all.disable_ipv6: 0\n      kernel.randomize_va_space: 0\n      net.core.somaxconn: 1024\n",
  );
  assert.equal(r.code, 1);
  assert.deepEqual(
    r.out.errors.map((e: any) => [e.code, e.path, e.line]),
    [
      ["sysctl_refused", 'services.box.sysctls["net.ipv6.conf.all.disable_ipv6"]', 5],
      ["sysctl_refused", 'services.box.sysctls["kernel.randomize_va_space"]', 6],
    ],
  );
  assert.match(r.out.errors[0].message, /IPv6/);
  assert.match(r.out.errors[1].message, /allowlist/);
});
