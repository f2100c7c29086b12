/**
 * `exec -t` and `-it` (issue 70): a command on a real terminal in the service — a pseudo-terminal
 * the agent makes, of the size asked, the command's session's controlling terminal, owned by the
 * command's user — through the API and through `denv exec -it` with what is typed sent as it is
 * typed. Hostile sizes are refused saying where; a command without -t has no terminal.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
const CLI = join(import.meta.dirname, "../../packages/cli/bin/denv.js");
let lab: Lab;

const COMPOSE = `x-denv: { kind: agent }
services:
  box:
    image: ${OPSBOX}
    user: "1000:1000"
    command: ["sleep", "infinity"]
`;

before(async () => {
  lab = await openLab();
  await lab.api("POST", "/v1/projects", { name: "tty", kind: "agent", source: "./tty" });
  const put = await lab.api("PUT", "/v1/projects/tty/source", { compose: COMPOSE });
  assert.equal(put.status, 200, JSON.stringify(put.data));
  const d = await lab.api("POST", "/v1/projects/tty/deploy?wait=true", { env: "t" });
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data));
});

after(async () => {
  await lab?.close();
});

test("a command asked for with a terminal runs on one of that size, its own, with its output all on stdout", async () => {
  const r = await lab.api("POST", "/v1/envs/tty%2Ft/exec", {
    command: [
      "sh",
      "-c",
      'tty; stty size; test -t 0 && test -t 1 && echo on-a-terminal; stat -c "owner %u" "$(tty)"; echo to-stderr >&2',
    ],
    tty: { rows: 40, cols: 120 },
  });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  assert.equal(r.data.exit_code, 0, JSON.stringify(r.data));
  assert.match(r.data.stdout, /^\/dev\/pts\/\d+\r?$/m);
  assert.match(r.data.stdout, /^40 120\r?$/m);
  assert.match(r.data.stdout, /^on-a-terminal\r?$/m);
  // The terminal is the command's user's, as a login's would be.
  assert.match(r.data.stdout, /^owner 1000\r?$/m);
  // A terminal has one output: what went to stderr comes with the rest.
  assert.match(r.data.stdout, /^to-stderr\r?$/m);
  assert.equal(r.data.stderr, "");
  // Without one, the same command has none.
  const plain = await lab.api("POST", "/v1/envs/tty%2Ft/exec", {
    command: ["sh", "-c", "test -t 0 || echo no-terminal"],
  });
  assert.equal(plain.data.stdout, "no-terminal\n");
});

test("a terminal's size out of bounds is refused saying which, and nothing runs", async () => {
  for (const tty of [
    { rows: 0, cols: 80 },
    { rows: 24, cols: 100_000 },
    { rows: 24 },
    { rows: 24, cols: 80, x: 1 },
  ]) {
    const r = await lab.api("POST", "/v1/envs/tty%2Ft/exec", { command: ["touch", "/tmp/ran"], tty });
    assert.equal(r.status, 400, JSON.stringify(r.data));
    assert.equal(r.data.error.code, "invalid_argument");
    assert.match(r.data.error.message, /tty/);
  }
  const ran = await lab.api("POST", "/v1/envs/tty%2Ft/exec", { command: ["test", "-e", "/tmp/ran"] });
  assert.equal(ran.data.exit_code, 1, "nothing ran");
});

test("denv exec -it sends what is typed as it is typed, and the terminal's end ends the command's input", async () => {
  const child = spawn(
    process.execPath,
    [
      CLI,
      "exec",
      "-i",
      "-t",
      "tty/t",
      "--",
      "sh",
      "-c",
      'test -t 0 && echo on-a-terminal; read line; echo "got [$line]"; cat; echo "cat ended"',
    ],
    { env: { ...process.env, DENV_SERVER: lab.server.url, DENV_API_KEY: lab.keyA } },
  );
  let out = "";
  let err = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr.on("data", (b: Buffer) => (err += b.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  // The first line, typed: the terminal echoes it, and the command answers it while it still runs.
  child.stdin.write("hello\n");
  await waitFor("the command's answer to the typed line", () => out.includes("got [hello]"));
  child.stdin.write("more\n");
  await waitFor("cat echoing the second line", () => (out.match(/more/g) ?? []).length >= 2);
  // The input's end is the terminal's ^D: cat ends, and so does the command, with its status.
  child.stdin.end();
  assert.equal(await exited, 0, `${out}\n${err}`);
  assert.match(out, /cat ended/);
  assert.match(out, /on-a-terminal/);
});
