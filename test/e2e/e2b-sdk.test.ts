/**
 * The unmodified E2B SDK (`e2b` from the npm registry) against a live denv (a real server, denvd
 * and engine), pointed at it by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY only: the SDK's README
 * example, commands in the foreground and the background with streamed output, stdin, kill, envs,
 * cwd and user, files, list and kill of sandboxes, a timeout that expires, a sandbox from an
 * ops-world version whose psql count is checked, denv's fork, PROJECT/ENV and named snapshots as
 * templates; then another team's key and a wrong
 * access token, refused. An older release (2.27.1, which accepts only keys in E2B's form) runs with
 * a key made by `denv key create --e2b`.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { CommandExitError, Sandbox } from "e2b";
import { Sandbox as Sandbox227 } from "e2b-2-27";
import { deployOpsWorld, type Lab, openLab } from "../harness/lab.ts";
import { elapse, waitFor } from "../harness/wait-for.ts";

const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
let lab: Lab;
let version: string;

before(async () => {
  lab = await openLab({ e2bSweepMs: 200 });
  version = await deployOpsWorld(lab);
  // The SDK's own configuration, as a user sets it: nothing else changes.
  process.env.E2B_API_URL = `${lab.server.url}/e2b`;
  process.env.E2B_SANDBOX_URL = `${lab.server.url}/e2b`;
  process.env.E2B_API_KEY = lab.keyA;
});

after(async () => {
  await lab?.close();
});

test("the SDK's README example: create, run a command, write and read a file, kill", async () => {
  const sbx = await Sandbox.create(OPSBOX);
  try {
    const r = await sbx.commands.run('echo "hello world"');
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, "hello world\n");
    await sbx.files.write("/tmp/hello.txt", "Hello, world!");
    assert.equal(await sbx.files.read("/tmp/hello.txt"), "Hello, world!");
    const names = (await sbx.files.list("/tmp")).map((e) => e.name);
    assert.ok(names.includes("hello.txt"), names.join(","));
    // The agent is never root: the image's commands run as uid 1000.
    assert.equal((await sbx.commands.run("id -u")).stdout.trim(), "1000");
  } finally {
    assert.equal(await sbx.kill(), true);
  }
  const running = await Sandbox.list().nextItems();
  assert.ok(!running.some((s) => s.sandboxId === sbx.sandboxId));
});

test("commands: streamed output, a failing exit, envs, cwd and user; background with stdin, list and kill", async () => {
  const sbx = await Sandbox.create(OPSBOX, { envs: { FROM_CREATE: "c1" } });
  try {
    // Streamed: the first line reaches the caller while the command still waits for the test's go.
    const chunks: string[] = [];
    const waiting = await sbx.commands.run(
      "echo line1; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo line2; echo oops >&2",
      { background: true, onStdout: (d) => void chunks.push(d) },
    );
    await waitFor("line1 to reach the caller", () => chunks.join("").includes("line1"));
    assert.equal(chunks.join(""), "line1\n");
    await sbx.files.write("/tmp/go", "");
    const r = await waiting.wait();
    assert.equal(r.stdout, "line1\nline2\n");
    assert.equal(r.stderr, "oops\n");

    await assert.rejects(
      sbx.commands.run("exit 3"),
      (e: unknown) => e instanceof CommandExitError && e.exitCode === 3,
    );

    const env = await sbx.commands.run('echo "$FROM_CREATE $FROM_RUN $(pwd)"', {
      envs: { FROM_RUN: "r1" },
      cwd: "/tmp",
    });
    assert.equal(env.stdout, "c1 r1 /tmp\n");
    assert.equal((await sbx.commands.run("id -u", { user: "root" })).stdout.trim(), "0");

    const cat = await sbx.commands.run("cat", { background: true, stdin: true });
    assert.ok(cat.pid > 0);
    await sbx.commands.sendStdin(cat.pid, "piped in\n");
    await sbx.commands.closeStdin(cat.pid);
    const catDone = await cat.wait();
    assert.equal(catDone.stdout, "piped in\n");

    const sleeper = await sbx.commands.run("sleep 600", { background: true });
    const listed = await sbx.commands.list();
    assert.ok(
      listed.some((p) => p.pid === sleeper.pid),
      JSON.stringify(listed),
    );
    assert.equal(await sbx.commands.kill(sleeper.pid), true);
    await assert.rejects(sleeper.wait(), (e: unknown) => e instanceof CommandExitError);
    assert.ok(!(await sbx.commands.list()).some((p) => p.pid === sleeper.pid));
    assert.equal(await sbx.commands.kill(sleeper.pid), false);
  } finally {
    await sbx.kill();
  }
});

test("files: exists, makeDir, rename, remove", async () => {
  const sbx = await Sandbox.create(OPSBOX);
  try {
    assert.equal(await sbx.files.makeDir("/tmp/a/b"), true);
    assert.equal(await sbx.files.makeDir("/tmp/a/b"), false);
    await sbx.files.write("/tmp/a/b/x.txt", "x");
    assert.equal(await sbx.files.exists("/tmp/a/b/x.txt"), true);
    const moved = await sbx.files.rename("/tmp/a/b/x.txt", "/tmp/a/y.txt");
    assert.equal(moved.path, "/tmp/a/y.txt");
    assert.equal(await sbx.files.exists("/tmp/a/b/x.txt"), false);
    await sbx.files.remove("/tmp/a");
    assert.equal(await sbx.files.exists("/tmp/a"), false);
    await assert.rejects(sbx.files.read("/tmp/nothing-here"));
  } finally {
    await sbx.kill();
  }
});

test("files: watchDir reports a file made, written and removed, until stopped", async () => {
  const sbx = await Sandbox.create(OPSBOX);
  try {
    await sbx.files.makeDir("/tmp/w");
    const events: { name: string; type: string }[] = [];
    const handle = await sbx.files.watchDir("/tmp/w", (e) => {
      events.push({ name: e.name, type: e.type });
    });
    // Each step waits until its event is seen (the watch looks every 250 ms), however slow the machine.
    const seen = async (type: string) => {
      await waitFor(`a.txt's ${type} event`, () => events.some((e) => e.name === "a.txt" && e.type === type));
      assert.ok(
        events.some((e) => e.name === "a.txt" && e.type === type),
        `${type}: ${JSON.stringify(events)}`,
      );
    };
    await sbx.files.write("/tmp/w/a.txt", "1");
    await seen("create");
    await sbx.files.write("/tmp/w/a.txt", "22");
    await seen("write");
    await sbx.files.remove("/tmp/w/a.txt");
    await seen("remove");
    await handle.stop();
    const count = events.length;
    await sbx.files.write("/tmp/w/b.txt", "after");
    // Stopped: however long we look, nothing more comes (a poll's worth and more).
    await elapse(1000, "a stopped watch must send nothing, however long we look (four of its polls)");
    assert.equal(events.length, count);
  } finally {
    await sbx.kill();
  }
});

test("a sandbox from an ops-world version reads its 100,000 rows, and denv's fork carries its state", async () => {
  const sbx = await Sandbox.create(version);
  try {
    const count = await sbx.commands.run("psql -tAc 'select count(*) from orders'");
    assert.equal(count.stdout.trim(), "100000");
    await sbx.files.write("/home/ubuntu/answer.txt", "forty-two");
    const [fork] = await sbx.fork({ count: 1 });
    assert.ok(fork);
    const forked = fork as Sandbox;
    try {
      assert.notEqual(forked.sandboxId, sbx.sandboxId);
      assert.equal(await forked.files.read("/home/ubuntu/answer.txt"), "forty-two");
    } finally {
      await forked.kill();
    }
  } finally {
    await sbx.kill();
  }
});

test("templates: PROJECT/ENV is that environment's current version; a named snapshot is a template, listed with its sandbox", async () => {
  const sbx = await Sandbox.create("ops-world/alpha");
  try {
    assert.equal((await sbx.commands.run("psql -tAc 'select count(*) from orders'")).stdout.trim(), "100000");
    await sbx.files.write("/home/ubuntu/answer.txt", "snapshotted");
    const snap = await sbx.createSnapshot({ name: "answered" });
    assert.match(snap.snapshotId, /^ver_/);
    assert.deepEqual(snap.names, ["answered"]);
    const listed = await sbx.listSnapshots().nextItems();
    assert.deepEqual(
      listed.map((x) => x.snapshotId),
      [snap.snapshotId],
    );
    for (const template of ["answered", snap.snapshotId]) {
      const from = await Sandbox.create(template);
      try {
        assert.equal(await from.files.read("/home/ubuntu/answer.txt"), "snapshotted");
      } finally {
        await from.kill();
      }
    }
  } finally {
    await sbx.kill();
  }
});

test("pause and resume: the sandbox keeps its id and its volumes' files; a paused one answers no command", async () => {
  const sbx = await Sandbox.create(OPSBOX);
  try {
    // /work is the image sandbox's volume (root's): what a version keeps of it.
    await sbx.files.write("/work/kept.txt", "before the pause", { user: "root" });
    assert.equal(await sbx.pause(), true);
    assert.equal(await sbx.pause(), false, "pausing a paused sandbox is E2B's 409");
    assert.equal((await sbx.getInfo()).state, "paused");
    await assert.rejects(sbx.commands.run("true"), /paused/);
    const resumed = await Sandbox.connect(sbx.sandboxId);
    assert.equal(resumed.sandboxId, sbx.sandboxId);
    assert.equal((await resumed.getInfo()).state, "running");
    assert.equal(await resumed.files.read("/work/kept.txt", { user: "root" }), "before the pause");
    assert.equal((await resumed.commands.run("echo back")).stdout, "back\n");
  } finally {
    await sbx.kill();
  }
});

test("pause keeps memory: a sandbox from an ops-world version resumes with the same processes, through the SDK", async () => {
  const sbx = await Sandbox.create(version);
  try {
    // Only the running Redis holds these: its run id (drawn at each start) and a setting changed
    // at run time (a restart reads its configuration again).
    const redis = (command: string) =>
      sbx.commands.run(`redis-cli -h queue ${command}`).then((r) => r.stdout.trim());
    assert.equal(await redis("config set maxmemory-samples 7"), "OK");
    const runId = (await redis("info server")).match(/^run_id:(\w+)/m)?.[1];
    assert.ok(runId);
    assert.equal(await sbx.pause(), true);
    const resumed = await Sandbox.connect(sbx.sandboxId);
    const again = (command: string) =>
      resumed.commands.run(`redis-cli -h queue ${command}`).then((r) => r.stdout.trim());
    // Each container resumes with its own address (test/e2e/pause-addresses.test.ts): the
    // box's first command reaches the same Redis under its name.
    assert.equal((await again("info server")).match(/^run_id:(\w+)/m)?.[1], runId, "the same Redis process");
    assert.equal(await again("config get maxmemory-samples"), "maxmemory-samples\n7");
  } finally {
    await sbx.kill();
  }
});

test("autoPause: the timeout pauses the sandbox instead of killing it; autoResume: the next command resumes it", async () => {
  const sbx = await Sandbox.create(OPSBOX, {
    timeoutMs: 1000,
    lifecycle: { onTimeout: "pause", autoResume: true },
  });
  try {
    const info = await waitFor("the timeout to pause the sandbox", async () => {
      const i = await sbx.getInfo();
      return i.state === "paused" ? i : null;
    });
    assert.deepEqual(info.lifecycle, { onTimeout: "pause", autoResume: true });
    // Not killed: still listed, as paused.
    const listed = (await Sandbox.list().nextItems()).find((x) => x.sandboxId === sbx.sandboxId);
    assert.equal(listed?.state, "paused");
    assert.equal((await sbx.commands.run("echo back")).stdout, "back\n");
    assert.equal((await sbx.getInfo()).state, "running");
    // autoResume asks for a pause that keeps memory: asking it with a filesystem-only one is refused.
    const raw = await fetch(`${lab.server.url}/e2b/v2/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": lab.keyA, "content-type": "application/json" },
      body: JSON.stringify({
        templateID: OPSBOX,
        autoPause: true,
        autoPauseMemory: false,
        autoResume: { enabled: true },
      }),
    });
    assert.equal(raw.status, 400);
    assert.match(((await raw.json()) as { message: string }).message, /autoResume needs autoPause/);
  } finally {
    await sbx.kill();
  }
});

test("a sandbox's timeout kills it", async () => {
  const sbx = await Sandbox.create(OPSBOX, { timeoutMs: 1000 });
  await waitFor(
    "the sandbox to end at its timeout",
    async () => !(await Sandbox.list().nextItems()).some((s) => s.sandboxId === sbx.sandboxId),
  );
  assert.ok(!(await Sandbox.list().nextItems()).some((s) => s.sandboxId === sbx.sandboxId));
  await assert.rejects(sbx.commands.run("true"));
});

test("another team's key sees no sandbox; a wrong access token reaches none", async () => {
  const sbx = await Sandbox.create(OPSBOX);
  try {
    const other = { apiKey: lab.keyB };
    assert.ok(!(await Sandbox.list(other).nextItems()).some((s) => s.sandboxId === sbx.sandboxId));
    await assert.rejects(Sandbox.connect(sbx.sandboxId, other));
    assert.equal(await Sandbox.kill(sbx.sandboxId, other), false);
    // The same sandbox id with a made-up token: envd's calls are refused.
    const forged = await fetch(`${lab.server.url}/e2b/process.Process/List`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "e2b-sandbox-id": sbx.sandboxId,
        "e2b-sandbox-port": "49983",
        "x-access-token": "ea_forged",
      },
      body: "{}",
    });
    assert.equal(forged.status, 401);
    // And it is still there for its own team.
    assert.equal((await sbx.commands.run("echo still")).stdout, "still\n");
  } finally {
    await sbx.kill();
  }
});

test("E2B SDK 2.27 (E2B's key form only): a denv key is refused by the SDK itself; one from `denv key create --e2b` works", async () => {
  await assert.rejects(Sandbox227.create(OPSBOX, { apiKey: lab.keyA }), /Invalid API key format/);
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [
      join(import.meta.dirname, "../../packages/cli/bin/denv.js"),
      "key",
      "create",
      "--name",
      "sdk 2.27",
      "--e2b",
    ],
    {
      env: {
        ...process.env,
        DENV_SERVER: lab.server.url,
        DENV_API_KEY: lab.keyA,
        DENV_CONFIG: "/nonexistent/denv.json",
      },
    },
  );
  const key = stdout.trim();
  assert.match(key, /^e2b_[0-9a-f]{40}$/);
  const sbx = await Sandbox227.create(OPSBOX, { apiKey: key });
  try {
    assert.equal((await sbx.commands.run("echo old sdk")).stdout, "old sdk\n");
    await sbx.files.write("/tmp/old.txt", "2.27");
    assert.equal(await sbx.files.read("/tmp/old.txt"), "2.27");
    // The same sandbox through the current SDK, by connect.
    const again = await Sandbox.connect(sbx.sandboxId, { apiKey: key });
    assert.equal(await again.files.read("/tmp/old.txt"), "2.27");
  } finally {
    await sbx.kill();
  }
});
