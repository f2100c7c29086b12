/**
 * GPUs in placement: the pure assignment, and forks of a GPU version through the real deployer and
 * hub against host doubles that report GPUs in their hello (no engine): each fork is given GPUs of
 * its own by UUID, a fork with none free is rolled back at place naming the request and the host's
 * inventory, and a host without GPUs is refused the same way.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { GpuInventory, OpCheckedParams } from "@denv/protocol";
import { ComposeValidator, validateCompose } from "@denv/spec";
import { SecretBox } from "../clouds/secret-box.ts";
import { Deployer } from "../deployments/deployer.ts";
import { FetchPolicy } from "../fetch-policy.ts";
import { findOrCreateEnvironment, updateEnvironment } from "../store/environment-store.ts";
import { redeemJoinToken } from "../store/host-store.ts";
import { openStore, type Store } from "../store/open-store.ts";
import { insertProject } from "../store/project-store.ts";
import { createJoinToken, createTeam } from "../store/team-store.ts";
import { insertVersion } from "../store/version-store.ts";
import { DenvdHosts } from "../targets/denvd/denvd-hosts.ts";
import { HostDouble } from "../testing/host-double.ts";
import { assignGpus, gpuNeedOf } from "./gpu-placement.ts";

const inventory = (n: number, mode: GpuInventory["mode"] = "nvidia"): GpuInventory => ({
  driver_version: n ? "580.159.03" : null,
  devices: [...Array(n).keys()].map((i) => ({
    index: i,
    uuid: `GPU-0000000${i}-aaaa-bbbb-cccc-dddddddddddd`,
    model: "NVIDIA H200",
    memory_bytes: 143771 * 1024 * 1024,
  })),
  device_nodes: [...Array(n).keys()].map((i) => `/dev/nvidia${i}`),
  cdi_devices: [],
  runtime: { nvidia: mode === "nvidia", cdi: mode === "cdi" },
  mode,
  note: n ? null : "no NVIDIA GPU (no nvidia-smi, no /dev/nvidiaN)",
});
const uuid = (i: number) => `GPU-0000000${i}-aaaa-bbbb-cccc-dddddddddddd`;
const gpuSpec = (gpus: string) => {
  const r = validateCompose(
    `x-denv: { kind: agent }\nservices:\n  trainer:\n    image: "127.0.0.1:5000/denv/box@sha256:${"0".repeat(64)}"\n    gpus:\n${gpus}`,
    { env: {} },
  );
  assert.ok(r.ok, JSON.stringify(r));
  return r.spec;
};

test("assignment: counts, all, ids by index or UUID, what others hold, and a host that cannot pass GPUs", () => {
  const one = gpuNeedOf(gpuSpec("      - count: 1\n")) ?? {};
  assert.deepEqual(assignGpus(inventory(2), new Set([uuid(0)]), one), { assignment: { trainer: [uuid(1)] } });
  assert.deepEqual(assignGpus(inventory(2), new Set([uuid(0), uuid(1)]), one), {
    why: "trainer asks for 1, and 0 are free",
  });
  const all = gpuNeedOf(gpuSpec("      - capabilities: [gpu]\n")) ?? {};
  assert.deepEqual(assignGpus(inventory(2), new Set(), all), { assignment: { trainer: [uuid(0), uuid(1)] } });
  assert.match(
    String((assignGpus(inventory(2), new Set([uuid(1)]), all) as { why: string }).why),
    /every GPU, and 1 of 2 are held/,
  );
  const ids = gpuNeedOf(gpuSpec(`      - device_ids: ["1", "${uuid(0)}"]\n`)) ?? {};
  assert.deepEqual(assignGpus(inventory(2), new Set(), ids), { assignment: { trainer: [uuid(1), uuid(0)] } });
  assert.match(
    String(
      (
        assignGpus(inventory(2), new Set(), gpuNeedOf(gpuSpec('      - device_ids: ["7"]\n')) ?? {}) as {
          why: string;
        }
      ).why,
    ),
    /names GPU 7, which it does not have/,
  );
  assert.match(
    String((assignGpus(inventory(2, "none"), new Set(), one) as { why: string }).why),
    /none usable/,
  );
  assert.match(String((assignGpus(null, new Set(), one) as { why: string }).why), /reports no GPU inventory/);
});

let dir: string;
let store: Store;
let hub: DenvdHosts;
let upgrades: Server;
let validator: ComposeValidator;
let deployer: Deployer;
const doubles: HostDouble[] = [];
let teamId: string;
const versionOn: Record<string, string> = {};

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "denv-gpus-"));
  store = await openStore(join(dir, "store"));
  const secrets = SecretBox.open(join(dir, "store"));
  hub = new DenvdHosts(store, { waitForHostMs: 2000 });
  validator = new ComposeValidator({ workers: 1 });
  deployer = new Deployer({
    store,
    stacks: hub.stacks,
    secrets,
    validator,
    fetchPolicy: new FetchPolicy([]),
    joinWaitMs: 1000,
  });
  upgrades = createServer((_req, res) => res.writeHead(404).end());
  upgrades.on("upgrade", (req, socket, head) => hub.handleUpgrade(req, socket, head));
  await new Promise<void>((r) => upgrades.listen(0, "127.0.0.1", r));
  const port = (upgrades.address() as { port: number }).port;
  teamId = await createTeam(store, "gpu-team", true);
  let n = 0;
  const fork = (p: OpCheckedParams<"fork">) => {
    const id = `stk_${(++n).toString(16).padStart(12, "0")}`;
    const health = { services: {}, ms: 1 };
    const egress = { result: "blocked" as const, target: "172.17.0.1:9", outcome: "timeout" as const, ms: 1 };
    return {
      stack_id: id,
      evidence: {
        stack_id: id,
        from_version: p.version_id,
        clone_ms: 1,
        quota: {},
        start: {},
        start_ms: 1,
        health,
        egress,
        total_ms: 3,
      },
    };
  };
  const project = {
    id: "prj_00000000gpu1",
    team_id: teamId,
    name: "trainer",
    kind: "agent",
    source_type: "local",
    source: "./t",
    compose_text: null,
    dotenv_text: null,
    pinned_target: null,
    created_at: new Date().toISOString(),
  };
  await insertProject(store, project);
  const spec = gpuSpec("      - count: 1\n");
  for (const [name, gpus] of [
    ["gpu-host", inventory(2)],
    ["cpu-host", inventory(0)],
  ] as const) {
    const { hostId, secret } = await redeemJoinToken(
      store,
      (await createJoinToken(store, teamId, 60_000)).token,
      name,
    );
    const d = new HostDouble({ fork }, { gpus });
    doubles.push(d);
    await d.connect(`ws://127.0.0.1:${port}/v1/hosts/connect`, secret);
    // alpha on each host, with its version there; on the GPU host alpha holds the first GPU.
    const env = await findOrCreateEnvironment(store, project, `alpha-${name}`);
    const versionId = `ver_0000000000${name === "gpu-host" ? "a1" : "b2"}`;
    await updateEnvironment(store, env.id, {
      status: "running",
      host_id: hostId,
      stack_id: `stk_alpha${name === "gpu-host" ? "000001" : "000002"}`,
      current_version_id: versionId,
      ...(name === "gpu-host" ? { gpus_json: JSON.stringify({ trainer: [uuid(0)] }) } : {}),
    });
    await insertVersion(store, {
      id: versionId,
      team_id: teamId,
      project_id: project.id,
      environment_id: env.id,
      host_id: hostId,
      target_id: "denvd",
      spec_json: secrets.sealText(JSON.stringify(spec)),
      spec_hash: spec.hash,
      images_json: "{}",
      evidence_json: "{}",
      created_at: new Date().toISOString(),
    });
    versionOn[name] = versionId;
  }
});

after(async () => {
  for (const d of doubles) d.close();
  hub?.close();
  upgrades?.close();
  await validator?.close();
  await store?.destroy();
  rmSync(dir, { recursive: true, force: true });
});

async function forkOf(versionId: string, name: string) {
  const made = await deployer.fork(versionId, { teamId, name });
  await made.done.catch(() => {});
  const d = await deployer.getDeployment(made.deploymentId);
  const env = await store
    .selectFrom("environments")
    .selectAll()
    .where("id", "=", made.environmentId)
    .executeTakeFirstOrThrow();
  return { d: d as NonNullable<typeof d>, env };
}

test("forks of a GPU version get GPUs of their own; with none free the fork is rolled back at place, saying what the host has", async () => {
  const first = await forkOf(versionOn["gpu-host"] as string, "rollout-1");
  assert.equal(first.d.status, "succeeded", first.d.reason ?? "");
  assert.deepEqual(JSON.parse(first.env.gpus_json ?? "null"), { trainer: [uuid(1)] }, "alpha holds GPU 0");
  // What the host was asked: exactly that GPU, by UUID.
  const sent = doubles[0]?.calls.filter((c) => c.method === "fork").at(-1)?.params as { gpus?: unknown };
  assert.deepEqual(sent.gpus, { trainer: [uuid(1)] });

  const second = await forkOf(versionOn["gpu-host"] as string, "rollout-2");
  assert.equal(second.d.status, "rolled_back");
  const place = (
    JSON.parse(second.d.phases_json) as Array<{ name: string; status: string; reason: string | null }>
  ).find((p) => p.name === "place");
  assert.equal(place?.status, "failed");
  assert.equal(
    place?.reason,
    "the version's services ask for GPUs (trainer: 1 GPU (nvidia, gpu)) and gpu-host, which holds it, cannot give them: trainer asks for 1, and 0 are free",
  );
  assert.equal(second.env.gpus_json ?? null, null, "a fork rolled back holds nothing");
  assert.equal(doubles[0]?.calls.filter((c) => c.method === "fork").length, 1, "the host was never asked");

  // The first fork gone, its GPU is free for the next.
  await updateEnvironment(store, first.env.id, { status: "destroyed" });
  const third = await forkOf(versionOn["gpu-host"] as string, "rollout-3");
  assert.equal(third.d.status, "succeeded", third.d.reason ?? "");
  assert.deepEqual(JSON.parse(third.env.gpus_json ?? "null"), { trainer: [uuid(1)] });
});

test("a host without GPUs: the fork is rolled back at place with the host's inventory in the reason", async () => {
  const r = await forkOf(versionOn["cpu-host"] as string, "rollout-cpu");
  assert.equal(r.d.status, "rolled_back");
  assert.match(
    r.d.reason ?? "",
    /ask for GPUs \(trainer: 1 GPU \(nvidia, gpu\)\) and cpu-host, which holds it, cannot give them: no GPUs \(no NVIDIA GPU \(no nvidia-smi, no \/dev\/nvidiaN\)\)/,
  );
});
