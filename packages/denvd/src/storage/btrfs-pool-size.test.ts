/**
 * The btrfs pool fits its disk (issue 70: a 64 GiB sparse image on a 2 GiB disk accepted writes
 * the disk could not hold; btrfs aborted its transaction and the pool went read-only). On a small
 * filesystem of its own (a 1.25 GiB tmpfs) the pool is sized to it, reports what the disk can
 * really take, refuses a write that fills it with ENOSPC, and stays writable after.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, statfsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { BtrfsDriver, defaultPoolBytes, MAX_POOL_BYTES, MIN_POOL_BYTES } from "./btrfs-driver.ts";

const GIB = 1024 ** 3;

test("the default pool is nine tenths of the free space, at most 64 GiB, and none below 1 GiB", () => {
  assert.equal(defaultPoolBytes(2 * GIB), Math.floor((2 * GIB * 0.9) / 4096) * 4096);
  assert.equal(defaultPoolBytes(500 * GIB), MAX_POOL_BYTES);
  assert.equal(defaultPoolBytes(GIB), null, "0.9 GiB is below the least pool worth making");
  assert.equal(defaultPoolBytes(0), null);
  assert.ok((defaultPoolBytes(1.2 * GIB) ?? 0) >= MIN_POOL_BYTES);
});

const disk = join("/var/lib/denv-test", `small-disk-${randomBytes(4).toString("hex")}`);
let driver: BtrfsDriver | undefined;

after(async () => {
  await driver?.unmount().catch(() => {});
  // The loop device lets go of the image a moment after the pool's unmount: the small disk is
  // detached at once (lazily), and freed when it has.
  spawnSync("umount", ["-l", disk]);
  rmSync(disk, { recursive: true, force: true });
});

test("on a 1.25 GiB disk: a pool that fits it, its real free space, ENOSPC when full, and writable after", async () => {
  mkdirSync(disk, { recursive: true });
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=1280m", "tmpfs", disk]);
  const diskBytes = statfsSync(disk).blocks * statfsSync(disk).bsize;
  driver = new BtrfsDriver({ stateDir: disk });
  await driver.init();
  const before = await driver.capacity();
  assert.ok(before.totalBytes <= diskBytes * 0.9, `pool ${before.totalBytes} on a disk of ${diskBytes}`);
  const diskFree = () => statfsSync(disk).bavail * statfsSync(disk).bsize;
  assert.ok(before.freeBytes <= diskFree(), "no more free than the disk can back");
  const ds = await driver.createDataset(`fill-${randomBytes(3).toString("hex")}`);
  const file = join(driver.datasetPath(ds.id), "fill.bin");
  // Fills the pool: the write ends with ENOSPC (dd's status 1), never a pool turned read-only.
  const dd = spawnSync("dd", ["if=/dev/zero", `of=${file}`, "bs=4M", "conv=fsync"], { encoding: "utf8" });
  assert.notEqual(dd.status, 0);
  assert.match(dd.stderr, /No space left on device/);
  assert.ok(diskFree() > 0, "the disk under the pool never filled");
  rmSync(file);
  spawnSync("sync", [driver.datasetPath(ds.id)]);
  writeFileSync(join(driver.datasetPath(ds.id), "after.txt"), "still writable\n");
  assert.equal(readFileSync(join(driver.datasetPath(ds.id), "after.txt"), "utf8"), "still writable\n");
  const mount = readFileSync("/proc/mounts", "utf8")
    .split("\n")
    .find((l) => l.split(" ")[1] === driver?.poolPath);
  assert.match(mount ?? "", / rw[, ]/, `the pool is mounted read-write: ${mount}`);
  await driver.destroyDataset(ds.id);
});
