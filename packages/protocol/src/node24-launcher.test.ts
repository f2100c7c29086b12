import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { longRunning, missingFlags } from "../bin/node24-launcher.js";

const root = join(import.meta.dirname, "..", "..", "..");

test("the long-running commands are denv server, denv up and denvd run; nothing else", () => {
  assert.ok(longRunning("denv", ["server", "--port", "0"]));
  assert.ok(longRunning("denv", ["up", "--storage", "dir"]));
  assert.ok(longRunning("denvd", ["run", "--state-dir", "/x"]));
  assert.ok(longRunning("denv", ["--json", "server"]));
  for (const [cmd, args] of [
    ["denv", ["fork", "server"]],
    ["denv", ["env", "list"]],
    ["denvd", ["join", "--server", "http://x"]],
    ["denvd", ["server"]],
    ["denv", ["run"]],
    ["denv", []],
  ] as const)
    assert.equal(longRunning(cmd, [...args]), false, `${cmd} ${args.join(" ")}`);
});

test("a flag the user gave node (with any value) is not given again", () => {
  assert.deepEqual(missingFlags("denv", ["server"], []), ["--max-semi-space-size=2"]);
  assert.deepEqual(missingFlags("denv", ["server"], ["--max-semi-space-size=16"]), []);
  assert.deepEqual(missingFlags("denv", ["server"], ["--inspect"]), ["--max-semi-space-size=2"]);
  assert.deepEqual(missingFlags("denv", ["login"], []), []);
  assert.deepEqual(
    missingFlags("denvd", ["run"], ["--max_semi_space_size=8"]),
    [],
    "V8's underscore spelling",
  );
  assert.deepEqual(
    missingFlags("denv", ["up"], [], "--inspect --max-semi-space-size=8"),
    [],
    "in NODE_OPTIONS",
  );
  assert.deepEqual(missingFlags("denv", ["up"], [], "--max-old-space-size=512"), ["--max-semi-space-size=2"]);
});

test("denv server re-executes itself with the flags: the same process id, its command line carries them", async () => {
  const dataDir = mkdtempSync(join(tmpdir(), "denv-launch-"));
  const child = spawn(
    process.execPath,
    [join(root, "packages/cli/bin/denv.js"), "server", "--data-dir", dataDir, "--port", "0"],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  try {
    let out = "";
    await new Promise<void>((resolve, reject) => {
      const onData = (d: Buffer) => {
        out += d.toString();
        if (/listening|http:\/\/127\.0\.0\.1:\d+/i.test(out)) resolve();
      };
      child.stdout.on("data", onData);
      child.stderr.on("data", onData);
      child.once("exit", (code) => reject(new Error(`denv server exited ${code}: ${out.slice(-1000)}`)));
    });
    const argv = readFileSync(`/proc/${child.pid}/cmdline`, "utf8").split("\0");
    assert.ok(argv.includes("--max-semi-space-size=2"), `the server's command line: ${argv.join(" ")}`);
    assert.ok(argv.includes("server") && argv.includes(dataDir), "its own arguments kept");
  } finally {
    child.kill("SIGTERM");
    await new Promise((r) => (child.exitCode !== null ? r(null) : child.once("exit", r)));
    rmSync(dataDir, { recursive: true, force: true });
  }
});
