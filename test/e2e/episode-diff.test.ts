/**
 * The episode diff on ops-world, through the API with a real denvd on btrfs: an episode that
 * inserts, updates and deletes rows, writes, edits and deletes files, makes a symlink and a FIFO,
 * changes a mode and makes names no terminal should print as they are — `GET /v1/envs/{id}/diff`
 * reports each exactly; an untouched fork's files are unchanged; two runs of one scripted episode
 * give identical diffs; a verify records the diff in its evidence.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { DiffEntry, DiffEvidence } from "@denv/protocol";
import { cliRunner } from "../harness/cli-runner.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { repoRoot } from "../harness/test-host.ts";

let lab: Lab;
let versionId: string;

// ops-world as it is, with files of its own in the agent's home for the episode to change.
const WARM = [
  "mkdir -p /home/ubuntu/notes",
  "printf 'alpha\\nbeta\\ngamma\\n' > /home/ubuntu/notes/todo.txt",
  "echo remove me > /home/ubuntu/old.txt",
  "printf '#!/bin/sh\\necho hi\\n' > /home/ubuntu/run.sh",
  "chmod 644 /home/ubuntu/run.sh",
].join(" && ");

/** The agent's episode: a shell script, then Python for the names a shell makes awkward. */
const EPISODE = [
  'psql -v ON_ERROR_STOP=1 -qc "insert into orders select g, 1, \'paid\', 100, now() from generate_series(200001, 200007) g" -c "update orders set status = \'refunded\' where id <= 3" -c "delete from orders where id between 10 and 14"',
  "echo hello > /home/ubuntu/new.txt",
  "sed -i 's/beta/BETA/' /home/ubuntu/notes/todo.txt",
  "rm /home/ubuntu/old.txt",
  "ln -s /etc/shadow /home/ubuntu/link",
  "mkfifo /home/ubuntu/pipe",
  "chmod 755 /home/ubuntu/run.sh",
  `python3 -c '
import os
os.chdir(b"/home/ubuntu")
open(b"bad\\nname\\xff", "w").write("x")
os.mkdir(b"deep")
p = b"deep"
while len(p) < 4096 - 260:
    p += b"/" + b"d" * 200
    os.mkdir(p)
open(p + b"/leaf", "w").write("leaf")
'`,
].join(" && ");

const api = (method: string, path: string, body?: unknown) => lab.api(method, path, body);

async function fork(): Promise<string> {
  const sb = await api("POST", "/v1/sandboxes", { from_version: versionId });
  assert.equal(sb.status, 201, JSON.stringify(sb.data));
  return sb.data.id as string;
}

async function episode(envId: string): Promise<void> {
  const r = await api("POST", `/v1/envs/${envId}/exec`, {
    service: "opsbox",
    command: ["bash", "-c", EPISODE],
  });
  assert.equal(r.data.exit_code, 0, r.data.stderr);
}

async function diff(envId: string, query = ""): Promise<DiffEvidence> {
  const r = await api("GET", `/v1/envs/${envId}/diff${query}`);
  assert.equal(r.status, 200, JSON.stringify(r.data));
  return r.data as DiffEvidence;
}

const home = (d: DiffEvidence) => d.entries.filter((e) => e.volume === "home");
const line = (e: DiffEntry) =>
  `${e.change} ${e.type} ${e.path}${e.changed ? ` [${e.changed.join(",")}]` : ""}`;

before(async () => {
  lab = await openLab();
  const compose = readFileSync(join(repoRoot, "examples/ops-world/docker-compose.yaml"), "utf8").replace(
    '    - "psql -h db -U postgres -f /seed/orders.sql"',
    `    - "psql -h db -U postgres -f /seed/orders.sql"\n    - ${JSON.stringify(WARM)}`,
  );
  assert.ok(compose.includes("notes/todo.txt"));
  await api("POST", "/v1/projects", { name: "opsworld", kind: "rl-environment", source: "./opsworld" });
  await api("PUT", "/v1/projects/opsworld/source", { compose });
  const d = await api("POST", "/v1/projects/opsworld/deploy?wait=true", { env: "base" });
  assert.equal(d.data.status, "succeeded", d.data.reason);
  versionId = d.data.phases.find((p: any) => p.name === "verdict").evidence.version_id;
});

after(async () => {
  await lab?.close();
});

test("an episode's changes, each reported exactly; rows counted per table", async () => {
  const env = await fork();
  await episode(env);
  const d = await diff(env);
  assert.equal(d.against, versionId);
  assert.equal(d.volumes.home?.method, "inode-ctime");
  const entries = home(d);
  const deep = entries.filter((e) => e.path.startsWith("deep"));
  assert.deepEqual(entries.filter((e) => !e.path.startsWith("deep")).map(line), [
    "created file bad\\nname\\xff",
    "created symlink link",
    "created file new.txt",
    "modified file notes/todo.txt [content]",
    "deleted file old.txt",
    "created fifo pipe",
    "modified file run.sh [mode]",
  ]);
  const by = new Map(entries.map((e) => [e.path, e]));
  assert.equal(by.get("new.txt")?.bytes_after, 6);
  assert.equal(by.get("new.txt")?.owner_after, "1000:1000");
  assert.equal(
    by.get("notes/todo.txt")?.diff,
    "--- a/notes/todo.txt\n+++ b/notes/todo.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma\n",
  );
  assert.equal(by.get("link")?.target_after, "/etc/shadow");
  assert.deepEqual([by.get("run.sh")?.mode_before, by.get("run.sh")?.mode_after], [0o644, 0o755]);
  assert.equal(by.get("old.txt")?.bytes_before, 10);
  const hostile = by.get("bad\\nname\\xff");
  assert.equal(Buffer.from(hostile?.path_base64 ?? "", "base64").toString("latin1"), "bad\nname\xff");
  // The 4 KB path: every directory and the leaf, in order, the longest path whole.
  assert.equal(deep[0]?.path, "deep");
  assert.equal(deep.at(-1)?.path.endsWith("/leaf"), true);
  assert.ok((deep.at(-1)?.path.length ?? 0) > 3800, `${deep.at(-1)?.path.length}`);
  assert.ok(deep.every((e) => e.change === "created"));
  // The rows, from PostgreSQL's own counts.
  const db = d.databases.find((x) => x.service === "db");
  assert.equal(db?.error, undefined, db?.error);
  assert.deepEqual(db?.tables, [{ table: "public.orders", inserted: 7, updated: 3, deleted: 5 }]);
  assert.equal(
    d.summary.created,
    Object.values(d.volumes).reduce((n, v) => n + v.created, 0),
  );
  // The diff made nothing on the host: no snapshot of its own is left behind.
  assert.deepEqual(
    (await lab.host.storage.listSnapshots()).filter((s) => s.includes("-diff-")),
    [],
  );
});

test("an untouched fork's diff is empty: no file of any volume, no row", async () => {
  const env = await fork();
  const d = await diff(env);
  assert.deepEqual(d.entries.map(line), []);
  assert.deepEqual(d.summary, { created: 0, deleted: 0, modified: 0, bytes_added: 0, bytes_removed: 0 });
  assert.equal(d.volumes.home?.method, "inode-ctime");
  assert.deepEqual(d.databases.find((x) => x.service === "db")?.tables, []);
  // What PostgreSQL rewrites by running is counted apart, not hidden.
  assert.ok((d.volumes.pg?.left_out.length ?? 0) > 0, JSON.stringify(d.volumes.pg));
});

test("two runs of one scripted episode give identical diffs", async () => {
  const [a, b] = [await fork(), await fork()];
  await episode(a);
  await episode(b);
  const [da, db] = [await diff(a), await diff(b)];
  assert.deepEqual(home(da), home(db));
  assert.deepEqual(da.databases, db.databases);
});

test("bounds: the first entries listed, the rest counted; a bad version refused", async () => {
  const env = await fork();
  await episode(env);
  const d = await diff(env, "?max_entries=3");
  assert.equal(d.entries.length, 3);
  assert.equal(d.truncated, true);
  assert.ok(d.summary.created + d.summary.modified + d.summary.deleted > 3);
  // A table named to break the host's parsing (a tab, a newline, numbers after them) is one row.
  const evil = await api("POST", `/v1/envs/${env}/exec`, {
    service: "opsbox",
    command: [
      "psql",
      "-v",
      "ON_ERROR_STOP=1",
      "-qc",
      'create table "x\t1\t2\n3" (a int); insert into "x\t1\t2\n3" values (1)',
    ],
  });
  assert.equal(evil.data.exit_code, 0, evil.data.stderr);
  const rows = (await diff(env)).databases.find((x) => x.service === "db")?.tables;
  assert.deepEqual(rows, [
    { table: "public.orders", inserted: 7, updated: 3, deleted: 5 },
    { table: "public.x\\t1\\t2\\n3", inserted: 1, updated: 0, deleted: 0 },
  ]);
  const bad = await api("GET", `/v1/envs/${env}/diff?against=ver_000000000000`);
  assert.equal(bad.status, 404, JSON.stringify(bad.data));
});

test("verify records the episode's diff beside the reward", async () => {
  const env = await fork();
  await episode(env);
  const answer = await api("POST", `/v1/envs/${env}/exec`, {
    service: "opsbox",
    command: "echo 0 > /home/ubuntu/answer.txt",
  });
  assert.equal(answer.data.exit_code, 0);
  const r = await api("POST", `/v1/envs/${env}/verify`, {});
  assert.equal(r.data.status, "succeeded", r.data.reason);
  const phase = r.data.phases.find((p: any) => p.name === "diff");
  assert.equal(phase.status, "succeeded", phase.reason);
  const d = phase.evidence as DiffEvidence;
  assert.equal(d.against, versionId);
  assert.ok(home(d).some((e) => e.path === "new.txt" && e.change === "created"));
  assert.deepEqual(d.databases.find((x) => x.service === "db")?.tables, [
    { table: "public.orders", inserted: 7, updated: 3, deleted: 5 },
  ]);
});

test("verify's frozen environment is no dead end: refused with the way out, resumed by the API and by denv env resume", async () => {
  const env = await fork();
  const denv = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));
  const exec = () => api("POST", `/v1/envs/${env}/exec`, { service: "opsbox", command: "echo up" });
  assert.equal((await api("POST", `/v1/envs/${env}/verify`, {})).data.status, "succeeded");
  const refused = await exec();
  assert.equal(refused.status, 409);
  assert.match(refused.data.error.message, /frozen by verify for inspection: resume it \(denv env resume /);
  const resumed = await api("POST", `/v1/envs/${env}/resume`, {});
  assert.equal(resumed.status, 200, JSON.stringify(resumed.data));
  assert.equal(resumed.data.status, "running");
  assert.equal((await exec()).data.stdout, "up\n", "its services run again");
  const again = await api("POST", `/v1/envs/${env}/resume`, {});
  assert.equal(again.status, 409, "a running environment has nothing to resume");
  assert.match(
    again.data.error.message,
    /is running: only one paused, or one a verify froze for inspection, is resumed/,
  );
  // Frozen once more, and thawed with the CLI; another team's key cannot.
  assert.equal((await api("POST", `/v1/envs/${env}/verify`, {})).data.status, "succeeded");
  assert.equal((await lab.api("POST", `/v1/envs/${env}/resume`, {}, lab.keyB)).status, 404);
  const cli = await denv("env", "resume", env);
  assert.equal(cli.code, 0, cli.stderr);
  assert.match(cli.stdout, /^resumed opsworld\/sbx-\w+: running$/m);
  assert.equal((await exec()).data.stdout, "up\n");
});

test("verifying the environment deploys land on leaves it running, saying why; resume: false keeps it frozen", async () => {
  const env = "opsworld/base";
  const exec = () =>
    api("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, { service: "opsbox", command: "echo up" });
  const v = await api("POST", `/v1/envs/${encodeURIComponent(env)}/verify`, {});
  assert.equal(v.data.status, "succeeded", JSON.stringify(v.data).slice(0, 600));
  const verdict = v.data.phases.find((p: { name: string }) => p.name === "verdict").evidence;
  assert.equal(verdict.agent, "resumed");
  assert.match(verdict.resumed_because, /deploys land on this environment/);
  assert.equal((await exec()).data.stdout, "up\n", "still usable after it was graded");
  // Asked for, it is left frozen for inspection like any other, and resumed as any other.
  const kept = await api("POST", `/v1/envs/${encodeURIComponent(env)}/verify`, { resume: false });
  assert.equal(
    kept.data.phases.find((p: { name: string }) => p.name === "verdict").evidence.agent,
    "frozen for inspection",
  );
  assert.equal((await exec()).status, 409);
  assert.equal((await api("POST", `/v1/envs/${encodeURIComponent(env)}/resume`, {})).status, 200);
  assert.equal((await exec()).data.stdout, "up\n");
});
