/**
 * What goes wrong, done for real through the API on the real engine: a service that never becomes
 * healthy and one that exits first (rolled back, named, nothing left); the memory and pids caps
 * actually hit (the kernel's own counters read back); 20 forks and 20 sandboxes made at once (each
 * its own subnet, each with its data, nothing leaked); and a snapshot whose storage fails while
 * the stack is frozen (thawed, no version made, the environment still answering).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import Docker from "dockerode";
import { deployOpsWorld, type Lab, openLab } from "../harness/lab.ts";

let lab: Lab;
const docker = new Docker();
const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";

before(async () => {
  lab = await openLab();
  await deployOpsWorld(lab);
});

after(async () => {
  await lab?.close();
});

/** A one-service agent project, deployed; the deployment's record. */
async function deploy(name: string, service: string): Promise<any> {
  const compose = `x-denv: { kind: agent, agent: { service: box } }\nservices:\n  box:\n${service}`;
  await lab.api("POST", "/v1/projects", { name, kind: "agent", source: `./${name}` });
  const put = await lab.api("PUT", `/v1/projects/${name}/source`, { compose });
  assert.equal(put.status, 200, JSON.stringify(put.data));
  return (await lab.api("POST", `/v1/projects/${name}/deploy?wait=true`, { env: "e" })).data;
}

/** Containers, networks and volumes the host made for a stack (by its label). */
async function engineObjects(stackId: string): Promise<number> {
  const filters = JSON.stringify({ label: [`dev.denv.environment=${stackId}`] });
  const [c, n, v] = await Promise.all([
    docker.listContainers({ all: true, filters }),
    docker.listNetworks({ filters }),
    docker.listVolumes({ filters }),
  ]);
  return c.length + n.length + (v.Volumes?.length ?? 0);
}

async function exec(env: string, command: string | string[], extra: Record<string, unknown> = {}) {
  const r = await lab.api("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, { command, ...extra });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  return r.data as { exit_code: number; stdout: string; stderr: string };
}

test("a service that never becomes healthy rolls the deploy back, naming it; nothing is left", async () => {
  const before = lab.host.denvd.stacks().length;
  const d = await deploy(
    "unhealthy",
    `    image: ${OPSBOX}\n    user: "1000:1000"\n    command: ["sleep", "infinity"]\n    healthcheck: { test: ["CMD", "false"], interval: 1s, retries: 2 }\n`,
  );
  assert.equal(d.status, "rolled_back", JSON.stringify(d));
  // denvd checks every 100 ms, so a failing check is not counted against retries; a service has at
  // least 60 s (or start_period + interval × (retries + 1), if longer) to become healthy, and one
  // that sits idle (sleep infinity) is given no more.
  assert.match(
    d.reason,
    /service box was not healthy within \d+ ms \(its deadline 60000 ms\), and it was idle at the end/,
  );
  const failed = d.phases.find((p: { status: string }) => p.status === "failed");
  assert.match(failed?.reason ?? "", /box/, JSON.stringify(d.phases));
  assert.equal(lab.host.denvd.stacks().length, before, "the stack was removed");
});

test("a service that exits before it is healthy rolls back with its exit code", async () => {
  const d = await deploy(
    "exits",
    `    image: ${OPSBOX}\n    user: "1000:1000"\n    command: ["sh", "-c", "echo 'fatal: DATABASE_URL is not set' >&2; exit 3"]\n    healthcheck: { test: ["CMD", "true"], interval: 1s, retries: 30 }\n`,
  );
  assert.equal(d.status, "rolled_back", JSON.stringify(d));
  assert.match(
    d.reason,
    /service box exited with code 3 before it was healthy; its last output:\n {2}fatal: DATABASE_URL is not set/,
  );
  // The failed phase's evidence keeps them as fields, for a program reading the phase log.
  const failed = (d.phases as { status: string; evidence: { details?: Record<string, unknown> } }[]).find(
    (p) => p.status === "failed",
  );
  // Its own failure, not the host's: not a code the SDKs call retryable.
  assert.equal((failed?.evidence as { code?: string } | undefined)?.code, "service_failed");
  assert.deepEqual(failed?.evidence.details, {
    service: "box",
    exit_code: 3,
    last_lines: ["fatal: DATABASE_URL is not set"],
  });
});

test("the memory cap is hit for real: the command is OOM-killed, the cgroup counts it, the sandbox lives", async () => {
  const d = await deploy(
    "oom",
    `    image: ${OPSBOX}\n    user: "1000:1000"\n    command: ["sleep", "infinity"]\n    mem_limit: 64m\n    memswap_limit: 64m\n`,
  );
  assert.equal(d.status, "succeeded", d.reason);
  // The container's own cgroup, v1 (memory/...) or v2, as the kernel holds it.
  const max = await exec(
    "oom/e",
    "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max",
  );
  assert.equal(max.stdout.trim(), String(64 * 1024 * 1024), "the cap as the kernel holds it");
  // tail -n 1 holds its whole input (one line with no end) in memory: 300 MB against 64 MiB.
  const hog = await exec("oom/e", "head -c 300000000 /dev/zero | tail -n 1 >/dev/null", {
    timeout_ms: 60_000,
  });
  assert.equal(hog.exit_code, 137, JSON.stringify(hog));
  const events = await exec(
    "oom/e",
    "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events",
  );
  const kills = Number(/oom_kill (\d+)/.exec(events.stdout)?.[1]);
  assert.ok(kills >= 1, events.stdout);
  assert.equal((await exec("oom/e", "echo alive")).stdout, "alive\n");
});

test("the pids cap is hit for real: forks past it fail inside; once they end, no zombie keeps a pid", async () => {
  const d = await deploy(
    "pids",
    `    image: ${OPSBOX}\n    user: "1000:1000"\n    command: ["sleep", "infinity"]\n    pids_limit: 40\n`,
  );
  assert.equal(d.status, "succeeded", d.reason);
  // Short sleeps forked until the kernel refuses (dash gives up at the first refused fork); they
  // hold no output open, so the exec ends when the shell does.
  const r = await exec(
    "pids/e",
    "i=0; while [ $i -lt 100 ]; do sleep 3 </dev/null >/dev/null 2>&1 & i=$((i+1)); done; echo made $i",
  );
  assert.notEqual(r.exit_code, 0, `the shell could fork 100 times under a cap of 40: ${JSON.stringify(r)}`);
  assert.match(r.stderr, /fork/i);
  // Once the sleeps are gone, the cgroup's counters (v1 pids/... or v2) say what happened.
  const dir = "$(test -d /sys/fs/cgroup/pids && echo /sys/fs/cgroup/pids || echo /sys/fs/cgroup)";
  const deadline = Date.now() + 30_000;
  let counters = "";
  for (;;) {
    counters = (
      await exec(
        "pids/e",
        `d=${dir}; cat $d/pids.max; echo current $(cat $d/pids.current); cat $d/pids.events`,
      )
    ).stdout;
    if (Number(/current (\d+)/.exec(counters)?.[1]) < 10) break;
    assert.ok(Date.now() < deadline, `the sleeps never ended: ${counters}`);
    await new Promise((res) => setTimeout(res, 200));
  }
  assert.match(counters, /^40$/m, "pids.max as the kernel holds it");
  const refused = Number(/^max (\d+)$/m.exec(counters)?.[1]);
  assert.ok(refused >= 1, `the kernel counted refused forks at the cap: ${counters}`);
  assert.equal((await exec("pids/e", "echo alive")).stdout, "alive\n", "the sandbox answers afterwards");
});

test("20 forks at once: each its own subnet, each with the data, nothing left after", async () => {
  const forks = await Promise.all(
    Array.from({ length: 20 }, (_, i) =>
      lab.api("POST", `/v1/envs/${encodeURIComponent("ops-world/alpha")}/fork`, { name: `par-${i}` }),
    ),
  );
  for (const f of forks) assert.equal(f.status, 201, JSON.stringify(f.data));
  const ids = forks.map((f) => f.data.id as string);
  const counts = await Promise.all(
    ids.map((id) => exec(id, ["psql", "-tAc", "select count(*) from orders"]).then((r) => r.stdout)),
  );
  assert.deepEqual(counts, Array(20).fill("100000\n"), "every fork holds the seeded orders");
  const subnets = new Set<string>();
  for (const st of lab.host.denvd.stacks().filter((s) => /par-\d+$/.test(s.name))) {
    const c = await docker.getContainer(st.containers.opsbox as string).inspect();
    for (const n of Object.values(c.NetworkSettings.Networks)) {
      const net = await docker.getNetwork(n.NetworkID as string).inspect();
      subnets.add(String(net.IPAM?.Config?.[0]?.Subnet));
    }
  }
  assert.ok(subnets.size >= 20, `distinct subnets: ${subnets.size}`);
  const made = lab.host.denvd.stacks().filter((s) => /par-\d+$/.test(s.name));
  assert.equal(made.length, 20);
  const datasets = made.flatMap((s) => Object.values(s.datasets));
  const gone = await Promise.all(ids.map((id) => lab.api("DELETE", `/v1/envs/${id}`)));
  for (const g of gone) assert.equal(g.status, 200, JSON.stringify(g.data));
  for (const s of made) assert.equal(await engineObjects(s.id), 0, `${s.name} left engine objects`);
  for (const ds of datasets)
    assert.equal(existsSync(lab.host.storage.datasetPath(ds as string)), false, `${ds} was left`);
});

test("20 sandboxes created at once: all answer, nothing left after", async () => {
  const made = await Promise.all(
    Array.from({ length: 20 }, () =>
      lab.api("POST", "/v1/sandboxes", { image: OPSBOX, cmd: ["sleep", "infinity"] }),
    ),
  );
  for (const m of made) assert.equal(m.status, 201, JSON.stringify(m.data));
  const ids = made.map((m) => m.data.id as string);
  assert.equal(new Set(ids).size, 20);
  // Each writes its own id where all would collide if they shared a filesystem, and reads it back.
  await Promise.all(ids.map((id) => exec(id, ["sh", "-c", `echo ${id} > /tmp/who`])));
  const answers = await Promise.all(ids.map((id) => exec(id, ["cat", "/tmp/who"])));
  assert.deepEqual(
    answers.map((a) => a.stdout),
    ids.map((id) => `${id}\n`),
    "twenty separate sandboxes answered, each with its own files",
  );
  const before = lab.host.denvd.stacks().length;
  for (const g of await Promise.all(ids.map((id) => lab.api("DELETE", `/v1/envs/${id}`))))
    assert.equal(g.status, 200, JSON.stringify(g.data));
  assert.equal(lab.host.denvd.stacks().length, before - 20);
});

test("a snapshot whose storage fails while frozen thaws everything and makes no version", async () => {
  const f = await lab.api("POST", `/v1/envs/${encodeURIComponent("ops-world/alpha")}/fork`, {
    name: "snapfail",
  });
  assert.equal(f.status, 201, JSON.stringify(f.data));
  const stack = lab.host.denvd.stacks().find((s) => s.name.endsWith("snapfail"));
  assert.ok(stack);
  const snapshots = join(lab.host.storage.poolPath, "snapshots");
  const versionsBefore = (await lab.api("GET", "/v1/versions")).data.versions.length;
  const entriesBefore = readdirSync(snapshots).length;
  // The storage refuses new snapshots (an immutable directory): the failure comes mid-freeze.
  execFileSync("chattr", ["+i", snapshots]);
  let d: any;
  try {
    d = (await lab.api("POST", `/v1/envs/${f.data.id}/snapshot`, {})).data;
  } finally {
    execFileSync("chattr", ["-i", snapshots]);
  }
  assert.notEqual(d.status, "succeeded", JSON.stringify(d));
  assert.ok(d.reason, "the failure is named");
  for (const id of Object.values(stack.containers)) {
    const st = await docker.getContainer(id as string).inspect();
    assert.equal(st.State.Paused, false, "every container was thawed");
    assert.equal(st.State.Running, true);
  }
  assert.equal((await lab.api("GET", "/v1/versions")).data.versions.length, versionsBefore, "no version");
  assert.equal(readdirSync(snapshots).length, entriesBefore, "no half-made snapshot");
  const count = await exec(f.data.id, ["psql", "-tAc", "select count(*) from orders"]);
  assert.equal(count.stdout, "100000\n", "the environment answers");
  assert.equal((await lab.api("GET", `/v1/envs/${f.data.id}`)).data.status, "running");
  // And the storage, working again, snapshots it.
  const ok = (await lab.api("POST", `/v1/envs/${f.data.id}/snapshot`, {})).data;
  assert.equal(ok.status, "succeeded", ok.reason);
  await lab.api("DELETE", `/v1/envs/${f.data.id}`);
});
