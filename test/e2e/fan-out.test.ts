/**
 * Fan-out on the real engine: N forks of one ops-world version in one request
 * (POST /v1/versions/{id}/forks), each with the version's data and isolated from the others, each
 * fork's outcome reported; and `denv fork --count`.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { deployOpsWorld, type Lab, openLab } from "../harness/lab.ts";

let lab: Lab;
let version: string;

before(async () => {
  lab = await openLab();
  version = await deployOpsWorld(lab);
});

after(async () => {
  await lab?.close();
});

const psql = async (env: string, sql: string) => {
  const r = await lab.api("POST", `/v1/envs/${env}/exec`, {
    service: "opsbox",
    command: ["psql", "-tAc", sql],
  });
  assert.equal(r.data.exit_code, 0, r.data.stderr);
  return (r.data.stdout as string).trim();
};

test("four forks of one version in one request: each has the data, each is its own", async () => {
  const r = await lab.api("POST", `/v1/versions/${version}/forks`, { count: 4, name_prefix: "rollout" });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  assert.deepEqual([r.data.requested, r.data.created, r.data.failed], [4, 4, 0]);
  const ids = r.data.forks.map((f: { environment: { id: string } }) => f.environment.id) as string[];
  assert.deepEqual(
    r.data.forks.map((f: { name: string }) => f.name),
    ["rollout-1", "rollout-2", "rollout-3", "rollout-4"],
  );
  assert.equal(new Set(ids).size, 4);
  for (const id of ids) assert.equal(await psql(id, "select count(*) from orders"), "100000");
  // A write in one fork is that fork's alone.
  await psql(ids[0] as string, "delete from orders where id <= 10");
  assert.equal(await psql(ids[0] as string, "select count(*) from orders"), "99990");
  for (const id of ids.slice(1)) assert.equal(await psql(id, "select count(*) from orders"), "100000");
});

test("denv fork --count prints each fork's outcome and fails when one was not made", async () => {
  const denv = (...args: string[]) =>
    promisify(execFile)(
      process.execPath,
      [join(import.meta.dirname, "../../packages/cli/bin/denv.js"), ...args],
      {
        encoding: "utf8",
        env: { ...process.env, DENV_SERVER: lab.server.url, DENV_API_KEY: lab.keyA, DENV_NO_STDIN: "1" },
      },
    );
  const ok = await denv("fork", "--name", "cli", "--count", "2", "ops-world/alpha");
  assert.match(ok.stdout, /✓ cli-1 \(env_/);
  assert.match(ok.stdout, /2 of 2 forks made/);
  // Progress while it waits, on stderr: a line per change off a terminal, ending at all of them.
  assert.match(ok.stderr, /\[-{20}\] 0\/2 forks ready/);
  assert.match(ok.stderr, /\[#{20}\] 2\/2 forks ready/);
  // Again: the names are taken, so each is refused, reported, and the command fails.
  await assert.rejects(
    denv("fork", "--name", "cli", "--count", "2", "ops-world/alpha"),
    (err: { code: number; stdout: string }) => {
      assert.equal(err.code, 1);
      assert.match(err.stdout, /✗ cli-1: conflict/);
      assert.match(err.stdout, /0 of 2 forks made in \d+ ms; 2 failed/);
      return true;
    },
  );
  await assert.rejects(denv("fork", "--name", "cli", "--count", "0", "ops-world/alpha"), /from 1 to 64/);
});
