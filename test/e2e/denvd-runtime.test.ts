/**
 * denvd's runtime on the real engine and a real btrfs pool, with ops-world: deploy (start, health,
 * warm, snapshot, probe) with caps read back, forks that hold the data and are isolated, a
 * mid-episode snapshot, rollback, exec semantics, files, egress deny vs allow, and a clean destroy.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { Readable } from "node:stream";
import { after, before, describe, test } from "node:test";
import type { StackRecord, VersionRecord } from "@denv/denvd";
import tar from "tar-stream";
import {
  type DeployedStack,
  deployStack,
  openTestHost,
  opsWorldSpec,
  probeListener,
  type TestHost,
} from "../harness/test-host.ts";

let host: TestHost;
let listener: Awaited<ReturnType<typeof probeListener>>;
let alpha: StackRecord;
let version: VersionRecord;
let deployEvidence: DeployedStack["evidence"];

const psql = async (envId: string, sql: string) => {
  const r = await host.denvd.exec(envId, "opsbox", { command: ["psql", "-tAc", sql] });
  assert.equal(r.exitCode, 0, r.stderr.toString());
  return r.stdout.toString().trim();
};

async function tarOf(
  entries: { name: string; body?: string; type?: "file" | "symlink" | "link" | "fifo"; linkname?: string }[],
) {
  const pack = tar.pack();
  for (const e of entries) {
    if (e.type === "symlink" || e.type === "link")
      pack.entry({ name: e.name, type: e.type, linkname: e.linkname ?? "" });
    else if (e.type === "fifo") pack.entry({ name: e.name, type: "fifo" });
    else pack.entry({ name: e.name, mode: 0o644 }, e.body ?? "");
  }
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

before(async () => {
  listener = await probeListener();
  host = await openTestHost({ egressProbeTarget: listener.target });
  const d = await deployStack(host.denvd, await opsWorldSpec(), { name: "alpha" });
  alpha = d.stack;
  version = d.version;
  deployEvidence = d.evidence;
});

after(async () => {
  await host?.close();
  listener?.server.close();
});

describe("deploy", () => {
  test("every service is healthy; the databases by their healthchecks, run by denvd", () => {
    const h = deployEvidence.health.services;
    assert.equal(h.db?.method, "healthcheck");
    assert.equal(h.queue?.method, "healthcheck");
    assert.equal(h.opsbox?.method, "running");
    assert.equal(alpha.status, "running");
  });

  test("caps are rendered and read back from the engine and the cgroup", () => {
    const opsbox = deployEvidence.start.opsbox?.caps;
    assert.deepEqual(opsbox?.engine, { memory_bytes: 2 * 1024 ** 3, pids: 512, cpus: 2 });
    assert.equal(opsbox?.cgroup.memory_bytes, 2 * 1024 ** 3);
    assert.equal(opsbox?.cgroup.pids, 512);
    assert.equal(opsbox?.cgroup.cpus, 2);
    const db = deployEvidence.start.db?.caps;
    assert.deepEqual(db?.engine, { memory_bytes: 4 * 1024 ** 3, pids: 2048, cpus: 2 });
    assert.equal(db?.cgroup.memory_bytes, 4 * 1024 ** 3);
  });

  test("warm ran with its exit code and output tail recorded", () => {
    const [w] = deployEvidence.warm.commands;
    assert.equal(w?.service, "opsbox");
    assert.equal(w?.exit_code, 0);
    assert.match(w?.stdout_tail ?? "", /INSERT 0 100000/);
  });

  test("the snapshot records its frozen window, a checkpoint, and every dataset", () => {
    const s = deployEvidence.snapshot;
    // How short the window is, is the benchmarks' to measure (bench/); here, that it was recorded.
    assert.ok(s.frozen_ms > 0, `${s.frozen_ms} ms`);
    assert.deepEqual(Object.keys(s.datasets).sort(), ["home", "pg", "redis"]);
    assert.ok((s.datasets.pg?.bytes ?? 0) > 10 * 1024 ** 2);
    assert.ok(s.checkpoint.some((c) => c.service === "db" && c.exit_code === 0));
    assert.ok(s.checkpoint.some((c) => c.service === "queue" && c.exit_code === 0));
    assert.equal(version.id, s.version_id);
    assert.match(version.images.db ?? "", /^sha256:/);
  });

  test("egress deny is proven blocked from inside the network, by the kernel's answer", () => {
    const ev = deployEvidence.egress;
    assert.equal(ev.result, "blocked", JSON.stringify(ev));
    assert.equal(ev.target, `${listener.target.host}:${listener.target.port}`);
    // No route off the subnet (the default route is gone) and no host address on the bridge:
    // proven without waiting for silence.
    assert.equal(ev.outcome, "no_route", JSON.stringify(ev));
    assert.match(ev.route ?? "", /unreachable/i);
    assert.equal(ev.host_addresses_on_bridge, 0);
  });

  test("a host address on a deny network's bridge fails the probe, whatever the routes say", async () => {
    const st = await host.docker.getContainer(alpha.containers.db as string).inspect();
    const netId = Object.values(st.NetworkSettings.Networks)[0]?.NetworkID as string;
    const bridge = `br-${netId.slice(0, 12)}`;
    execFileSync("ip", ["addr", "add", "198.18.7.1/32", "dev", bridge]);
    try {
      await assert.rejects(
        host.denvd.probeEgress(alpha.id),
        (e: Error & { code?: string }) => e.code === "forbidden" && /holds 198\.18\.7\.1/.test(e.message),
      );
    } finally {
      execFileSync("ip", ["addr", "del", "198.18.7.1/32", "dev", bridge]);
    }
    assert.equal((await host.denvd.probeEgress(alpha.id)).result, "blocked");
  });

  test("the agent's home was populated from the image and is owned by the agent", async () => {
    const r = await host.denvd.exec(alpha.id, "opsbox", {
      command: "stat -c %u:%g /home/ubuntu && touch /home/ubuntu/x",
    });
    assert.equal(r.exitCode, 0, r.stderr.toString());
    assert.equal(r.stdout.toString().trim(), "1000:1000");
  });
});

describe("fork", () => {
  test("a fork holds the version's data; writes are isolated from the parent and siblings", async () => {
    const a = await host.denvd.fork(version.id, { name: "rollout-a" });
    const b = await host.denvd.fork(version.id, { name: "rollout-b" });
    assert.equal(a.evidence.egress.result, "blocked");
    assert.ok(
      a.evidence.clone_ms >= 0 && a.evidence.clone_ms <= a.evidence.total_ms,
      JSON.stringify(a.evidence),
    );
    assert.equal(await psql(a.stack.id, "select count(*) from orders"), "100000");
    await psql(a.stack.id, "delete from orders where id <= 10");
    await host.denvd.exec(a.stack.id, "opsbox", { command: "echo fork-a > /home/ubuntu/note" });
    assert.equal(await psql(a.stack.id, "select count(*) from orders"), "99990");
    assert.equal(await psql(b.stack.id, "select count(*) from orders"), "100000");
    assert.equal(await psql(alpha.id, "select count(*) from orders"), "100000");
    const note = await host.denvd.exec(b.stack.id, "opsbox", { command: "cat /home/ubuntu/note" });
    assert.notEqual(note.exitCode, 0);

    // A snapshot mid-episode, and a fork from it, carries the fork's changes.
    const mid = await host.denvd.snapshot(a.stack.id);
    const a2 = await host.denvd.fork(mid.version.id, { name: "rollout-a-b" });
    assert.equal(await psql(a2.stack.id, "select count(*) from orders"), "99990");
    const note2 = await host.denvd.exec(a2.stack.id, "opsbox", { command: "cat /home/ubuntu/note" });
    assert.equal(note2.stdout.toString().trim(), "fork-a");

    // Rollback restores the version's data.
    await host.denvd.rollback(a.stack.id, version.id);
    assert.equal(await psql(a.stack.id, "select count(*) from orders"), "100000");
    for (const e of [a, b, a2]) await host.denvd.destroy(e.stack.id);
    await host.denvd.destroy(a.stack.id); // idempotent
  });

  test("a version deleted while its snapshot is still being made is deleted once made, not left behind", async () => {
    // What a restarted server does for a snapshot it asked for and never recorded.
    const id = `ver_${Date.now().toString(16).slice(-12).padStart(12, "0")}`;
    const making = host.denvd.snapshot(alpha.id, { versionId: id });
    await host.denvd.deleteVersion(id);
    await making;
    assert.ok(!host.denvd.versions().some((v) => v.id === id), "the version was made and then deleted");
  });

  test("egress allow is reachable, deny blocked, by the same probe", async () => {
    const spec = await opsWorldSpec((t) => t.replace("egress: deny", "egress: allow"));
    const d = await deployStack(host.denvd, spec, { name: "open" });
    assert.equal(d.evidence.egress.result, "reachable");
    assert.equal(d.evidence.egress.outcome, "connected");
    await host.denvd.destroy(d.stack.id);
  });
});

describe("exec", () => {
  test("argv and shell strings; stdout and stderr apart; exit codes; user, cwd and env", async () => {
    const r = await host.denvd.exec(alpha.id, "opsbox", {
      command: "echo out; echo err >&2; echo $FOO; pwd; id -u; exit 3",
      env: { FOO: "bar" },
      cwd: "/tmp",
    });
    assert.equal(r.exitCode, 3);
    assert.equal(r.stdout.toString(), "out\nbar\n/tmp\n1000\n");
    assert.equal(r.stderr.toString(), "err\n");
    const root = await host.denvd.exec(alpha.id, "opsbox", { command: ["id", "-u"], user: "0" });
    assert.equal(root.stdout.toString().trim(), "0");
  });

  test("a command inherits no descriptor but its stdin, stdout and stderr", async () => {
    // The agent's own sockets and pipes must not reach the command (it could talk to denvd as the agent).
    const r = await host.denvd.exec(alpha.id, "opsbox", {
      command: ["bash", "-c", "ls /proc/$$/fd; true"], // bash's own, listed by a child (`; true`: bash stays)
    });
    assert.equal(r.exitCode, 0, r.stderr.toString());
    assert.deepEqual(r.stdout.toString().split("\n").filter(Boolean), ["0", "1", "2"]);
  });

  test("a death by signal N exits 128+N", async () => {
    const r = await host.denvd.exec(alpha.id, "opsbox", { command: "kill -TERM $$" });
    assert.equal(r.exitCode, 143);
  });

  test("binary stdin of 50 MiB goes through intact", async () => {
    const input = Buffer.alloc(50 * 1024 * 1024);
    for (let i = 0; i < input.length; i += 4096) input.writeUInt32LE((i * 2654435761) >>> 0, i);
    const r = await host.denvd.exec(alpha.id, "opsbox", {
      command: "sha256sum | cut -d' ' -f1; true",
      stdin: input,
    });
    const expected = (await import("node:crypto")).createHash("sha256").update(input).digest("hex");
    assert.equal(r.stdout.toString().trim(), expected);
  });

  test("a timeout kills the whole process tree and says so", async () => {
    const r = await host.denvd.exec(alpha.id, "opsbox", {
      command: "sleep 300 & sleep 301 & echo started; wait",
      timeoutMs: 1000,
    });
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, 137);
    assert.equal(r.stdout.toString(), "started\n");
    const ps = await host.denvd.exec(alpha.id, "opsbox", {
      command: "ps -eo args | grep -c '^sleep 30[01]' || true",
    });
    assert.equal(ps.stdout.toString().trim(), "0");
  });

  test("output beyond the limit is cut, flagged and counted; streaming callbacks see what is kept", async () => {
    const chunks: Buffer[] = [];
    const r = await host.denvd.exec(alpha.id, "opsbox", {
      command: "head -c 100000 /dev/zero",
      maxOutputBytes: 1000,
      onStdout: (c) => {
        chunks.push(c);
      },
    });
    assert.equal(r.stdout.length, 1000);
    assert.equal(r.stdoutTruncated, true);
    assert.equal(r.stdoutDroppedBytes, 99000);
    assert.equal(Buffer.concat(chunks).length, 1000);
  });
});

describe("files", () => {
  test("put then get round-trips through the engine's archive API", async () => {
    const body = await tarOf([
      { name: "fixtures/a.txt", body: "alpha" },
      { name: "fixtures/b/c.txt", body: "gamma" },
    ]);
    const put = await host.denvd.putFiles(alpha.id, "opsbox", "/tmp", Readable.from(body));
    assert.equal(put.entries, 2);
    const cat = await host.denvd.exec(alpha.id, "opsbox", {
      command: "cat /tmp/fixtures/a.txt /tmp/fixtures/b/c.txt",
    });
    assert.equal(cat.stdout.toString(), "alphagamma");
    const got = await host.denvd.getFiles(alpha.id, "opsbox", "/tmp/fixtures/a.txt");
    const extract = tar.extract();
    const names: string[] = [];
    let content = "";
    extract.on("entry", (h, s, next) => {
      names.push(h.name);
      s.on("data", (d: unknown) => {
        content += (d as Buffer).toString();
      });
      s.on("end", next);
    });
    await new Promise<void>((resolve, reject) => {
      extract.end(got);
      extract.on("finish", () => resolve()).on("error", reject);
    });
    assert.deepEqual(names, ["a.txt"]);
    assert.equal(content, "alpha");
  });

  test("bad tars are refused and write nothing", async () => {
    const cases = [
      [{ name: "/etc/evil", body: "x" }],
      [{ name: "../evil", body: "x" }],
      [{ name: "ok/../../evil", body: "x" }],
      [{ name: "link", type: "symlink" as const, linkname: "/etc/shadow" }],
      [{ name: "d/link", type: "symlink" as const, linkname: "../../etc" }],
      [{ name: "hard", type: "link" as const, linkname: "../outside" }],
      [{ name: "pipe", type: "fifo" as const }],
      [
        { name: "first-ok", body: "x" },
        { name: "/abs", body: "y" },
      ],
    ];
    for (const entries of cases) {
      await assert.rejects(
        host.denvd.putFiles(alpha.id, "opsbox", "/tmp/bad", Readable.from(await tarOf(entries))),
        (e: Error & { code?: string }) => e.code === "invalid_argument" && /bad tar/.test(e.message),
        JSON.stringify(entries),
      );
    }
    // Everywhere an entry could have landed: under the target, and where each escape points
    // (/tmp/bad/../evil and ok/../../evil are /tmp/evil; /etc/evil and /abs as absolute). The
    // control file shows the check sees what exists.
    const landed = await host.denvd.exec(alpha.id, "opsbox", {
      command:
        "touch /tmp/control; for p in /tmp/control /tmp/bad /tmp/evil /evil /etc/evil /abs /tmp/abs /tmp/first-ok /tmp/link /tmp/hard /tmp/outside /tmp/pipe; do if [ -e $p ] || [ -L $p ]; then echo $p; fi; done; rm /tmp/control",
    });
    assert.equal(landed.exitCode, 0, landed.stderr.toString());
    assert.equal(landed.stdout.toString(), "/tmp/control\n", "nothing of a refused tar was written");
  });
});

describe("destroy", () => {
  test("destroy removes containers, networks, volumes and datasets, and reconcile finds nothing", async () => {
    const f = await host.denvd.fork(version.id, { name: "short-lived" });
    const ds = Object.values(f.stack.datasets);
    await host.denvd.destroy(f.stack.id);
    const label = `dev.denv.environment=${f.stack.id}`;
    for (const kind of ["ps -aq", "network ls -q", "volume ls -q"]) {
      const out = execFileSync("sh", ["-c", `docker ${kind} --filter label=${label}`], { encoding: "utf8" });
      assert.equal(out.trim(), "", kind);
    }
    const datasets = await host.storage.listDatasets();
    for (const d of ds) assert.ok(!datasets.includes(d));
    assert.deepEqual(await host.denvd.reconcile(), {
      removed: [],
      lost: [],
      thawed: [],
      interrupted: [],
      failed: [],
    });
  });
});

describe("space", () => {
  test("a snapshot or fork the pool has no room for is refused with a clear error, and nothing is left", async () => {
    const { BtrfsDriver, Denvd, DockerRuntime } = await import("@denv/denvd");
    const stateDir = `${host.stateDir}-full`;
    const storage = new BtrfsDriver({ stateDir, imageSizeBytes: 2 * 1024 ** 3 });
    const tight = await Denvd.open({
      stateDir,
      storage,
      runtime: new DockerRuntime(),
      extraLabels: { "dev.denv.test": host.runId },
      // More than the whole pool: every snapshot and fork must be refused up front.
      minFreeBytes: 4 * 1024 ** 3,
    });
    try {
      await assert.rejects(
        deployStack(tight, await opsWorldSpec(), { name: "no-room" }),
        (e: Error & { code?: string }) => e.code === "insufficient_storage" && /free/.test(e.message),
      );
      assert.deepEqual(tight.stacks(), []);
      assert.deepEqual(await storage.listDatasets(), []);
    } finally {
      await storage.unmount().catch(() => {});
      const { rm } = await import("node:fs/promises");
      await rm(stateDir, { recursive: true, force: true });
    }
  });
});
