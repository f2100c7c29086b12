import assert from "node:assert/strict";
import { test } from "node:test";
import { Hono } from "hono";
import type { ApiEnv } from "./api/api-deps.ts";
import { mountConsole } from "./console-routes.ts";

const app = new Hono<ApiEnv>();
mountConsole(app);

test("the console's page loads only its own script and style, in no frame", async () => {
  const res = await app.request("/");
  assert.equal(res.status, 200);
  const csp = res.headers.get("content-security-policy") ?? "";
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /script-src 'self'/);
  assert.match(csp, /frame-ancestors 'none'/);
  assert.equal(res.headers.get("x-content-type-options"), "nosniff");
  const html = await res.text();
  assert.match(html, /<script type="module" src="\/console\/console.js">/);
  const js = await app.request("/console/console.js");
  assert.equal(js.headers.get("content-type"), "text/javascript; charset=utf-8");
  assert.ok((await js.text()).length < 300 * 1024, "under 300 KB of script");
});

test("/device keeps only a code's letters and dash: nothing else reaches the page's URL", async () => {
  for (const [asked, to] of [
    ["/device?code=BCDF-GHJK", "/#/device?code=BCDF-GHJK"],
    ["/device?code=BCDF-GHJK%22%3E%3Cscript%3Ealert(1)%3C/script%3E", "/#/device?code=BCDF-GHJK"],
    ["/device?code=%2F%2Fevil.example", "/#/device?code=evilexamp"],
    ["/device", "/#/device"],
  ] as const) {
    const res = await app.request(asked, { redirect: "manual" });
    assert.equal(res.status, 302, asked);
    assert.equal(res.headers.get("location"), to, asked);
  }
});
