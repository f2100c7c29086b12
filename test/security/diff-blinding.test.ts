/**
 * Round 4's finding 9: the agent blinded the episode diff. A directory nested 520 levels in a
 * volume made the whole diff answer `internal` (its depth limit threw), so the agent's other
 * changes vanished from the diff evidence of verify, replay and promote. Here, on ops-world with a
 * real denvd on btrfs: the agent writes its answer, changes a row, and nests a directory 520 deep;
 * the diff (through the API and in verify's evidence) lists the answer, counts the row, and names
 * the subtree it left out, with why.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { DiffEvidence } from "@denv/protocol";
import { deployOpsWorld, type Lab, openLab } from "../harness/lab.ts";

let lab: Lab;
let version: string;

const BLIND = [
  "echo 42 > /home/ubuntu/answer.txt",
  "psql -qc \"update orders set status = 'refunded' where id = 1\"",
  `python3 -c 'import os; os.makedirs("/home/ubuntu/blind/" + "/".join(["d"] * 520))'`,
].join(" && ");

before(async () => {
  lab = await openLab();
  version = await deployOpsWorld(lab);
});

after(async () => {
  if (lab)
    for (const e of (await lab.api("GET", "/v1/envs")).data.environments ?? [])
      await lab.api("DELETE", `/v1/envs/${e.id}?wait=true`);
  await lab?.close();
});

/** The diff's story of the episode: the answer listed, the row counted, the deep subtree named. */
function assertSeen(d: DiffEvidence): void {
  assert.ok(
    d.entries.some((e) => e.volume === "home" && e.path === "answer.txt" && e.change === "created"),
    JSON.stringify(d.entries.slice(0, 5)),
  );
  assert.deepEqual(d.databases.find((x) => x.service === "db")?.tables, [
    { table: "public.orders", inserted: 0, updated: 1, deleted: 0 },
  ]);
  assert.equal(d.not_diffed_count, 1);
  const left = d.not_diffed?.[0];
  assert.equal(left?.volume, "home");
  assert.equal(left?.why, "depth");
  assert.ok(left?.path.startsWith("blind/d/d/"), left?.path);
}

test("a directory nested 520 deep is named as not diffed; the diff and verify's evidence keep the rest", async () => {
  const sb = await lab.api("POST", "/v1/sandboxes", { from_version: version });
  assert.equal(sb.status, 201, JSON.stringify(sb.data));
  const env = sb.data.id as string;
  const ran = await lab.api("POST", `/v1/envs/${env}/exec`, {
    service: "opsbox",
    command: ["bash", "-c", BLIND],
  });
  assert.equal(ran.data.exit_code, 0, ran.data.stderr);
  const d = await lab.api("GET", `/v1/envs/${env}/diff`);
  assert.equal(d.status, 200, JSON.stringify(d.data).slice(0, 500));
  assertSeen(d.data as DiffEvidence);
  const v = await lab.api("POST", `/v1/envs/${env}/verify`, {});
  assert.equal(v.data.status, "succeeded", v.data.reason);
  const phase = (v.data.phases as { name: string; status: string; evidence: unknown }[]).find(
    (p) => p.name === "diff",
  );
  assert.equal(phase?.status, "succeeded");
  assertSeen(phase?.evidence as DiffEvidence);
});
