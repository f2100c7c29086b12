/**
 * One timeout policy, end to end, with the clocks shortened instead of waited out: the server's
 * keep-alive comes every 100 ms and the clients give up after 1 s of silence, so a 4-second
 * command stands for a 40-minute one behind a transport that cuts quiet connections. Through the
 * TypeScript SDK, the CLI's client and the Python package: a command longer than any silence the
 * client allows finishes; one past its own deadline is killed and answered with `timed_out` and
 * its output so far; a server that goes silent is `timeout`, never `unavailable`.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { Denv, DenvApiError, DenvClient, type Sandbox } from "@denv/sdk";
import { type Lab, openLab } from "../harness/lab.ts";

let lab: Lab;
let sb: Sandbox;
/** A server that takes a request, answers 200 and then says nothing: a connection gone quiet. */
let silent: Server;
let silentUrl: string;

before(async () => {
  lab = await openLab({ keepAliveMs: 100 });
  sb = await new Denv({ baseUrl: lab.server.url, apiKey: lab.keyA, idleTimeoutMs: 1000 }).sandbox({
    image: "127.0.0.1:5000/denv/opsbox:bookworm",
    cmd: ["sleep", "infinity"],
  });
  silent = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "application/x-ndjson" });
    res.flushHeaders();
  });
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  silentUrl = `http://127.0.0.1:${(silent.address() as { port: number }).port}`;
});

after(async () => {
  silent?.closeAllConnections();
  silent?.close();
  await sb?.destroy();
  await lab?.close();
});

test("TypeScript: a command four times longer than the client's silence limit finishes, carried by keep-alives", async () => {
  const r = await sb.commands.run("sleep 4; echo finished");
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, "finished\n");
  assert.equal(r.timedOut, false);
  // The whole-output form, as the CLI's --json and MCP use it, streams the same way.
  const client = new DenvClient({ baseUrl: lab.server.url, apiKey: lab.keyA, idleTimeoutMs: 1000 });
  const whole = await client.exec(sb.id, { command: ["sh", "-c", "sleep 3; echo whole"] });
  assert.equal(whole.stdout, "whole\n");
});

test("TypeScript: a command past its own deadline is killed and answered with its output so far", async () => {
  const r = await sb.commands.run("echo before; sleep 30; echo never", { timeoutMs: 1500 });
  assert.equal(r.timedOut, true);
  assert.equal(r.stdout, "before\n");
});

test("TypeScript: a server that goes silent is `timeout`, not `unavailable`", async () => {
  const client = new DenvClient({ baseUrl: silentUrl, apiKey: "dk_x", idleTimeoutMs: 300 });
  await assert.rejects(
    client.execStream("env_x", { command: ["true"] }, () => {}),
    (err: unknown) =>
      err instanceof DenvApiError && err.code === "timeout" && /sent nothing for 300 ms/.test(err.message),
  );
  await assert.rejects(
    client.execWithStdin(
      "env_x",
      { command: ["cat"] },
      (async function* () {
        yield new Uint8Array([1]);
      })(),
      () => {},
    ),
    (err: unknown) => err instanceof DenvApiError && err.code === "timeout",
  );
});

const python = (script: string, env: Record<string, string>) =>
  promisify(execFile)("/usr/bin/python3", ["-c", script], {
    encoding: "utf8",
    env: { ...process.env, PYTHONPATH: join(import.meta.dirname, "../../python/src"), ...env },
  });

test("Python: the same command finishes through a client whose socket gives up after 1 s of silence; a silent server is `timeout`", async () => {
  const script = `
import json, os, denv
c = denv.Client(os.environ["URL"], os.environ["KEY"], timeout_s=1.0)
r = c.exec(os.environ["ENV"], "sleep 4; echo finished")
late = c.exec(os.environ["ENV"], "echo before; sleep 30", timeout_ms=1500)
try:
    denv.Client(os.environ["SILENT"], "dk_x", timeout_s=0.3).exec("env_x", ["true"])
    silent = "answered"
except denv.DenvError as e:
    silent = e.code
print(json.dumps({"out": r.stdout.decode(), "timed_out": late.timed_out, "late_out": late.stdout.decode(), "silent": silent}))
`;
  const { stdout } = await python(script, {
    URL: lab.server.url,
    KEY: lab.keyA,
    ENV: sb.id,
    SILENT: silentUrl,
  });
  assert.deepEqual(JSON.parse(stdout.trim().split("\n").at(-1) as string), {
    out: "finished\n",
    timed_out: true,
    late_out: "before\n",
    silent: "timeout",
  });
});
