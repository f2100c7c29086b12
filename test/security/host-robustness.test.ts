/**
 * One bad name must not disable a host: names are checked at resolve against what every driver and
 * the engine accept, denvd checks the specs it is sent again before making anything, and a record
 * it cannot settle (written before these checks) never keeps it from starting. Lookups by name
 * never reach the prototype chain.
 */
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { isValidName, NAME_MAX_LENGTH, type ResolvedSpec } from "@denv/protocol";
import { pinSpec, RegistryPinner, validateCompose } from "@denv/spec";
import { deployStack, openTestHost, type TestHost } from "../harness/test-host.ts";

let host: TestHost;
let spec: ResolvedSpec;

before(async () => {
  host = await openTestHost({});
  const r = validateCompose(
    "services:\n  box:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    command: [sleep, infinity]\n    volumes: [data:/data]\nvolumes: { data: {} }\n",
    { projectName: "robust" },
  );
  assert.ok(r.ok);
  spec = await pinSpec(r.spec, new RegistryPinner());
});

after(async () => {
  await host?.close();
});

/** The spec with its one volume renamed, as a control plane that skipped resolve would send it. */
function withVolume(name: string): ResolvedSpec {
  const s = structuredClone(spec);
  s.datasets = { [name]: { labels: {} } };
  (s.services.box as ResolvedSpec["services"][string]).volumes[0] = {
    dataset: name,
    target: "/data",
    read_only: false,
    subpath: null,
    nocopy: false,
  };
  return s;
}

describe("names", () => {
  test("denvd refuses a spec with a name no driver accepts, and leaves nothing behind", async () => {
    const before = {
      envs: host.denvd.stacks().length,
      datasets: (await host.storage.listDatasets()).length,
    };
    for (const bad of ["a..b", "v".repeat(112), "../x", "constructor/x"]) {
      await assert.rejects(
        host.denvd.prepare(withVolume(bad), { name: "bad" }),
        (err: Error & { code?: string }) => {
          assert.equal(err.code, "invalid_argument");
          assert.match(err.message, /volume name/);
          return true;
        },
      );
    }
    assert.equal(host.denvd.stacks().length, before.envs);
    assert.equal((await host.storage.listDatasets()).length, before.datasets);
  });

  test("a record from before the checks, with a name no driver accepts, does not keep denvd from starting", async () => {
    // Written where an older denvd kept its records, in state.json: read into the database at open.
    const path = `${host.stateDir}/state.json`;
    const state = JSON.parse(readFileSync(path, "utf8"));
    state.stacks = {};
    state.stacks.env_0123456789ab = {
      id: "env_0123456789ab",
      name: "legacy",
      status: "creating",
      spec: withVolume("a..b"),
      versionId: null,
      parentVersionId: null,
      network: "denv-env_0123456789ab",
      datasets: { "a..b": "env_0123456789ab-a..b" },
      containers: {},
      operationId: "op_x",
      createdAt: new Date().toISOString(),
    };
    writeFileSync(path, JSON.stringify(state));
    const again = await openTestHost({ stateDir: host.stateDir, runId: host.runId });
    try {
      assert.ok(
        again.denvd.lastReconcile.removed.includes("env_0123456789ab"),
        JSON.stringify(again.denvd.lastReconcile),
      );
      assert.equal(
        again.denvd.stacks().some((e) => e.id === "env_0123456789ab"),
        false,
      );
    } finally {
      await again.denvd.close();
    }
  });

  test("every name resolve accepts makes ids every driver and the engine accept (property)", () => {
    const alphabet = "abcXYZ019_-.";
    let accepted = 0;
    for (let i = 0; i < 5000; i++) {
      const len = 1 + ((i * 7919) % 80);
      let name = "";
      for (let j = 0; j < len; j++) name += alphabet[(i * 31 + j * 17 + ((i >> 3) ^ j)) % alphabet.length];
      if (!isValidName(name)) continue;
      accepted++;
      assert.ok(name.length <= NAME_MAX_LENGTH);
      // Dataset and snapshot ids (storage-driver.ts), engine volume names, DNS labels.
      for (const id of [`stk_0123456789ab-${name}`, `ver_0123456789ab-${name}`]) {
        assert.match(id, /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/);
        assert.ok(!id.includes(".."));
      }
      assert.match(`denv-stk_0123456789ab-${name}`, /^[a-zA-Z0-9][a-zA-Z0-9_.-]+$/);
    }
    assert.ok(accepted > 100, `${accepted} names accepted`);
  });
});

describe("lookups by name", () => {
  test("service=constructor or __proto__ is no service, and says nothing of the runtime's insides", async () => {
    const d = await deployStack(host.denvd, spec, { name: "lookups" });
    for (const svc of ["constructor", "__proto__", "toString", "hasOwnProperty"]) {
      await assert.rejects(
        host.denvd.exec(d.stack.id, svc, { command: "true" }),
        (err: Error & { code?: string }) => {
          assert.equal(err.code, "not_found");
          assert.doesNotMatch(err.message, /function|native code|\[object/);
          return true;
        },
      );
    }
    assert.throws(() => host.denvd.stack("constructor"), /no stack constructor/);
    assert.throws(() => host.denvd.version("__proto__"), /no version __proto__/);
    await host.denvd.destroy(d.stack.id);
  });
});
