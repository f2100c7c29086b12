/**
 * The installer tells a server it could not reach from one that answered (issue 70: a wrong URL's
 * clear 404 was shown as "cannot reach the denv server"). This checkout's install.sh, run as the
 * one-line install runs it, against loopback only: a port nothing listens on, and a server that
 * answers 404 with denv's error body. Nothing is installed: the download is the first thing that fails.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { test } from "node:test";

const INSTALLER = join(import.meta.dirname, "../../packages/server/src/install.sh");

/** Run without blocking this process: the test's own server must answer while curl waits on it. */
const install = (server: string) =>
  new Promise<{ status: number | null; stderr: string }>((resolve) => {
    execFile(
      "sh",
      [INSTALLER, "--server", server, "--token", "djt_x"],
      { encoding: "utf8" },
      (err, _out, stderr) => resolve({ status: err ? ((err as { code?: number }).code ?? null) : 0, stderr }),
    );
  });

test("the installer says a server cannot be reached, or what it answered, and installs nothing", async () => {
  const before = existsSync("/usr/local/bin/denvd");
  const refused = await install("http://127.0.0.1:1");
  assert.equal(refused.status, 1);
  assert.match(refused.stderr, /the denv server at http:\/\/127\.0\.0\.1:1 cannot be reached \(curl: \(7\)/);
  const server = createServer((req, res) => {
    res.writeHead(404, { "content-type": "application/json" });
    // A hostile server writes raw terminal controls into its message (not JSON's escapes): they must
    // not reach the user's terminal.
    const controls = req.url?.includes("hostile") ? "\u001b]0;owned\u0007\u001b[2J" : "";
    res.end(`{"error":{"code":"not_found","message":"${controls}no route GET ${req.url}"}}`);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/not-here`;
    const wrong = await install(url);
    assert.equal(wrong.status, 1);
    assert.match(
      wrong.stderr,
      new RegExp(
        `the denv server at ${url.replace(/[.]/g, "\\.")} answered 404: no route GET /not-here/v1/downloads/denvd\\.version: check the URL`,
      ),
    );
    const hostile = await install(`http://127.0.0.1:${(server.address() as AddressInfo).port}/hostile`);
    assert.equal(hostile.status, 1);
    assert.match(hostile.stderr, /answered 404: .*no route GET \/hostile/);
    // No byte below a space but the newlines: not ESC, not BEL.
    assert.ok(
      [...hostile.stderr].every((ch) => ch === "\n" || ch.charCodeAt(0) >= 0x20),
      "no control byte of the server's",
    );
  } finally {
    server.close();
  }
  assert.equal(existsSync("/usr/local/bin/denvd"), before, "nothing installed");
});
