/**
 * One contract, three drivers. dir and btrfs run for real here (btrfs on a loop-mounted image under
 * /var/lib/denv-test, once with its commands started here and once through the host agent, whose
 * ioctls do the subvolumes, quotas and flushes in place of `btrfs`); zfs runs where the zfs command exists and is skipped, with the reason printed,
 * where it does not (these machines have no ZFS).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmod, chown, mkdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { defaultAgentBinary } from "../exec/agent-binary.ts";
import { BTRFS_BUILTIN } from "../exec/agent-protocol.ts";
import { runHostBuiltin, startHostAgent, stopHostAgent } from "../host/host-command.ts";
import { DiffBudget, diffTrees } from "../snapshots/tree-diff.ts";
import { BtrfsDriver } from "./btrfs-driver.ts";
import { DirDriver } from "./dir-driver.ts";
import type { StorageDriver } from "./storage-driver.ts";
import { ZfsDriver } from "./zfs-driver.ts";

const runDir = join("/var/lib/denv-test", `storage-${randomBytes(4).toString("hex")}`);
const hasZfs = (() => {
  try {
    execFileSync("zfs", ["version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();

function contract(
  name: string,
  make: () => StorageDriver,
  skip: string | false = false,
  options: { hostAgent?: boolean } = {},
): void {
  describe(`storage contract: ${name}`, { skip }, () => {
    const driver = skip ? (undefined as unknown as StorageDriver) : make();
    const id = (p: string) => `${p}-${randomBytes(3).toString("hex")}`;
    if (options.hostAgent) {
      before(async () => {
        const binary = defaultAgentBinary();
        assert.ok(binary, "denv-agent is built by the set-up");
        assert.equal(await startHostAgent(binary), true);
      });
      after(() => stopHostAgent());
      test("the host agent does the btrfs operations itself", async () => {
        await driver.init();
        const r = await runHostBuiltin(BTRFS_BUILTIN, ["sync", (driver as BtrfsDriver).poolPath], {
          timeoutMs: 60_000,
        });
        assert.deepEqual([r?.via, r?.exitCode, r?.stderr], ["agent", 0, ""]);
      });
    }

    test("init is idempotent and reports capacity", async () => {
      await driver.init();
      await driver.init();
      const cap = await driver.capacity();
      assert.ok(cap.totalBytes > 0 && cap.freeBytes > 0 && cap.freeBytes <= cap.totalBytes);
    });

    test("a dataset is an empty writable directory; ownership and modes survive snapshot and clone", async () => {
      const ds = await driver.createDataset(id("ds"));
      assert.equal(ds.path, driver.datasetPath(ds.id));
      await mkdir(join(ds.path, "sub"));
      await writeFile(join(ds.path, "sub", "f.txt"), "v1");
      await chown(join(ds.path, "sub", "f.txt"), 1000, 1000);
      await symlink("sub/f.txt", join(ds.path, "link"));
      const snap = await driver.snapshot(ds.id, id("snap"));
      const clone = await driver.clone(snap.id, id("clone"));
      const st = await stat(join(clone.path, "sub", "f.txt"));
      assert.equal(st.uid, 1000);
      assert.equal(await readFile(join(clone.path, "link"), "utf8"), "v1");
      assert.ok((await driver.snapshotBytes(snap.id)) >= 2);
      await driver.destroyDataset(clone.id);
      await driver.destroySnapshot(snap.id);
      await driver.destroyDataset(ds.id);
    });

    test("a clone's diff against its snapshot (snapshotTree): each change, compared by inode where the clone shares them", async () => {
      const ds = await driver.createDataset(id("ds"));
      await writeFile(join(ds.path, "keep"), "same");
      await writeFile(join(ds.path, "edit"), "one");
      await writeFile(join(ds.path, "mode"), "m");
      const snap = await driver.snapshot(ds.id, id("snap"));
      const clone = await driver.clone(snap.id, id("clone"));
      await writeFile(join(clone.path, "edit"), "two");
      await chmod(join(clone.path, "mode"), 0o600);
      await writeFile(join(clone.path, "new"), "n");
      const budget = new DiffBudget();
      const r = await diffTrees("v", await driver.snapshotTree(snap.id), clone.path, budget);
      assert.deepEqual(
        budget.entries.map((e) => `${e.change} ${e.path} ${e.changed?.join() ?? ""}`.trim()),
        ["modified edit content", "modified mode mode", "created new"],
      );
      // btrfs and zfs clones keep their snapshot's inodes; dir's copies do not.
      assert.equal(r.method, name === "dir" ? "bytes" : "inode-ctime");
      await driver.destroyDataset(clone.id);
      await driver.destroySnapshot(snap.id);
      await driver.destroyDataset(ds.id);
    });

    test("a snapshot is a point in time; a clone is isolated from its source and its siblings", async () => {
      const ds = await driver.createDataset(id("ds"));
      await writeFile(join(ds.path, "data"), "before");
      const snap = await driver.snapshot(ds.id, id("snap"));
      await writeFile(join(ds.path, "data"), "after");
      const a = await driver.clone(snap.id, id("a"));
      const b = await driver.clone(snap.id, id("b"));
      assert.equal(await readFile(join(a.path, "data"), "utf8"), "before");
      await writeFile(join(a.path, "data"), "written in a");
      assert.equal(await readFile(join(b.path, "data"), "utf8"), "before");
      assert.equal(await readFile(join(ds.path, "data"), "utf8"), "after");
      for (const d of [a, b, ds]) await driver.destroyDataset(d.id);
      await driver.destroySnapshot(snap.id);
    });

    test("lists what exists; destroy is idempotent", async () => {
      const ds = await driver.createDataset(id("ds"));
      const snap = await driver.snapshot(ds.id, id("snap"));
      assert.ok((await driver.listDatasets()).includes(ds.id));
      assert.ok((await driver.listSnapshots()).includes(snap.id));
      await driver.destroySnapshot(snap.id);
      await driver.destroySnapshot(snap.id);
      await driver.destroyDataset(ds.id);
      await driver.destroyDataset(ds.id);
      assert.ok(!(await driver.listDatasets()).includes(ds.id));
      assert.ok(!(await driver.listSnapshots()).includes(snap.id));
    });

    test("a dataset's growth is capped where the driver has quotas, and said to be unlimited where not", async () => {
      const ds = await driver.createDataset(id("ds"));
      await writeFile(join(ds.path, "base"), Buffer.alloc(4 * 1024 * 1024, 1));
      const snap = await driver.snapshot(ds.id, id("snap"));
      const fork = await driver.clone(snap.id, id("fork"));
      const q = await driver.limitGrowth(fork.id, 8 * 1024 * 1024);
      const write = async () => {
        // 16 MiB of new data, in 1 MiB writes, synced so the quota sees them.
        const { open } = await import("node:fs/promises");
        const fh = await open(join(fork.path, "big"), "w");
        try {
          for (let i = 0; i < 16; i++) {
            await fh.write(Buffer.alloc(1024 * 1024, i + 1));
            await fh.sync();
          }
        } finally {
          await fh.close();
        }
      };
      if (q.enforced === "none") {
        assert.equal(q.limit_bytes, null);
        assert.match(q.reason ?? "", /no quotas/);
        await write();
      } else {
        // The limit counts what the fork held when it was made (4 MiB of its snapshot) plus the growth.
        assert.ok(
          (q.limit_bytes ?? 0) >= 12 * 1024 * 1024 && (q.limit_bytes ?? 0) < 13 * 1024 * 1024,
          String(q.limit_bytes),
        );
        // EDQUOT (122), which Node reports as an unknown system error.
        await assert.rejects(
          write(),
          (err: NodeJS.ErrnoException) => err.code === "EDQUOT" || err.errno === -122,
        );
        // The source of the fork is not limited by its fork's quota.
        await writeFile(join(ds.path, "more"), Buffer.alloc(16 * 1024 * 1024, 2));
      }
      for (const d of [fork, ds]) await driver.destroyDataset(d.id);
      await driver.destroySnapshot(snap.id);
    });

    test("unsafe ids are refused", async () => {
      await assert.rejects(driver.createDataset("../escape"));
      await assert.rejects(driver.createDataset("a/b"));
    });
  });
}

contract("dir", () => new DirDriver(join(runDir, "dir")));
const btrfs = new BtrfsDriver({ stateDir: join(runDir, "btrfs"), imageSizeBytes: 2 * 1024 ** 3 });
contract("btrfs", () => btrfs);
contract("btrfs, through the host agent", () => btrfs, false, { hostAgent: true });
contract(
  "zfs",
  () => new ZfsDriver("denvtest"),
  hasZfs ? false : "zfs is not installed on this machine (no ZFS here)",
);

test("btrfs snapshot is a btrfs read-only subvolume", async () => {
  await btrfs.init();
  const ds = await btrfs.createDataset(`ro-${randomBytes(3).toString("hex")}`);
  const snap = await btrfs.snapshot(ds.id, `ro-snap-${randomBytes(3).toString("hex")}`);
  const out = execFileSync("btrfs", ["property", "get", join(btrfs.poolPath, "snapshots", snap.id), "ro"], {
    encoding: "utf8",
  });
  assert.match(out, /ro=true/);
  await btrfs.destroySnapshot(snap.id);
  await btrfs.destroyDataset(ds.id);
});

after(async () => {
  await btrfs.unmount().catch(() => {});
  await rm(runDir, { recursive: true, force: true });
});
