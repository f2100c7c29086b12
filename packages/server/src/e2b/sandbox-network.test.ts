import assert from "node:assert/strict";
import { test } from "node:test";
import { egressFromE2bNetwork } from "./sandbox-network.ts";

test("E2B's allowOut becomes the allow list: names as they are, addresses and networks on every port", () => {
  assert.deepEqual(
    egressFromE2bNetwork({
      allowOut: ["pkg.mirror.test", "*.code-host.test", "10.1.2.3", "10.9.0.0/16"],
      denyOut: ["0.0.0.0/0"],
    }),
    { allow: ["pkg.mirror.test", "*.code-host.test", "10.1.2.3:1-65535", "10.9.0.0/16:1-65535"], deny: [] },
  );
  assert.deepEqual(egressFromE2bNetwork({}), { allow: [], deny: [] }, "omitting a field clears it");
  assert.deepEqual(egressFromE2bNetwork({ allowOut: ["a.test"], denyOut: ["10.0.0.0/8"] }), {
    allow: ["a.test"],
    deny: [],
  });
});

test("what denv cannot do is refused, saying which field and why", () => {
  const refused: [Record<string, unknown>, RegExp][] = [
    [{ allowOut: ["0.0.0.0/0"] }, /allowOut: 0\.0\.0\.0\/0 is the whole internet/],
    [{ allow_internet_access: true }, /allow_internet_access: the sandbox's egress is a policy/],
    [{ denyOut: ["evil.test"] }, /denyOut: evil\.test is not an address or CIDR/],
    [{ allowOut: "a.test" }, /allowOut: a list of destinations/],
    [{ allowOut: [7] }, /allowOut: a list of destinations/],
    [{ allowOut: Array.from({ length: 257 }, (_, i) => `h${i}.test`) }, /at most 256/],
    [
      { rules: { "api.test": [{ transform: { headers: { authorization: "x" } } }] } },
      /rules is not supported/,
    ],
    [{ egressProxy: { address: "socks5://x" } }, /egressProxy is not supported/],
  ];
  for (const [body, message] of refused) {
    const r = egressFromE2bNetwork(body);
    assert.ok("error" in r, JSON.stringify(body));
    assert.match(r.error, message);
  }
  assert.deepEqual(
    egressFromE2bNetwork({ allow_internet_access: true, denyOut: ["0.0.0.0/0"], allowOut: ["a.test"] }),
    {
      allow: ["a.test"],
      deny: [],
    },
  );
});
