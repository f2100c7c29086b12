import assert from "node:assert/strict";
import { test } from "node:test";
import { parseCidr, pickSubnet } from "./subnet-allocator.ts";

test("picks the first free /24 of the pool, skipping anything that overlaps", () => {
  assert.deepEqual(pickSubnet("172.16.0.0/12", []), { subnet: "172.16.0.0/24", gateway: "172.16.0.1" });
  assert.deepEqual(pickSubnet("172.16.0.0/12", ["172.16.0.0/24", "172.16.1.0/24"])?.subnet, "172.16.2.0/24");
  // The engine's docker0 (a /16) takes 256 candidates at once.
  assert.deepEqual(pickSubnet("172.17.0.0/16", ["172.17.0.0/16"]), null);
  assert.equal(pickSubnet("172.16.0.0/12", ["172.16.0.0/16"])?.subnet, "172.17.0.0/24");
  // A host route wider than a candidate blocks it too.
  assert.equal(pickSubnet("10.0.0.0/23", ["10.0.0.0/8"]), null);
});

test("3,840 environments fit in the default pool beside docker0, and then it says full", () => {
  const used: string[] = ["172.17.0.0/16"];
  for (let i = 0; i < 3840; i++) {
    const s = pickSubnet("172.16.0.0/12", used);
    assert.ok(s, `ran out at ${i}`);
    used.push(s.subnet);
  }
  assert.equal(pickSubnet("172.16.0.0/12", used), null);
});

test("CIDRs parse; bad ones do not", () => {
  assert.deepEqual(parseCidr("192.168.1.77/24"), {
    base: ((192 << 24) | (168 << 16) | (1 << 8)) >>> 0,
    bits: 24,
  });
  assert.equal(parseCidr("300.1.1.1/24"), null);
  assert.equal(parseCidr("fe80::/64"), null);
});

test("a random pick is any free subnet alike, never a used one", () => {
  const used = ["10.0.0.0/24", "10.0.2.0/24"];
  const seen = new Set<string>();
  for (const r of [0, 0.34, 0.67, 0.99])
    seen.add(pickSubnet("10.0.0.0/22", used, 24, () => r)?.subnet as string);
  assert.deepEqual([...seen].sort(), ["10.0.1.0/24", "10.0.3.0/24"]);
  assert.equal(
    pickSubnet("10.0.0.0/24", ["10.0.0.0/24"], 24, () => 0.5),
    null,
  );
});
