/**
 * denvd's host commands through the host agent (denv-agent in host mode): the same answers as a
 * command started by Node itself (status, output, a timeout, a missing program), arguments passed
 * as they are (never through a shell), output past its bound refused, the agent gone with its
 * parent, and every failure to have one falling back to starting the command here.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { defaultAgentBinary, hostAgentPid, runHostCommand, startHostAgent, stopHostAgent } from "@denv/denvd";
import { repoRoot } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

const binary = defaultAgentBinary();
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

after(() => stopHostAgent());

/** Whether a process is alive (a zombie counts as gone). */
function alive(pid: number): boolean {
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, "utf8"));
  } catch {
    return false;
  }
}

/**
 * Polls until ok: the kill it waits for was already sent, so this is the kernel finishing an exit;
 * the bound (two minutes) only keeps a broken kill from hanging the suite.
 */
async function until(what: string, ok: () => boolean): Promise<void> {
  await waitFor(what, ok, { intervalMs: 20, timeoutMs: 120_000 });
  assert.ok(ok(), what);
}

const cases: { name: string; file: string; args: string[]; env?: Record<string, string> }[] = [
  { name: "status and both streams", file: "sh", args: ["-c", "echo out; echo err >&2; exit 3"] },
  {
    name: "the environment given, alone",
    file: "sh",
    args: ["-c", 'echo "$FOO|$HOME|$PATH"'],
    env: { FOO: "x", PATH },
  },
  { name: "a missing program", file: "/no/such/program", args: [] },
  { name: "a signal", file: "sh", args: ["-c", "kill -TERM $$"] },
];

test("the host agent answers as a command started here does", async () => {
  assert.ok(binary, "denv-agent is built by the set-up");
  assert.equal(await startHostAgent(binary), true);
  const pid = hostAgentPid();
  assert.ok(pid && alive(pid));
  for (const c of cases) {
    const viaAgent = await runHostCommand(c.file, c.args, { timeoutMs: 10_000, env: c.env });
    await stopHostAgent();
    const here = await runHostCommand(c.file, c.args, { timeoutMs: 10_000, env: c.env });
    assert.equal(await startHostAgent(binary), true);
    assert.equal(viaAgent.via, "agent");
    assert.equal(here.via, "spawn");
    assert.equal(viaAgent.exitCode, here.exitCode, c.name);
    assert.equal(viaAgent.stdout, here.stdout, c.name);
    if (c.file.startsWith("/no/")) {
      assert.equal(viaAgent.exitCode, 127);
      assert.match(viaAgent.stderr, /No such file/);
      assert.match(here.stderr, /No such file/);
    } else assert.equal(viaAgent.stderr, here.stderr, c.name);
  }
  const first = await runHostCommand("sh", ["-c", "echo out; echo err >&2; exit 3"], { timeoutMs: 10_000 });
  assert.deepEqual([first.exitCode, first.stdout, first.stderr], [3, "out\n", "err\n"]);
  const env = await runHostCommand("sh", ["-c", 'echo "$FOO|$HOME"'], {
    timeoutMs: 10_000,
    env: { FOO: "x", PATH },
  });
  assert.equal(env.stdout, "x|\n", "nothing of denvd's environment is added to the one given");
  assert.equal((await runHostCommand("sh", ["-c", "kill -TERM $$"], { timeoutMs: 10_000 })).exitCode, 143);
});

test("two hundred commands at once all go through the agent, each with its own output", async () => {
  assert.ok(binary);
  assert.equal(await startHostAgent(binary), true);
  const rs = await Promise.all(
    Array.from({ length: 200 }, (_, i) => runHostCommand("echo", [String(i)], { timeoutMs: 60_000 })),
  );
  rs.forEach((r, i) => {
    assert.equal(r.stdout, `${i}\n`);
    assert.equal(r.via, "agent");
  });
});

test("a command past its time is killed with everything it started", async () => {
  assert.ok(binary);
  assert.equal(await startHostAgent(binary), true);
  const dir = mkdtempSync(join(tmpdir(), "denv-hostcmd-"));
  try {
    const r = await runHostCommand("sh", ["-c", `sleep 30 & echo $! > ${dir}/child; sleep 30`], {
      timeoutMs: 300,
    });
    assert.equal(r.via, "agent");
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, 137);
    const child = Number(readFileSync(join(dir, "child"), "utf8"));
    await until("the background child is gone too", () => !alive(child));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("hostile arguments are arguments, and output past its bound is refused", async () => {
  assert.ok(binary);
  assert.equal(await startHostAgent(binary), true);
  const dir = mkdtempSync(join(tmpdir(), "denv-hostcmd-"));
  try {
    const marker = join(dir, "ran");
    const hostile = [`$(touch ${marker})`, `; touch ${marker}`, "a\nb", "\u00ff\u0001", "x".repeat(4096)];
    const r = await runHostCommand("printf", ["%s\\0", ...hostile], { timeoutMs: 10_000 });
    assert.equal(r.via, "agent");
    assert.deepEqual(r.stdout.split("\0").slice(0, -1), hostile);
    assert.equal(existsSync(marker), false, "nothing in an argument ran");
    await assert.rejects(
      runHostCommand("head", ["-c", "2000000", "/dev/zero"], { timeoutMs: 10_000, maxOutputBytes: 1 << 20 }),
      /more than 1048576 bytes/,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the agent dies with its parent; an agent that cannot start leaves commands started here", async () => {
  assert.ok(binary);
  // A parent of its own, killed outright: its agent must not outlive it.
  const script = `import { startHostAgent, hostAgentPid } from "@denv/denvd";
    await startHostAgent(${JSON.stringify(binary)});
    process.stdout.write(String(hostAgentPid()) + "\\n");
    setInterval(() => {}, 1000);`;
  const parent = spawn(process.execPath, ["--input-type=module", "-e", script], {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "inherit"],
  });
  const agentPid = await new Promise<number>((resolve, reject) => {
    let out = "";
    parent.stdout?.on("data", (c: Buffer) => {
      out += c;
      if (out.includes("\n")) resolve(Number(out.trim()));
    });
    parent.once("exit", (code) => reject(new Error(`the parent exited ${code}: ${out}`)));
  });
  assert.ok(agentPid > 0 && alive(agentPid));
  const parentGone = new Promise((r) => parent.once("exit", r));
  parent.kill("SIGKILL");
  await parentGone;
  await until("the agent is gone with its parent", () => !alive(agentPid));

  // A binary that exits at once (an agent built before host mode): false, and commands run here.
  await stopHostAgent();
  assert.equal(await startHostAgent("/bin/false"), false);
  const r = await runHostCommand("echo", ["here"], { timeoutMs: 10_000 });
  assert.deepEqual([r.via, r.stdout], ["spawn", "here\n"]);
});
