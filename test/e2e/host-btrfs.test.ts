/**
 * The host agent's btrfs operations (agent/agent-btrfs.c), asked for directly: what each one makes
 * is what `btrfs` shows, and hostile paths and arguments fail without touching anything — a link
 * where a subvolume is named is never followed, a directory is never taken for a subvolume, a
 * name that is not a plain one makes nothing. A container's agent does none of them.
 */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import {
  AGENT_SOCKET_NAME,
  AgentChannel,
  AgentExecutor,
  BTRFS_BUILTIN,
  BtrfsDriver,
  defaultAgentBinary,
  runHostBuiltin,
  startHostAgent,
  stopHostAgent,
} from "@denv/denvd";

const binary = defaultAgentBinary();
const runDir = join("/var/lib/denv-test", `host-btrfs-${randomBytes(4).toString("hex")}`);
const driver = new BtrfsDriver({ stateDir: runDir, imageSizeBytes: 1024 ** 3 });
const pool = () => driver.poolPath;

before(async () => {
  assert.ok(binary, "denv-agent is built by the set-up");
  await driver.init();
  assert.equal(await startHostAgent(binary), true);
});

after(async () => {
  await stopHostAgent();
  await driver.unmount().catch(() => {});
  rmSync(runDir, { recursive: true, force: true });
});

async function op(...args: string[]) {
  const r = await runHostBuiltin(BTRFS_BUILTIN, args, { timeoutMs: 60_000 });
  assert.ok(r, "the host agent answered");
  return r;
}

const isSubvolume = (path: string) => statSync(path).ino === 256;
const btrfs = (...args: string[]) => execFileSync("btrfs", args, { encoding: "utf8" });

test("each operation makes what btrfs itself shows", async () => {
  const ds = join(pool(), "datasets", "made");
  assert.equal((await op("subvolume-create", ds)).exitCode, 0);
  assert.ok(isSubvolume(ds));
  writeFileSync(join(ds, "file"), "x".repeat(100_000));
  assert.equal((await op("sync", pool())).exitCode, 0);

  const limited = await op("limit-growth", String(8 * 1024 * 1024), ds);
  assert.equal(limited.exitCode, 0, limited.stderr);
  const [referenced = Number.NaN, limit] = limited.stdout.trim().split(" ").map(Number);
  assert.ok(referenced >= 100_000, "the file written is counted");
  const shown = btrfs("qgroup", "show", "--raw", "-r", "-f", ds)
    .split("\n")
    .find((l) => /^0\/\d+\s/.test(l.trim()))
    ?.trim()
    .split(/\s+/);
  assert.ok(shown, "btrfs shows the dataset's qgroup");
  assert.equal(Number(shown[1]), referenced, "the referenced bytes btrfs shows");
  assert.equal(limit, referenced + 8 * 1024 * 1024);
  assert.equal(Number(shown[3]), limit, "the limit btrfs shows as max_rfer");

  const ro = join(pool(), "snapshots", "made-ro");
  assert.equal((await op("snapshot", "ro", ds, ro)).exitCode, 0);
  assert.match(btrfs("property", "get", ro, "ro"), /ro=true/);
  assert.throws(() => writeFileSync(join(ro, "more"), "x"), /EROFS/);
  const rw = join(pool(), "datasets", "made-rw");
  assert.equal((await op("snapshot", "rw", ro, rw)).exitCode, 0);
  assert.match(btrfs("property", "get", rw, "ro"), /ro=false/);
  writeFileSync(join(rw, "more"), "y");
  assert.equal(statSync(join(rw, "file")).size, 100_000);

  for (const path of [rw, ro, ds]) {
    assert.equal((await op("subvolume-delete", path)).exitCode, 0);
    assert.equal(existsSync(path), false);
  }
});

test("a link or a directory where a subvolume is named is refused and left as it is", async () => {
  const target = join(pool(), "datasets", "target");
  assert.equal((await op("subvolume-create", target)).exitCode, 0);
  const link = join(pool(), "datasets", "link");
  symlinkSync(target, link);
  const plain = join(target, "plain-dir");
  mkdirSync(plain);

  const viaLink = await op("subvolume-delete", link);
  assert.equal(viaLink.exitCode, 1);
  assert.match(viaLink.stderr, /subvolume-delete .*link: Invalid argument/);
  assert.ok(isSubvolume(target), "the subvolume the link names is still there");

  assert.equal((await op("subvolume-delete", plain)).exitCode, 1);
  assert.ok(existsSync(plain));

  const fromLink = await op("snapshot", "ro", link, join(pool(), "snapshots", "from-link"));
  assert.equal(fromLink.exitCode, 1);
  assert.match(fromLink.stderr, /Too many levels of symbolic links|Not a directory/);
  assert.equal(existsSync(join(pool(), "snapshots", "from-link")), false);

  // A directory inside a subvolume is not one: neither snapshotted nor given the quota of the
  // subvolume that holds it.
  assert.equal((await op("snapshot", "ro", plain, join(pool(), "snapshots", "from-dir"))).exitCode, 1);
  assert.equal(existsSync(join(pool(), "snapshots", "from-dir")), false);
  assert.equal((await op("limit-growth", "1048576", plain)).exitCode, 1);
  assert.equal((await op("limit-growth", "1048576", link)).exitCode, 1);
  assert.equal((await op("subvolume-delete", target)).exitCode, 0);
});

test("names that are not plain, numbers that are not whole, and unknown operations make nothing", async () => {
  const before = btrfs("subvolume", "list", pool());
  const src = join(pool(), "datasets", "src");
  assert.equal((await op("subvolume-create", src)).exitCode, 0);
  for (const path of ["relative", `${pool()}/datasets/..`, `${pool()}/datasets/.`, `${pool()}/datasets/`]) {
    const r = await op("subvolume-create", path);
    assert.equal(r.exitCode, 1, path);
    assert.match(r.stderr, /Invalid argument/, path);
    assert.equal((await op("snapshot", "rw", src, path)).exitCode, 1, path);
  }
  assert.equal((await op("snapshot", "rwx", src, join(pool(), "datasets", "odd"))).exitCode, 1);
  for (const bytes of ["-1", "", "1e3", "12abc", "18446744073709551616"]) {
    const r = await op("limit-growth", bytes, src);
    assert.equal(r.exitCode, 1, `limit-growth ${JSON.stringify(bytes)}`);
  }
  // A growth that fits 64 bits but not beside what the subvolume already holds.
  writeFileSync(join(src, "file"), "x");
  assert.equal((await op("sync", pool())).exitCode, 0);
  const past = await op("limit-growth", "18446744073709551615", src);
  assert.equal(past.exitCode, 1);
  assert.match(past.stderr, /out of range/);
  for (const args of [[], ["mkfs", pool()], ["subvolume-create"], ["snapshot", "ro", src]]) {
    const r = await op(...args);
    assert.equal(r.exitCode, 2, args.join(" "));
    assert.match(r.stderr, /unknown operation or wrong arguments/);
  }
  assert.equal((await op("subvolume-delete", src)).exitCode, 0);
  assert.equal(btrfs("subvolume", "list", pool()), before, "nothing was made");
});

test("a container's agent has no btrfs operations: the name is a program it does not find", async () => {
  assert.ok(binary);
  const dir = mkdtempSync(join(tmpdir(), "denv-agent-btrfs-"));
  const channel = new AgentChannel(dir);
  const socketDir = await channel.listen("box");
  // The agent as a container runs it (`denv-agent SOCKET`), here on the host as root.
  const child = spawn(binary, [join(socketDir, AGENT_SOCKET_NAME)], { stdio: "ignore" });
  try {
    assert.equal(await channel.waitConnected("box", 10_000), true);
    const executor = new AgentExecutor({ exec: async () => assert.fail("the agent was reached") }, () => ({
      dial: () => channel.dial("box", 10_000),
      defaultUser: null,
      homeSet: true,
    }));
    const target = join(pool(), "datasets", "from-a-container");
    const r = await executor.exec("box", {
      command: [BTRFS_BUILTIN, "subvolume-create", target],
      timeoutMs: 10_000,
      stdin: null,
    });
    assert.equal(r.exitCode, 127);
    assert.match(r.stderr.toString(), /No such file/);
    assert.equal(existsSync(target), false);
  } finally {
    child.kill("SIGKILL");
    await channel.closeAll();
    rmSync(dir, { recursive: true, force: true });
  }
});
