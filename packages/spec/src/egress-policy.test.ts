import assert from "node:assert/strict";
import { test } from "node:test";
import {
  decideEgress,
  type EgressPolicy,
  neverReached,
  normalizeEgressPolicy,
  normalizeHostName,
  type ParsedEgressPolicy,
  parseEgressPolicy,
  parseEgressRule,
} from "./egress-policy.ts";

function policy(p: EgressPolicy): ParsedEgressPolicy {
  const parsed = parseEgressPolicy(p);
  if ("errors" in parsed) throw new Error(parsed.errors.join("; "));
  return parsed;
}

const mirror = policy({
  allow: [
    "pkg.mirror.test",
    "*.code-host.test",
    "10.0.0.0/8:5432",
    "api.model.test:8443",
    "198.18.7.9:7000-7010",
  ],
  deny: ["secret.code-host.test", "10.9.0.0/16:5432"],
});

test("rules are parsed and normalised: case, one trailing dot, ports and ranges, networks", () => {
  assert.deepEqual(parseEgressRule("PKG.Mirror.Test."), {
    text: "pkg.mirror.test",
    kind: "name",
    name: "pkg.mirror.test",
    ports: [
      [80, 80],
      [443, 443],
    ],
  });
  assert.deepEqual(parseEgressRule("*.Code-Host.test:22"), {
    text: "*.code-host.test:22",
    kind: "wildcard",
    name: "code-host.test",
    ports: [[22, 22]],
  });
  const cidr = parseEgressRule("10.0.0.0/8:5432-5433");
  assert.ok(!("error" in cidr));
  assert.equal(cidr.kind, "cidr");
  assert.deepEqual(cidr.ports, [[5432, 5433]]);
  assert.deepEqual(normalizeEgressPolicy(policy({ allow: ["A.test", "a.test.", "b.test"], deny: [] })), {
    allow: ["a.test", "b.test"],
    deny: [],
  });
});

test("bad rules are refused, each saying what was wrong", () => {
  const bad: [string, RegExp][] = [
    ["", /cannot be empty/],
    ["*", /every name: use egress: allow/],
    ["*.test", /whole top-level domain/],
    ["a.*.test", /may only stand alone/],
    ["pkg.mіrror.test", /not ASCII: write an internationalised name in its xn-- form/],
    ["bücher.test", /not ASCII/],
    ["a..test", /not a host name/],
    ["-a.test", /not a host name/],
    [`${"a".repeat(64)}.test`, /not a host name/],
    ["a_b.test", /not a host name/],
    ["1.2.3.4.5", /not a host name/],
    ["pkg.test:0", /a port is 1-65535/],
    ["pkg.test:65536", /a port is 1-65535/],
    ["pkg.test:90-80", /a port is 1-65535/],
    ["pkg.test:http", /a port is 1-65535/],
    ["10.0.0.1/8", /not the start of a \/8 network/],
    ["10.0.0.0/33", /a\.b\.c\.d or a\.b\.c\.d\/len/],
    ["0.0.0.0/0:443", /whole internet/],
    ["010.0.0.1", /not a host name|address rule/],
    ["256.1.1.1", /not a host name|address rule/],
    ["[::1]:443", /IPv6 destinations are not supported/],
    ["fe80::1", /IPv6/],
  ];
  for (const [rule, message] of bad) {
    const r = parseEgressRule(rule);
    assert.ok("error" in r, `${rule} should be refused`);
    assert.match(r.error, message, rule);
  }
  const errs = parseEgressPolicy({ allow: ["ok.test", "*"], deny: ["x..test"] });
  assert.ok("errors" in errs);
  assert.deepEqual(
    errs.errors.map((e) => e.split(":")[0]),
    ["allow[1]", "deny[0]"],
  );
  const many = parseEgressPolicy({ allow: Array.from({ length: 257 }, (_, i) => `h${i}.test`), deny: [] });
  assert.ok("errors" in many && /at most 256/.test(many.errors[0] as string));
});

test("names: exact, wildcard below (never the domain itself), web ports by default", () => {
  const d = (name: string, port: number, address = "198.51.100.4") =>
    decideEgress(mirror, { name, address, port });
  assert.deepEqual(d("pkg.mirror.test", 443), {
    allowed: true,
    rule: "pkg.mirror.test",
    reason: "pkg.mirror.test:443 is allowed by the rule pkg.mirror.test",
  });
  assert.equal(d("pkg.mirror.test", 80).allowed, true);
  assert.equal(d("pkg.mirror.test", 22).allowed, false, "a rule without a port is the web's ports");
  assert.equal(d("git.code-host.test", 443).rule, "*.code-host.test");
  assert.equal(d("a.b.code-host.test", 80).allowed, true);
  assert.equal(d("code-host.test", 443).allowed, false, "the wildcard's own domain is not below it");
  assert.equal(d("evilcode-host.test", 443).allowed, false, "a suffix that is not a label boundary");
  assert.equal(d("api.model.test", 8443).allowed, true);
  assert.equal(d("api.model.test", 443).allowed, false);
  assert.equal(d("pkg.mirror.test.evil.test", 443).allowed, false);
  assert.match(d("other.test", 443).reason, /other\.test:443 is not in the environment's egress allow list/);
});

test("a trailing dot and mixed case are the same name; look-alikes and junk never match", () => {
  const d = (name: string) => decideEgress(mirror, { name, address: "198.51.100.4", port: 443 });
  assert.equal(d("PKG.MIRROR.TEST.").allowed, true);
  assert.equal(d("Pkg.Mirror.Test").rule, "pkg.mirror.test");
  for (const name of [
    "pkg.mіrror.test", // Cyrillic і
    "pkg.mirror.test\u0000.evil.test",
    "pkg.mirror.test..",
    "pkg mirror.test",
    "xn--pkg-mirror-xyz.test",
    "pkg.mirror.test/",
    "",
  ]) {
    const r = d(name);
    assert.equal(r.allowed, false, JSON.stringify(name));
  }
  assert.match(d("pkg.mіrror.test").reason, /not an ASCII host name/);
  assert.equal(normalizeHostName("A.B."), "a.b");
  assert.equal(normalizeHostName("a.b.."), null);
  assert.equal(normalizeHostName("127.0.0.1"), null);
});

test("addresses: only address rules let a raw address through, deny wins, and some addresses are never reached", () => {
  const d = (dest: Parameters<typeof decideEgress>[1]) => decideEgress(mirror, dest);
  assert.equal(d({ name: "10.1.2.3", port: 5432 }).rule, "10.0.0.0/8:5432");
  assert.equal(d({ address: "10.1.2.3", port: 5432 }).allowed, true);
  assert.equal(d({ name: "10.1.2.3", port: 5433 }).allowed, false);
  assert.equal(d({ name: "10.9.2.3", port: 5432 }).rule, "10.9.0.0/16:5432", "deny wins over allow");
  assert.equal(d({ name: "10.9.2.3", port: 5432 }).allowed, false);
  assert.equal(d({ name: "198.18.7.9", port: 7005 }).allowed, true);
  // A raw address an allowed name resolves to is still a raw address.
  const raw = d({ name: "198.51.100.4", port: 443 });
  assert.equal(raw.allowed, false);
  assert.match(raw.reason, /a raw address needs an address rule/);
  // An allowed name that resolves somewhere it must not (rebinding to loopback, metadata).
  for (const address of ["127.0.0.1", "169.254.169.254", "0.0.0.0", "224.0.0.1"]) {
    const r = d({ name: "pkg.mirror.test", address, port: 443 });
    assert.equal(r.allowed, false, address);
    assert.match(r.reason, /never reached/);
  }
  // An allowed name resolving into a denied network is refused by that rule.
  assert.equal(
    d({ name: "git.code-host.test", address: "10.9.0.1", port: 443 }).allowed,
    true,
    "port 443 is not denied",
  );
  assert.equal(
    d({ name: "secret.code-host.test", address: "198.51.100.4", port: 443 }).rule,
    "secret.code-host.test",
  );
  // This machine's own addresses, given by the proxy.
  assert.match(neverReached("192.0.2.10", ["192.0.2.10/32"]) ?? "", /machine running the environment/);
  assert.equal(neverReached("192.0.2.11", ["192.0.2.10/32"]), null);
  assert.match(
    decideEgress(mirror, { name: "pkg.mirror.test", address: "172.20.0.5", port: 443 }, ["172.16.0.0/12"])
      .reason,
    /never reached/,
  );
  assert.equal(d({ name: "pkg.mirror.test", address: "198.51.100.4", port: 0 }).allowed, false);
});

test("a name is allowed by name rules only, never by the address rule its address falls in", () => {
  const p = policy({ allow: ["10.0.0.0/8:5432"], deny: [] });
  assert.equal(decideEgress(p, { address: "10.1.1.1", port: 5432 }).allowed, true);
  const named = decideEgress(p, { name: "db.corp.test", address: "10.1.1.1", port: 5432 });
  assert.equal(named.allowed, false);
  assert.match(named.reason, /db\.corp\.test:5432 is not in the environment's egress allow list/);
});
