import assert from "node:assert/strict";
import { test } from "node:test";
import { newPortToken, PortsOrigin } from "./ports-origin.ts";

test("a port token is a DNS label: lowercase base32 with no underscore", () => {
  const t = newPortToken();
  assert.match(t, /^dpu[a-z2-7]{32}$/);
  assert.notEqual(t, newPortToken());
});

test("a plain ports origin routes /v1/tunnels/{token}/… and nothing else", () => {
  const o = new PortsOrigin("http://localhost:7071/");
  const t = newPortToken();
  assert.equal(o.urlFor(t), `http://localhost:7071/v1/tunnels/${t}`);
  assert.deepEqual(o.route("localhost:7071", `/v1/tunnels/${t}/a/b?c=1`), { token: t, rest: "/a/b?c=1" });
  assert.deepEqual(o.route("localhost:7071", `/v1/tunnels/${t}?c=1`), { token: t, rest: "/?c=1" });
  assert.deepEqual(o.route("localhost:7071", `/v1/tunnels/${t}`), { token: t, rest: "/" });
  assert.equal(o.route("localhost:7071", "/v1/auth/session"), null);
  assert.equal(o.route("localhost:7071", "/v1/tunnels/dpu_old-token/x"), null);
});

test("a {token} template gives each port URL an origin of its own", () => {
  const o = new PortsOrigin("https://{token}.ports.example.com");
  const t = newPortToken();
  assert.equal(o.urlFor(t), `https://${t}.ports.example.com`);
  assert.deepEqual(o.route(`${t}.ports.example.com`, "/x?y"), { token: t, rest: "/x?y" });
  assert.deepEqual(o.route(`${t.toUpperCase()}.PORTS.example.com:443`, "/"), { token: t, rest: "/" });
  // Another name, a token of the wrong shape, a deeper name: no port URL.
  assert.equal(o.route(`${t}.ports.evil.com`, "/"), null);
  assert.equal(o.route(`a.${t}.ports.example.com`, "/"), null);
  assert.equal(o.route("ports.example.com", "/"), null);
  assert.equal(o.route(undefined, "/"), null);
});

test("a ports origin that is not an origin is refused with what was wrong", () => {
  assert.throws(() => new PortsOrigin("localhost:7071"), /not http\(s\)|not a URL/);
  assert.throws(() => new PortsOrigin("ftp://x"), /not http\(s\)/);
  assert.throws(() => new PortsOrigin("http://x/path"), /more than a scheme/);
  assert.throws(() => new PortsOrigin("http://ports.{token}.example.com"), /first label/);
});
