/**
 * The console at `/`: one page, one script, one stylesheet (packages/console), served with a
 * content security policy that lets the page load only its own script and style and talk only to
 * this origin, in no frame. `/device` (the URL `denv login` prints) opens the approval page.
 */
import { consoleAssets } from "@denv/console";
import type { Context, Hono } from "hono";
import type { ApiEnv } from "./api/api-deps.ts";

const SECURITY_HEADERS: Record<string, string> = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
};

async function serve(c: Context, what: "html" | "js" | "css"): Promise<Response> {
  try {
    const assets = await consoleAssets();
    const type = {
      html: "text/html; charset=utf-8",
      js: "text/javascript; charset=utf-8",
      css: "text/css; charset=utf-8",
    }[what];
    return c.body(assets[what], 200, {
      ...SECURITY_HEADERS,
      "content-type": type,
      // The page is always fetched anew (it names the assets); the assets change only with a build.
      "cache-control": what === "html" ? "no-cache" : "public, max-age=300",
    });
  } catch (err) {
    return c.text(
      `the console could not be built (${(err as Error).message.split("\n")[0]}): run \`node packages/console/src/console-assets.ts\` in the checkout`,
      503,
    );
  }
}

export function mountConsole(app: Hono<ApiEnv>): void {
  app.get("/", (c) => serve(c, "html"));
  app.get("/console/console.js", (c) => serve(c, "js"));
  app.get("/console/console.css", (c) => serve(c, "css"));
  // The verification URL `denv login` prints: the approval page, with the code filled in.
  app.get("/device", (c) => {
    const code = (c.req.query("code") ?? "").replace(/[^A-Za-z-]/g, "").slice(0, 9);
    return c.redirect(code ? `/#/device?code=${code}` : "/#/device", 302);
  });
}
