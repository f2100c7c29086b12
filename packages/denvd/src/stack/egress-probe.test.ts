import assert from "node:assert/strict";
import { test } from "node:test";
import { interfacesOf, loopbackOnly } from "./egress-probe.ts";

const HEAD =
  "Inter-|   Receive                            |  Transmit\n face |bytes    packets errs drop fifo frame|bytes\n";

test("a /proc/net/dev table's interface names, and nothing from its headers", () => {
  assert.deepEqual(interfacesOf(`${HEAD}    lo:       0       0    0\n`), ["lo"]);
  assert.deepEqual(interfacesOf(`${HEAD}    lo: 0 0\n  eth0: 12 3\nveth1@if4: 1\n`), [
    "lo",
    "eth0",
    "veth1@if4",
  ]);
  // A name that merely starts like lo is another interface, which sends the namespace to the probes.
  assert.deepEqual(interfacesOf(`${HEAD}   lo0: 0 0\n`), ["lo0"]);
  assert.deepEqual(interfacesOf(HEAD), []);
});

test("a pid that is not a positive integer is never read (the probes run instead)", async () => {
  for (const pid of [0, -1, 1.5, Number.NaN, 2 ** 22 + 12345])
    assert.equal(await loopbackOnly(pid, { host: "192.0.2.1", port: 9 }), null);
});
