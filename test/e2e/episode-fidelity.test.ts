/**
 * Episode fidelity on the real engine: ops-world with x-denv.clock: frozen. Every process of every
 * service of a fork (the image's, exec's, a verifier's) reads the version's time, in every fork; a
 * statically linked service is reported real (a warning, or a refusal with frozen-strict); 20 forks
 * running one scripted episode are identical with the frozen clock and differ with the real one;
 * `denv promote ops-world alpha staging` passes its gates, and fails naming the gate when the
 * candidate drops a healthcheck or its replays diverge; the data sheet holds every gate's evidence.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { deployOpsWorld, type Lab, openLab } from "../harness/lab.ts";
import { elapse, waitFor } from "../harness/wait-for.ts";

let lab: Lab;
let version: string;
let versionAtMs: number;
const opsWorld = readFileSync(
  join(import.meta.dirname, "../../examples/ops-world/docker-compose.yaml"),
  "utf8",
);

before(async () => {
  lab = await openLab();
  version = await deployOpsWorld(lab);
  const v = await lab.api("GET", `/v1/versions/${version}`);
  assert.equal(v.data.evidence.clock.mode, "frozen");
  versionAtMs = Date.parse(v.data.evidence.clock.at);
});

after(async () => {
  await lab?.close();
});

const sh = async (env: string, service: string, script: string) => {
  const r = await lab.api("POST", `/v1/envs/${env}/exec`, { service, command: ["sh", "-c", script] });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  assert.equal(r.data.exit_code, 0, `${script}: ${r.data.stderr}`);
  return (r.data.stdout as string).trim();
};

const denv = (...args: string[]) =>
  promisify(execFile)(
    process.execPath,
    [join(import.meta.dirname, "../../packages/cli/bin/denv.js"), ...args],
    {
      encoding: "utf8",
      env: { ...process.env, DENV_SERVER: lab.server.url, DENV_API_KEY: lab.keyA, DENV_NO_STDIN: "1" },
    },
  );

async function deployProject(name: string, compose: string, env = "alpha") {
  const p = await lab.api("POST", "/v1/projects", { name, kind: "rl-environment", source: `./${name}` });
  assert.ok(p.status === 201 || p.status === 409, JSON.stringify(p.data));
  assert.equal((await lab.api("PUT", `/v1/projects/${name}/source`, { compose })).status, 200);
  return (await lab.api("POST", `/v1/projects/${name}/deploy?wait=true`, { env })).data;
}

/** The acceptance episode: SQL writes stamped with now(), files stamped with date, a sleep. */
const EPISODE = [
  {
    service: "opsbox",
    command:
      "psql -qc \"create table if not exists episode(at timestamptz, note text); insert into episode values (now(), 'start')\"",
  },
  { service: "opsbox", command: "date -Ins > /home/ubuntu/stamp.txt" },
  { service: "opsbox", command: ["sleep", "1"] },
  {
    service: "opsbox",
    command: "date -Ins >> /home/ubuntu/stamp.txt; psql -qc \"insert into episode values (now(), 'end')\"",
  },
  {
    service: "opsbox",
    command: "cat /home/ubuntu/stamp.txt; psql -Atc 'select at, note from episode order by at'",
  },
];

test("a fork's every clock reads the version's time: PostgreSQL, date, Python, Node, Redis, exec as another user", async () => {
  // Real time moves on well past the version's before the forks are made.
  await elapse(4000, "real time must move on well past the version's before the forks are made");
  const atS = Math.floor(versionAtMs / 1000);
  for (const name of ["clock-1", "clock-2"]) {
    const f = await lab.api("POST", "/v1/sandboxes", { from_version: version, name });
    assert.equal(f.status, 201, JSON.stringify(f.data));
    // Handed over (its clock released) just before this answer: from here the clock may run.
    const answeredMs = Date.now();
    const out = await sh(
      f.data.id,
      "opsbox",
      [
        "date +%s",
        "python3 -c 'import time; print(int(time.time()))'",
        "node -e 'console.log(Math.floor(Date.now() / 1000))'",
        "psql -Atc 'select extract(epoch from now())::bigint'",
        "redis-cli -h queue time | head -1",
      ].join("; "),
    );
    const db = await sh(f.data.id, "db", "date +%s; su postgres -s /bin/sh -c 'date +%s'");
    const values = [...out.split("\n"), ...db.split("\n")].map(Number);
    assert.equal(values.length, 7, out + db);
    const realS = Math.floor(Date.now() / 1000);
    // Held while the fork started (seconds, on a busy machine): read past the version's time by no
    // more than the whole seconds since the fork was answered (and one for the hand-over before it).
    const sinceS = Math.ceil((Date.now() - answeredMs) / 1000) + 1;
    for (const v of values) {
      assert.ok(
        v >= atS && v <= atS + sinceS,
        `${v} is the version's time ${atS} + at most the ${sinceS} s since hand-over`,
      );
      assert.ok(realS - v >= 4, `${v} is not the real time ${realS}`);
    }
    // The clock moves in whole seconds: the sub-second part is always the version's.
    assert.equal(
      await sh(f.data.id, "opsbox", "date +%N"),
      `${String(versionAtMs % 1000).padStart(3, "0")}000000`,
    );
    const d = await lab.api("GET", `/v1/deployments/${f.data.deployment_id}`);
    const clock = d.data.phases.find((p: { name: string }) => p.name === "fork").evidence.clock;
    assert.equal(clock.mode, "frozen");
    assert.equal(clock.base, new Date(versionAtMs).toISOString());
    assert.deepEqual(Object.keys(clock.services).sort(), ["db", "opsbox", "queue"]);
    for (const [svc, r] of Object.entries(clock.services) as [
      string,
      { frozen: boolean; linkage: string },
    ][]) {
      assert.equal(r.frozen, true, `${svc}: ${JSON.stringify(r)}`);
      assert.equal(r.linkage, "glibc");
    }
    assert.deepEqual(clock.warnings, []);
  }
  // The CLI shows the clock, and links the data sheet.
  const shown = await denv("env", "show", "ops-world/clock-1");
  assert.match(shown.stdout, /clock frozen from .*: every service/);
  assert.match(shown.stdout, new RegExp(`data sheet: denv datasheet ops-world@${version}`));
});

test("a statically linked service reads the real clock: named in the evidence with frozen, refused with frozen-strict; musl and the verifier read the frozen one", async () => {
  const compose = (clock: string) => `x-denv:
  kind: rl-environment
  clock: ${clock}
  agent: { service: box }
  verifier:
    image: 127.0.0.1:5000/denv/ops-verifier:1.2
    command: ["sh", "-c", "date +%s; echo 1"]
services:
  box:
    image: 127.0.0.1:5000/denv/opsbox:bookworm
    user: "1000:1000"
    command: ["sleep", "infinity"]
  static:
    image: 127.0.0.1:5000/denv/test-static:bookworm
`;
  const d = await deployProject("clockwork", compose("frozen"));
  assert.equal(d.status, "succeeded", d.reason);
  const clock = d.phases.find((p: { name: string }) => p.name === "start").evidence.clock;
  assert.equal(clock.services.box.frozen, true);
  assert.equal(clock.services.static.frozen, false);
  assert.equal(clock.services.static.linkage, "static");
  // /bin is /usr/bin in bookworm: the program is reported as the kernel resolved it.
  assert.equal(clock.services.static.program, "/usr/bin/busybox");
  assert.deepEqual(clock.warnings, [
    "service static reads the real clock: /usr/bin/busybox is statically linked: it reads the kernel's clock itself",
  ]);
  // The verifier runs on the grading fork's clock: a fork of the version, graded after real time
  // moved on, reads the version's time (plus the seconds its episode and verify took).
  const atS = Math.floor(
    Date.parse(d.phases.find((p: { name: string }) => p.name === "snapshot").evidence.clock.at) / 1000,
  );
  await elapse(5000, "the fork is graded after real time moved on, to show it reads the version's");
  const f = await lab.api("POST", "/v1/sandboxes", { from_version: d.version_id, name: "graded" });
  assert.equal(f.status, 201, JSON.stringify(f.data));
  // A musl program in the same container is on the frozen clock (LD_PRELOAD); busybox, static, is not.
  const realNowS = Math.floor(Date.now() / 1000);
  const [muslTime, muslClock] = (await sh(f.data.id, "static", "/usr/local/bin/musl-time"))
    .split(" ")
    .map(Number);
  for (const v of [muslTime, muslClock] as number[])
    assert.ok(v >= atS && v <= atS + 3, `musl read ${v}; the version's time is ${atS}`);
  const busyboxS = Number(await sh(f.data.id, "static", "/bin/busybox date +%s"));
  assert.ok(
    Math.abs(busyboxS - realNowS) <= 2,
    `busybox (static) read ${busyboxS}, the real time is ${realNowS}`,
  );
  const verified = await lab.api("POST", `/v1/envs/${f.data.id}/verify`, { resume: true });
  assert.equal(verified.data.status, "succeeded", verified.data.reason);
  const grade = verified.data.phases.find((p: { name: string }) => p.name === "grade").evidence;
  const graderS = Number(grade.stdout_tail.split("\n")[0]);
  assert.ok(graderS >= atS && graderS <= atS + 8, `the grader read ${graderS}; the version's time is ${atS}`);
  assert.ok(Math.floor(Date.now() / 1000) - graderS >= 4, `the grader read ${graderS}, near the real time`);
  // The verify result is on the data sheet of the version the graded sandbox was forked from.
  const sheet = (await lab.api("GET", `/v1/versions/${d.version_id}/datasheet`)).data;
  assert.deepEqual(
    sheet.verifies.map((v: { deployment_id: string; reward: number | null }) => [v.deployment_id, v.reward]),
    [[verified.data.id, 1]],
  );

  // frozen-strict on a project never started: found at start, where the program runs.
  const fresh = await deployProject("clockwork-strict", compose("frozen-strict"));
  assert.equal(fresh.status, "rolled_back");
  assert.equal(fresh.phases.find((p: { name: string }) => p.name === "start").status, "failed");
  assert.match(
    fresh.reason,
    /frozen-strict but service static reads the real clock: \/usr\/bin\/busybox is statically linked/,
  );
  // On a project that ran the image before, resolve knows it: refused there, before anything starts.
  const strict = await deployProject("clockwork", compose("frozen-strict"));
  assert.equal(strict.status, "rolled_back");
  assert.equal(strict.phases.find((p: { name: string }) => p.name === "resolve").status, "failed");
  assert.match(
    strict.reason,
    /frozen-strict but service static reads the real clock: .*statically linked.*\(seen by deployment dep_/,
  );
  // With frozen, the same is a warning in the resolve evidence.
  const again = await deployProject("clockwork", compose("frozen"));
  assert.equal(again.status, "succeeded", again.reason);
  const warned = again.phases.find((p: { name: string }) => p.name === "resolve").evidence.warnings;
  assert.ok(
    warned.some(
      (w: { code: string; path: string }) =>
        w.code === "clock_not_frozen" && w.path === "services.static.image",
    ),
    JSON.stringify(warned),
  );
  // The environment kept serving through the refusals.
  const after = (await lab.api("GET", `/v1/envs/${encodeURIComponent("clockwork/alpha")}`)).data;
  assert.equal(after.current_version_id, again.version_id);
});

test("20 forks running one scripted episode: identical with clock: frozen, divergent (the clock named) with real", async () => {
  const r = await lab.api(
    "POST",
    `/v1/versions/${encodeURIComponent(`ops-world@${version}`)}/replays?wait=true`,
    {
      forks: 20,
      // Two at a time: on a busy 2-core machine, twenty at once stretch a step past the frozen
      // clock's tick, which is a fact of the machine, not of the replay.
      parallel: 2,
      steps: EPISODE,
    },
  );
  assert.equal(r.status, 200, JSON.stringify(r.data));
  const rep = r.data.report;
  assert.equal(r.data.status, "identical", JSON.stringify(rep.first_divergence));
  assert.equal(rep.compared, 20);
  assert.equal(new Set(rep.digests).size, 1);
  // Every fork wrote its rows and files at the version's time, each step a second after the one
  // before: the dates of steps 2 and 4.
  const dateAt = (ms: number) => {
    const t = new Date(ms);
    return `${t.toISOString().slice(0, 19)},${String(t.getUTCMilliseconds()).padStart(3, "0")}000000+00:00`;
  };
  const last = rep.reference.steps[4].stdout as string;
  assert.deepEqual(
    last.split("\n").slice(0, 2),
    [dateAt(versionAtMs + 1000), dateAt(versionAtMs + 3000)],
    last,
  );
  assert.equal(last.trim().split("\n").length, 4);
  assert.deepEqual(Object.keys(rep.reference.volumes).sort(), ["home", "pg", "redis"]);
  assert.ok(rep.reference.volumes.pg.left_out.some((x: string) => x.startsWith("pg_wal/")));
  // What the episode changed: the same in all twenty forks, the agent's file and the new table's rows.
  assert.equal(rep.diff.identical, true, JSON.stringify(rep.diff.divergent_forks));
  const changes = rep.diff.reference.entries.map(
    (e: { change: string; volume: string; path: string }) => `${e.change} ${e.volume}/${e.path}`,
  );
  assert.ok(changes.includes("created home/stamp.txt"), changes.join("\n"));
  assert.deepEqual(rep.diff.reference.databases[0].tables, [
    { table: "public.episode", inserted: 2, updated: 0, deleted: 0 },
  ]);
  // Every fork is gone afterwards.
  const envs = (await lab.api("GET", "/v1/envs")).data.environments as { name: string }[];
  assert.ok(!envs.some((e) => e.name.startsWith("replay-")), envs.map((e) => e.name).join(" "));

  const realWorld = await deployProject("ops-world-real", opsWorld.replace("clock: frozen", "clock: real"));
  assert.equal(realWorld.status, "succeeded", realWorld.reason);
  const real = await lab.api("POST", `/v1/versions/${realWorld.version_id}/replays?wait=true`, {
    forks: 3,
    steps: EPISODE,
  });
  assert.equal(real.data.status, "diverged");
  const d = real.data.report.first_divergence;
  assert.equal(d.step, 4, JSON.stringify(d));
  assert.ok(d.sources.includes("clock"), JSON.stringify(d));
  assert.ok(new Set(real.data.report.digests).size > 1);
  // The CLI says the same and fails, showing the forks done while it waits (a line a change: no terminal).
  const episodeFile = join(mkdtempSync(join(tmpdir(), "denv-episode-")), "episode.json");
  // The CLI's episode file: a shell line is `run:`, an argv list `command:`.
  writeFileSync(
    episodeFile,
    JSON.stringify(
      EPISODE.map(({ command, ...s }) =>
        typeof command === "string" ? { ...s, run: command } : { ...s, ...(command ? { command } : {}) },
      ),
    ),
  );
  await assert.rejects(
    denv("replay", `ops-world-real@${realWorld.version_id}`, "--forks", "2", "--script", episodeFile),
    (err: { code: number; stdout: string; stderr: string }) => {
      assert.equal(err.code, 1, err.stderr);
      assert.match(err.stderr, /^\[#{20}\] 2\/2 forks done$/m, err.stderr);
      for (const line of err.stderr.trim().split("\n"))
        assert.match(line, /^\[[#-]{20}\] [0-2]\/2 forks done$/);
      assert.match(err.stdout, /diverged/);
      return true;
    },
  );
  await assert.rejects(
    denv("replay", `ops-world-real@${realWorld.version_id}`, "--forks", "2", "--script", "/dev/null"),
    (err: { code: number; stderr: string }) => err.code === 2 && /expected a list of steps/.test(err.stderr),
  );
});

test("promote ops-world alpha staging passes every gate; the data sheet shows each gate's evidence", async () => {
  const r = await denv(
    "promote",
    "ops-world",
    "alpha",
    "staging",
    "--replays",
    "3",
    "--soak",
    "3s",
    "--json",
  );
  const d = JSON.parse(r.stdout);
  assert.equal(d.status, "succeeded", d.reason);
  assert.deepEqual(
    d.phases.map((p: { name: string; status: string }) => `${p.name}:${p.status}`),
    [
      "candidate:succeeded",
      "fresh_fork:succeeded",
      "consistency:succeeded",
      "replays:succeeded",
      "invariants:succeeded",
      "soak:succeeded",
      "switch:succeeded",
      "verdict:succeeded",
    ],
  );
  const gates = Object.fromEntries(
    d.phases.map((p: { name: string; evidence: unknown }) => [p.name, p.evidence]),
  );
  assert.equal(gates.consistency.amcheck.db.exit_code, 0, gates.consistency.amcheck.db.output_tail);
  assert.equal(gates.consistency.amcheck.db.ran, true);
  assert.deepEqual(Object.keys(gates.consistency.volumes).sort(), ["home", "pg", "redis"]);
  assert.equal(gates.replays.identical, true);
  assert.equal(gates.replays.forks, 3);
  // The default episode reads and grades: it changes nothing, the same in every replay.
  assert.deepEqual(gates.replays.diff.summary, {
    created: 0,
    deleted: 0,
    modified: 0,
    bytes_added: 0,
    bytes_removed: 0,
  });
  assert.equal(gates.replays.diff.identical, true);
  // The default episode: the collected path read, then the verifier graded on each fork.
  const replay = (await lab.api("GET", `/v1/replays/${gates.replays.replay_id}`)).data;
  assert.deepEqual(
    replay.request.steps.map((s: { verifier?: boolean }) => (s.verifier ? "verifier" : "read")),
    ["read", "verifier"],
  );
  assert.match(
    replay.report.reference.steps[1].stdout,
    /reward 0\n[\s\S]*no answer at \/collect\/home\/ubuntu\/answer\.txt/,
  );
  assert.equal(gates.invariants.compared_with, null);
  assert.ok(gates.soak.checks >= 2);
  const staging = (await lab.api("GET", `/v1/envs/${encodeURIComponent("ops-world/staging")}`)).data;
  assert.equal(staging.current_version_id, version);
  assert.equal(staging.status, "running");
  assert.match(await sh(staging.id, "opsbox", "psql -Atc 'select count(*) from orders'"), /^100000$/);

  const sheet = (await lab.api("GET", `/v1/versions/${encodeURIComponent("ops-world/staging")}/datasheet`))
    .data;
  assert.equal(sheet.version.id, version);
  assert.equal(sheet.clock.mode, "frozen");
  assert.equal(sheet.clock.at, new Date(versionAtMs).toISOString());
  assert.deepEqual(Object.keys(sheet.clock.reach).sort(), ["db", "opsbox", "queue"]);
  assert.ok(sheet.volumes.pg.bytes > 0);
  assert.ok(sheet.version.images.db.includes("@sha256:"));
  const promoted = sheet.promotes.find((p: { deployment_id: string }) => p.deployment_id === d.id);
  assert.equal(promoted.status, "succeeded");
  assert.deepEqual(
    promoted.gates.map((g: { name: string }) => g.name),
    d.phases.map((p: { name: string }) => p.name),
  );
  assert.ok(
    promoted.gates
      .filter((g: { name: string }) => g.name !== "verdict")
      .every((g: { evidence: unknown }) => g.evidence),
  );
  assert.ok(sheet.replays.some((x: { status: string }) => x.status === "identical"));
  const md = await denv("datasheet", "ops-world/staging");
  for (const heading of [
    "## Clock",
    "#### fresh_fork: succeeded",
    "#### consistency: succeeded",
    "#### replays: succeeded",
    "#### invariants: succeeded",
    "#### soak: succeeded",
    "  - changed: 0 created, 0 modified, 0 deleted; every fork's the same",
  ])
    assert.ok(md.stdout.includes(heading), `${heading} in:\n${md.stdout.slice(0, 2000)}`);
});

test("a candidate that drops a healthcheck fails the invariants gate by name; staging keeps its version", async () => {
  const noHealth = opsWorld.replace(
    '\n    healthcheck: { test: ["CMD", "redis-cli", "ping"], interval: 2s, retries: 15 }',
    "",
  );
  assert.notEqual(noHealth, opsWorld);
  const deployed = await deployProject("ops-world", noHealth);
  assert.equal(deployed.status, "succeeded", deployed.reason);
  const p = await lab.api("POST", "/v1/projects/ops-world/promote?wait=true", {
    from: "alpha",
    to: "staging",
    replays: 2,
    soak_ms: 0,
  });
  assert.equal(p.data.status, "rolled_back");
  assert.match(
    p.data.reason,
    /^gate invariants failed: no healthcheck removed or disabled: service queue had a healthcheck and has none/,
  );
  const inv = p.data.phases.find((x: { name: string }) => x.name === "invariants");
  assert.equal(inv.status, "failed");
  assert.equal(p.data.phases.find((x: { name: string }) => x.name === "switch").status, "skipped");
  const staging = (await lab.api("GET", `/v1/envs/${encodeURIComponent("ops-world/staging")}`)).data;
  assert.equal(staging.current_version_id, version);
  // The gate's failure is on the candidate's data sheet.
  const sheet = (await lab.api("GET", `/v1/versions/${deployed.version_id}/datasheet`)).data;
  assert.equal(sheet.promotes[0].status, "rolled_back");
  assert.equal(
    sheet.promotes[0].gates.find((g: { name: string }) => g.name === "invariants").status,
    "failed",
  );
});

test("replays that diverge fail the replays gate by name, the randomness named", async () => {
  const p = await lab.api("POST", "/v1/projects/ops-world/promote?wait=true", {
    version: version,
    to: "staging-2",
    replays: 2,
    soak_ms: 0,
    steps: [{ service: "opsbox", command: "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'" }],
  });
  assert.equal(p.data.status, "rolled_back");
  assert.match(p.data.reason, /^gate replays failed: 2 replays are not identical: fork 2 step 1 \(stdout\)/);
  const ev = p.data.phases.find((x: { name: string }) => x.name === "replays").evidence;
  assert.deepEqual(ev.first_divergence.sources, ["randomness"]);
  const target = await lab.api("GET", `/v1/envs/${encodeURIComponent("ops-world/staging-2")}`);
  assert.notEqual(target.data.current_version_id, version);
});

test("a replay a stopped server left behind: failed at the next start, and its forks destroyed", async () => {
  const started = await lab.api("POST", `/v1/versions/${version}/replays`, {
    forks: 2,
    parallel: 2,
    steps: [{ service: "opsbox", command: ["sleep", "120"] }],
  });
  assert.equal(started.status, 202, JSON.stringify(started.data));
  const prefix = `replay-${(started.data.id as string).slice(4)}-`;
  const forks = async () =>
    (
      (await lab.api("GET", "/v1/envs")).data.environments as { id: string; name: string; status: string }[]
    ).filter((e) => e.name.startsWith(prefix));
  // Until both forks run, as long as the replay itself is still under way (no fixed budget).
  await waitFor(
    "both of the replay's forks to run",
    async () => {
      const f = await forks();
      if (f.length === 2 && f.every((e) => e.status === "running")) return true;
      const now = (await lab.api("GET", `/v1/replays/${started.data.id}`)).data;
      assert.ok(
        ["pending", "running"].includes(now.status),
        `the replay ended before its forks ran: ${JSON.stringify(now)}`,
      );
      return false;
    },
    { intervalMs: 300 },
  );
  // What a start does after a stop: the same recovery, on this server's store and deployer.
  const { recoverReplays } = await import("../../packages/server/src/deployments/replay-runner.ts");
  assert.equal(await recoverReplays({ store: lab.server.store, deployer: lab.server.deployer }), 2);
  // The recovery destroys them (in the background): each poll shows fewer, until none.
  await waitFor("the recovery to destroy the replay's forks", async () => (await forks()).length === 0, {
    intervalMs: 300,
  });
  const failed = (await lab.api("GET", `/v1/replays/${started.data.id}`)).data;
  assert.equal(failed.status, "failed");
  assert.equal(failed.report.error, "the server stopped while the replay ran");
  // The replay's own run, ending now that its forks are gone, does not write over that record.
  await elapse(
    3000,
    "the replay's own run must be given time to end, and be seen not to write over the record",
  );
  assert.equal(
    (await lab.api("GET", `/v1/replays/${started.data.id}`)).data.report.error,
    failed.report.error,
  );
});

test("versions: listed with what keeps each; one in use is refused by name; one nothing uses is deleted with its snapshots", async () => {
  const listed = await lab.api("GET", "/v1/versions?project=ops-world");
  assert.equal(listed.status, 200);
  const ours = listed.data.versions.find((v: { id: string }) => v.id === version);
  assert.ok(ours.in_use.includes("environment staging runs it"), JSON.stringify(ours.in_use));
  const refused = await lab.api("DELETE", `/v1/versions/${version}`);
  assert.equal(refused.status, 409);
  assert.match(refused.data.error.message, /in use: .*environment staging runs it/);
  // A version of a sandbox that is then destroyed: nothing keeps it.
  const f = await lab.api("POST", "/v1/sandboxes", { from_version: version, name: "short-lived" });
  const snap = await lab.api("POST", `/v1/envs/${f.data.id}/snapshot`);
  assert.equal(snap.data.status, "succeeded", snap.data.reason);
  const orphan = snap.data.version_id as string;
  assert.equal((await lab.api("DELETE", `/v1/envs/${f.data.id}`)).data.status, "succeeded");
  assert.ok((await lab.host.storage.listSnapshots()).some((s) => s.startsWith(orphan)));
  const dry = await lab.api("POST", "/v1/versions/prune", { keep: 1, project: "ops-world", dry_run: true });
  assert.ok(dry.data.deleted.includes(orphan), JSON.stringify(dry.data));
  assert.ok(!dry.data.deleted.includes(version));
  assert.ok(
    (await lab.host.storage.listSnapshots()).some((s) => s.startsWith(orphan)),
    "a dry run deletes nothing",
  );
  const cli = await denv("version", "rm", `ops-world@${orphan}`);
  assert.equal(cli.stdout, `deleted ${orphan}\n`);
  assert.ok(!(await lab.host.storage.listSnapshots()).some((s) => s.startsWith(orphan)));
  assert.equal((await lab.api("GET", `/v1/versions/${orphan}`)).status, 404);
  // A version as `denv fork` takes it: the fork named as given.
  const exact = await denv("fork", "--name", "exact", `ops-world@${version}`);
  assert.match(exact.stdout, /^forked ops-world@ver_[0-9a-f]{12} → exact \(env_[0-9a-f]{12}\)/);
  // Another project's name does not reach a version.
  assert.equal(
    (await lab.api("DELETE", `/v1/versions/${encodeURIComponent(`clockwork@${version}`)}`)).status,
    404,
  );
});
