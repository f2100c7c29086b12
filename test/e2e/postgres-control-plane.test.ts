/**
 * The control plane on PostgreSQL with a real joined host: the seed's episode end to end (deploy
 * with its phases, fork, exec, files, snapshot, verify 1 and 0, rollback, destroy), forks made
 * concurrently (the store's transactions under contention), and another team kept out.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { deployOpsWorld, type Lab, openLab } from "../harness/lab.ts";
import { startPostgresCluster } from "../harness/postgres.ts";

let lab: Lab;
let pg: { url: string; stop: () => void };
let version: string;
const QUESTION = "select count(*) from orders where status = 'failed' and total_cents > 50000";

before(async () => {
  pg = await startPostgresCluster();
  lab = await openLab({ databaseUrl: pg.url });
  version = await deployOpsWorld(lab);
});

after(async () => {
  await lab?.close();
  pg?.stop();
});

const enc = encodeURIComponent;

test("the seed's episode on a PostgreSQL store: deploy, fork, exec, files, snapshot, verify, rollback", async () => {
  const alpha = (await lab.api("GET", `/v1/envs/${enc("ops-world/alpha")}`)).data;
  assert.equal(alpha.status, "running");
  assert.equal(alpha.current_version_id, version);
  const fork = await lab.api("POST", `/v1/envs/${enc("ops-world/alpha")}/fork`, { name: "rollout-017" });
  assert.equal(fork.status, 201, JSON.stringify(fork.data));
  const count = await lab.api("POST", `/v1/envs/${fork.data.id}/exec`, {
    command: ["psql", "-tAc", QUESTION],
  });
  assert.equal(count.data.exit_code, 0, count.data.stderr);
  const wrote = await lab.api("POST", `/v1/envs/${fork.data.id}/exec`, {
    command: `psql -tAc "${QUESTION}" > /home/ubuntu/answer.txt`,
  });
  assert.equal(wrote.data.exit_code, 0, wrote.data.stderr);
  const snap = await lab.api("POST", `/v1/envs/${fork.data.id}/snapshot`, {});
  assert.equal(snap.data.status, "succeeded", snap.data.reason);
  const right = await lab.api("POST", `/v1/envs/${fork.data.id}/verify`, { resume: true });
  assert.equal(right.data.status, "succeeded", right.data.reason);
  assert.equal(right.data.phases.at(-1).evidence.reward, 1);
  await lab.api("POST", `/v1/envs/${fork.data.id}/exec`, { command: "echo 42 > /home/ubuntu/answer.txt" });
  const wrong = await lab.api("POST", `/v1/envs/${fork.data.id}/verify`, { resume: true });
  assert.equal(wrong.data.phases.at(-1).evidence.reward, 0);
  const back = await lab.api("POST", `/v1/envs/${fork.data.id}/rollback`, {
    version: snap.data.version_id ?? snap.data.phases.at(-1).evidence.version_id,
  });
  assert.equal(back.data.status, "succeeded", back.data.reason);
  const answer = await lab.api("POST", `/v1/envs/${fork.data.id}/exec`, {
    command: "cat /home/ubuntu/answer.txt",
  });
  assert.equal(answer.data.stdout, count.data.stdout, "the rollback restored the snapshot's answer");
  assert.equal((await lab.api("GET", `/v1/envs/${fork.data.id}`, undefined, lab.keyB)).status, 404);
  assert.equal((await lab.api("DELETE", `/v1/envs/${fork.data.id}`)).status, 200);
});

test("eight forks at once on PostgreSQL: all made, all listed, all destroyed", async () => {
  const made = await Promise.all(
    Array.from({ length: 8 }, (_, i) =>
      lab.api("POST", `/v1/envs/${enc("ops-world/alpha")}/fork`, { name: `pg-par-${i}` }),
    ),
  );
  for (const m of made) assert.equal(m.status, 201, JSON.stringify(m.data));
  const listed = (await lab.api("GET", "/v1/envs")).data.environments as { name: string }[];
  assert.equal(listed.filter((e) => /^pg-par-\d$/.test(e.name)).length, 8);
  const gone = await Promise.all(made.map((m) => lab.api("DELETE", `/v1/envs/${m.data.id}`)));
  for (const g of gone) assert.equal(g.status, 200, JSON.stringify(g.data));
  const after = (await lab.api("GET", "/v1/envs")).data.environments as { name: string; status: string }[];
  assert.equal(after.filter((e) => /^pg-par-\d$/.test(e.name) && e.status !== "destroyed").length, 0);
});
