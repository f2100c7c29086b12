/**
 * Admission control on the real engine: 500 sandbox creates sent at once. Each ends created
 * (201) or cleanly refused (503 capacity with a Retry-After, before anything was made); while
 * they run, the queue and its positions are visible and the server and denvd keep answering;
 * once the created ones are destroyed, nothing of any of them is left on the host.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type Lab, openLab } from "../harness/lab.ts";
import { elapse } from "../harness/wait-for.ts";

let lab: Lab;

before(async () => {
  lab = await openLab();
});

after(async () => {
  await lab?.close();
});

const REQUESTS = 500;

test("500 concurrent creates: each created or cleanly refused, the host still answering, nothing left behind", async (t) => {
  // Node's fetch opens a connection per request in flight: all 500 at once.
  const create = async (i: number) => {
    const res = await fetch(`${lab.server.url}/v1/sandboxes`, {
      method: "POST",
      signal: AbortSignal.timeout(600_000),
      headers: { authorization: `Bearer ${lab.keyA}`, "content-type": "application/json" },
      body: JSON.stringify({
        image: "127.0.0.1:5000/denv/opsbox:bookworm",
        cmd: ["sleep", "infinity"],
        user: "1000",
        name: `storm-${String(i).padStart(3, "0")}`,
      }),
    });
    return {
      status: res.status,
      retryAfter: res.headers.get("retry-after"),
      data: (await res.json()) as any,
    };
  };

  // While the storm runs: the queue, as people see it, and the server and host answering.
  let storming = true;
  const seen = { maxQueued: 0, maxRunning: 0, polls: 0, hostsOk: 0 };
  const watcher = (async () => {
    while (storming) {
      const a = await lab.api("GET", "/v1/admission");
      assert.equal(a.status, 200);
      const h = a.data.hosts[0];
      seen.polls++;
      seen.maxRunning = Math.max(seen.maxRunning, h.running);
      if (h.queued.length > seen.maxQueued) {
        seen.maxQueued = h.queued.length;
        assert.deepEqual(
          h.queued.map((q: { position: number }) => q.position),
          h.queued.map((_: unknown, i: number) => i + 1),
          "positions are 1..n in order",
        );
      }
      assert.ok(h.running <= h.parallel, JSON.stringify(h));
      assert.ok(h.queued.length <= h.queue_limit, JSON.stringify(h));
      const hosts = await lab.api("GET", "/v1/hosts");
      if (hosts.status === 200 && hosts.data.hosts[0].connected) seen.hostsOk++;
      await elapse(200, "the host's admission is sampled at intervals while the creates run");
    }
  })();
  const t0 = performance.now();
  const answers = await Promise.all(Array.from({ length: REQUESTS }, (_, i) => create(i)));
  const stormMs = Math.round(performance.now() - t0);
  storming = false;
  await watcher;

  const created = answers.filter((a) => a.status === 201);
  const refused = answers.filter((a) => a.status !== 201);
  t.diagnostic(
    `${created.length} created, ${refused.length} refused in ${stormMs} ms; queue seen up to ${seen.maxQueued}, ${seen.maxRunning} running at once`,
  );
  for (const r of refused) {
    assert.equal(r.status, 503, JSON.stringify(r.data));
    assert.equal(r.data.error.code, "capacity", JSON.stringify(r.data));
    assert.ok(Number(r.retryAfter) >= 1, `Retry-After: ${r.retryAfter}`);
    assert.ok(r.data.error.details.retry_after_ms >= 1000);
  }
  assert.equal(created.length + refused.length, REQUESTS);
  // The host took what it runs at once plus its queue (8 + 64), and refused the rest.
  assert.ok(created.length >= 8, `created ${created.length}`);
  assert.ok(refused.length > 0, "500 at once is past what one host queues");
  assert.ok(seen.maxQueued > 0, "the queue was seen, with its positions");
  assert.ok(seen.polls > 0 && seen.hostsOk === seen.polls, JSON.stringify(seen));

  // Each created sandbox's record says how long it waited for its turn: the first ones none, the
  // queued ones their wait and how many were ahead of them.
  const waits = await Promise.all(
    created.map(async (c) => {
      const d = (await lab.api("GET", `/v1/deployments/${c.data.deployment_id}`)).data;
      const place = d.phases.find((p: { name: string }) => p.name === "place");
      assert.deepEqual(Object.keys(place.evidence.admission).sort(), [
        "host_id",
        "queued_behind",
        "waited_ms",
      ]);
      assert.equal(d.admission_wait_ms, place.evidence.admission.waited_ms);
      return place.evidence.admission as { waited_ms: number; queued_behind: number };
    }),
  );
  assert.ok(
    waits.filter((w) => w.queued_behind === 0 && w.waited_ms === 0).length >= 1,
    "the first creates had a turn at once",
  );
  const queued = waits.filter((w) => w.queued_behind >= 8);
  assert.ok(queued.length > 0, `some waited behind a full host: ${JSON.stringify(waits.slice(0, 12))}`);
  assert.ok(
    queued.every((w) => w.waited_ms > 0),
    "a create queued behind running ones waited for its turn",
  );

  // Refused means never made: the team has exactly the created sandboxes.
  const envs = (await lab.api("GET", "/v1/envs")).data.environments as { id: string; name: string }[];
  assert.deepEqual(envs.map((e) => e.name).sort(), created.map((c) => c.data.name).sort());
  // denvd still does work: a command in the last one made.
  const last = created.at(-1)?.data.id as string;
  const ran = await lab.api("POST", `/v1/envs/${last}/exec`, { command: ["id", "-u"] });
  assert.equal(ran.status, 200, JSON.stringify(ran.data));
  assert.equal(ran.data.stdout.trim(), "1000");

  // Destroyed, eight at a time: nothing of them is left on the host.
  const ids = created.map((c) => c.data.id as string);
  for (let i = 0; i < ids.length; i += 8)
    await Promise.all(
      ids.slice(i, i + 8).map(async (id) => {
        const d = await lab.api("DELETE", `/v1/envs/${id}`);
        assert.equal(d.data.status, "succeeded", JSON.stringify(d.data));
      }),
    );
  const docker = lab.host.docker;
  const mine = { label: [`dev.denv.test=${lab.host.runId}`] };
  assert.deepEqual(await docker.listContainers({ all: true, filters: mine }), []);
  assert.deepEqual((await docker.listVolumes({ filters: mine })).Volumes ?? [], []);
  assert.deepEqual(await docker.listNetworks({ filters: mine }), []);
  assert.deepEqual(await lab.host.storage.listDatasets(), []);
  assert.deepEqual(lab.host.denvd.stacks(), []);
  // What stays is each created sandbox's version (versions outlive environments), and no more.
  assert.equal((await lab.host.storage.listSnapshots()).length, created.length);
});
