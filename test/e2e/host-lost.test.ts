/**
 * A host unseen past its deadline: its environments are marked `lost` (the server never goes on
 * saying `running` for what it cannot reach), and when the host comes back its hello sets them
 * from what it holds, `running` again for a stack that survived. On the real engine, with the
 * sidecar stopped and restarted; the deadline is the server's option, shortened for the test, and
 * the test waits on the statuses it observes.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

let lab: Lab;

before(async () => {
  lab = await openLab({ hostWatch: { lostAfterMs: 1000, everyMs: 200 } });
});

after(async () => {
  await lab?.close();
});

async function statusBecomes(id: string, want: string): Promise<void> {
  await waitFor(`environment ${id} to become ${want}`, async () => {
    const r = await lab.api("GET", `/v1/envs/${id}`);
    return r.data.status === want;
  });
}

test("a host unseen past its deadline has its environments lost; back, they run again", async () => {
  const made = await lab.api("POST", "/v1/sandboxes", {
    image: "127.0.0.1:5000/denv/opsbox:bookworm",
    cmd: ["sleep", "infinity"],
  });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  const id = made.data.id as string;
  assert.equal((await lab.api("GET", `/v1/envs/${id}`)).data.status, "running");
  await lab.stopSidecar();
  await statusBecomes(id, "lost");
  const hosts = (await lab.api("GET", "/v1/hosts")).data.hosts;
  assert.equal(hosts[0]?.connected, false);
  // Lost is what it says, not an error: its commands wait for the host, which is not there.
  await lab.restartSidecar();
  await statusBecomes(id, "running");
  const r = await lab.api("POST", `/v1/envs/${id}/exec`, { command: "echo back" });
  assert.equal(r.data.stdout, "back\n", JSON.stringify(r.data));
});
