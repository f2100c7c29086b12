import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { test } from "node:test";
import { IngressNames } from "./ingress-names.ts";

const derive = (label: string) => createHmac("sha256", "k").update(label).digest("hex");
const names = new IngressNames({ domain: "Denv.Test:8443", scheme: "https" }, derive);

test("E2B's {port}-{id} form and the readable form are parsed; nothing else under or beside the domain is", () => {
  assert.deepEqual(names.parse("8000-abc123.denv.test:8443"), {
    form: "port",
    host: "8000-abc123.denv.test",
    port: 8000,
    environmentId: "env_abc123",
  });
  assert.deepEqual(names.parse("WEB.alpha.shop.denv.test"), {
    form: "name",
    host: "web.alpha.shop.denv.test",
  });
  for (const hostile of [
    "8000-abc123.denv.test.attacker.io", // a look-alike suffix
    "8000-abc123.xdenv.test", // not a label boundary
    "denv.test",
    "x.denv.test", // one label that is not {port}-{id}
    "70000-abc.denv.test", // no such port
    "0-abc.denv.test",
    "8000-ab_c.denv.test", // "_" is in no id
    "8000-abc-def.denv.test", // ids have no "-": E2B splits on the first one
    "a.b.c.d.denv.test", // four labels name nothing
    "web.alpha.shop.denv.test@evil.io",
    "web..shop.denv.test",
    "-web.alpha.shop.denv.test",
    "",
  ])
    assert.equal(names.parse(hostile), null, hostile);
  assert.equal(names.parse(undefined), null);
});

test("names are built as they are parsed; a name that is no DNS label gets no readable name, and says why", () => {
  assert.equal(names.portHost(3000, "env_0a1b"), "3000-0a1b.denv.test");
  assert.equal(names.urlFor("3000-0a1b.denv.test"), "https://3000-0a1b.denv.test:8443");
  assert.deepEqual(names.readableHost("web", "alpha", "shop"), { host: "web.alpha.shop.denv.test" });
  const bad = names.readableHost("web", "feature/x", "shop");
  assert.ok("reason" in bad && /environment name feature\/x is not a DNS label/.test(bad.reason));
  assert.ok("reason" in names.readableHost("my_db", "alpha", "shop"));
  assert.equal(new IngressNames({ domain: "denv.test", scheme: "http" }, derive).urlFor("a.b"), "http://a.b");
});

test("the token is the environment's own, compared whole", () => {
  const t = names.tokenFor("env_a");
  assert.match(t, /^dit_[0-9a-f]{64}$/);
  assert.notEqual(t, names.tokenFor("env_b"));
  assert.equal(names.tokenAccess("env_a", t), "full");
  assert.equal(names.tokenAccess("env_b", t), null);
  assert.equal(names.tokenAccess("env_a", t.slice(0, -1)), null);
  assert.equal(names.tokenAccess("env_a", `${t}0`), null);
  assert.equal(names.tokenAccess("env_a", null), null);
  assert.equal(names.tokenAccess("env_a", ""), null);
  // A read-only caller's token reads, and is no token of another environment's or of full access.
  const r = names.tokenFor("env_a", "read");
  assert.notEqual(r, t);
  assert.equal(names.tokenAccess("env_a", r), "read");
  assert.equal(names.tokenAccess("env_b", r), null);
});

test("a domain that is no DNS name is refused where it is given", () => {
  for (const d of ["", "denv_test", "denv.test:0", "denv.test:abc", "http://denv.test", "*.denv.test"])
    assert.throws(() => new IngressNames({ domain: d, scheme: "http" }, derive), /not a DNS name/, d);
  assert.equal(names.certificateInfo(), null);
  assert.equal(names.covers("a.denv.test"), null);
});
