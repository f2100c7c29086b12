/**
 * The contract every target keeps, run against each one a team has (today its denvd hosts; a
 * hosted provider's driver joins by being connected in `before`): its row is whole and says what
 * it supports; a sandbox made on it by name answers exec with its environment, takes and gives
 * back files, snapshots and forks where the row says it can, and is gone after its delete.
 * Through the API, on the real server and engine; E2B, Daytona and Modal through their official
 * SDKs (Modal's over gRPC) and Prime through its REST API, each against a local double of its
 * published API (each runs a sandbox as a container on the engine).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type DaytonaDouble, startDaytonaDouble } from "../doubles/daytona-double.ts";
import { type E2bDouble, startE2bDouble } from "../doubles/e2b-double.ts";
import { type ModalDouble, startModalDouble } from "../doubles/modal-double.ts";
import { type PrimeDouble, startPrimeDouble } from "../doubles/prime-double.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { filesOf, tarOf } from "../harness/tar-files.ts";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";

let lab: Lab;

/** Every value under `key` anywhere in a deployment's record (its phases' evidence nests them). */
function valuesOf(value: unknown, key: string): unknown[] {
  if (!value || typeof value !== "object") return [];
  const here = key in (value as object) ? [(value as Record<string, unknown>)[key]] : [];
  return [...here, ...Object.values(value as object).flatMap((v) => valuesOf(v, key))];
}

/**
 * The cells of a target's row, held to what it does: what it says it proves is in the sandbox's
 * record, and each verb it says it lacks is refused as not_supported (501), naming the target,
 * before anything is recorded.
 */
async function capabilityCells(target: any, id: string, deploymentId: string | undefined): Promise<void> {
  const supports = (cell: string) => target.supported.includes(cell);
  const refused = async (method: string, path: string, body?: unknown) => {
    const before = (await lab.api("GET", `/v1/deployments?env=${id}`)).data.deployments.length;
    const r = await lab.api(method, path, body);
    assert.equal(r.status, 501, `${target.name}: ${method} ${path}: ${JSON.stringify(r.data)}`);
    assert.equal(r.data.error.code, "not_supported");
    assert.match(r.data.error.message, new RegExp(`target ${target.name}\\b`), path);
    assert.equal(
      (await lab.api("GET", `/v1/deployments?env=${id}`)).data.deployments.length,
      before,
      "nothing recorded",
    );
  };
  if (target.type === "denvd")
    assert.ok(deploymentId, "a sandbox on the team's hosts is made by a deployment");
  // A target made of hosts proves these in the sandbox's deployment; a hosted provider's sandbox has
  // no deployment, and its row's words say what the provider promises instead.
  if (deploymentId && (supports("egress_deny_verified") || supports("caps_enforced"))) {
    const record = (await lab.api("GET", `/v1/deployments/${deploymentId}`)).data;
    if (supports("egress_deny_verified"))
      assert.ok(
        valuesOf(record, "egress").some((e: any) => e?.result === "blocked"),
        `${target.name}: the denied egress was probed and found blocked`,
      );
    if (supports("caps_enforced"))
      assert.ok(
        valuesOf(record, "caps").some((c: any) => c?.cgroup?.memory_bytes > 0 && c?.cgroup?.pids > 0),
        `${target.name}: the caps were read back from the cgroup`,
      );
  }
  if (!supports("verify")) {
    await refused("POST", `/v1/envs/${id}/verify`, {});
    await refused("POST", `/v1/envs/${id}/rollback`, { version: "ver_000000000000" });
    await refused("GET", `/v1/envs/${id}/diff`);
  }
  if (!supports("consistent_snapshot")) await refused("POST", `/v1/envs/${id}/snapshot`, {});
}
let e2b: E2bDouble;
let daytona: DaytonaDouble;
let prime: PrimeDouble;
let modal: ModalDouble;
const CELLS = [
  "multi_service_stack",
  "consistent_snapshot",
  "fork",
  "fork_time",
  "egress_deny_verified",
  "caps_enforced",
  "gpu",
  "verify",
];

before(async () => {
  e2b = await startE2bDouble({ registry: "127.0.0.1:5000" });
  daytona = await startDaytonaDouble();
  prime = await startPrimeDouble();
  modal = await startModalDouble();
  lab = await openLab({
    fetchAllow: [...LOCAL_REGISTRY, ...[e2b, daytona, prime, modal].map((d) => new URL(d.url).host)],
  });
  // The seed's `denv cloud connect e2b|daytona --name N --token KEY`, against the doubles.
  for (const [provider, double] of [
    ["e2b", e2b],
    ["daytona", daytona],
    ["prime", prime],
    ["modal", modal],
  ] as const) {
    const connected = await lab.api("POST", "/v1/clouds", {
      provider,
      name: provider,
      token: "token" in double ? double.token : double.apiKey,
      api_url: double.url,
    });
    assert.equal(connected.status, 201, JSON.stringify(connected.data));
  }
});

after(async () => {
  await lab?.close();
  await e2b?.close();
  await daytona?.close();
  await prime?.close();
  await modal?.close();
});

test("every target's row names each cell in words and which it supports", async () => {
  const r = await lab.api("GET", "/v1/targets");
  assert.equal(r.status, 200);
  const targets = r.data.targets as any[];
  assert.ok(targets.length >= 1);
  for (const t of targets) {
    assert.deepEqual(Object.keys(t.capabilities).sort(), [...CELLS].sort(), t.name);
    for (const cell of CELLS) assert.ok(String(t.capabilities[cell]).length > 0, `${t.name}.${cell}`);
    for (const s of t.supported) assert.ok(CELLS.includes(s), `${t.name} supports ${s}`);
    assert.equal(typeof t.available, "boolean");
  }
  // A connected provider is a target of its own, saying its driver has not met the live provider.
  for (const [name, live] of [
    ["e2b", /not against the live E2B/],
    ["daytona", /not against the live Daytona/],
    ["prime", /not against the live Prime/],
    ["modal", /not against the live Modal/],
  ] as const) {
    const hosted = targets.find((t) => t.name === name);
    assert.equal(hosted?.type, name);
    assert.match(hosted?.capabilities.multi_service_stack ?? "", /^no \(one (VM|container) per sandbox/);
    assert.ok(!hosted?.supported.includes("verify"));
    assert.match(hosted?.note ?? "", live);
  }
  // denvd's row is read from the team's hosts: this machine's has no GPU, and says why not.
  const denvd = targets.find((t) => t.name === "denvd");
  assert.ok(denvd?.supported.includes("verify"));
  assert.ok(!denvd?.supported.includes("gpu"));
  assert.match(denvd?.capabilities.gpu ?? "", /^no host of the team can pass a GPU/);
  // An unknown target is named as such, with the ones there are.
  const none = await lab.api("POST", "/v1/targets/nowhere/sandboxes", { image: "x" });
  assert.equal(none.status, 404);
  assert.match(none.data.error.message, /no target "nowhere".*denvd, e2b, daytona, prime, modal/);
});

test("each available target keeps the sandbox contract", async (t) => {
  const targets = ((await lab.api("GET", "/v1/targets")).data.targets as any[]).filter((x) => x.available);
  assert.ok(targets.length >= 1, "a target is available");
  for (const target of targets) {
    await t.test(target.name, async () => {
      const made = await lab.api("POST", `/v1/targets/${target.name}/sandboxes`, {
        image: "127.0.0.1:5000/denv/opsbox:bookworm",
        cmd: ["sleep", "infinity"],
        env: { CONTRACT: "kept" },
      });
      assert.equal(made.status, 201, JSON.stringify(made.data));
      assert.equal(made.data.target, target.name, "the environment records its target");
      const id = made.data.id as string;
      try {
        const r = await lab.api("POST", `/v1/envs/${id}/exec`, { command: "echo $CONTRACT; id -u" });
        assert.equal(r.status, 200, JSON.stringify(r.data));
        assert.equal(r.data.exit_code, 0);
        assert.match(r.data.stdout, /^kept\n\d+\n$/);
        const failing = await lab.api("POST", `/v1/envs/${id}/exec`, { command: "exit 7" });
        assert.equal(failing.data.exit_code, 7, "the command's own exit code");
        // stdin reaches the command (whole before it starts, on a hosted target), and the command
        // line is the command's own: its `exit` and a trailing comment are its.
        const fed = await lab.api("POST", `/v1/envs/${id}/exec`, {
          command: "tr a-z A-Z; exit 3 # done",
          stdin: Buffer.from("fed in\n").toString("base64"),
        });
        assert.deepEqual([fed.data.exit_code, fed.data.stdout], [3, "FED IN\n"], JSON.stringify(fed.data));
        const left = await lab.api("POST", `/v1/envs/${id}/exec`, {
          command: "ls -a /tmp | grep -c denv-stdin || true",
        });
        assert.equal(left.data.stdout, "0\n", "nothing of it is left behind");
        const put = await lab.api(
          "PUT",
          `/v1/envs/${id}/files?path=${encodeURIComponent("/work")}`,
          await tarOf("note.txt", "from the contract\n"),
        );
        assert.equal(put.status, 200, JSON.stringify(put.data));
        const got = await lab.api("GET", `/v1/envs/${id}/files?path=${encodeURIComponent("/work/note.txt")}`);
        assert.equal(got.status, 200);
        assert.deepEqual(Object.values(await filesOf(got.data as Buffer)), ["from the contract\n"]);
        await capabilityCells(target, id, made.data.deployment_id as string | undefined);
        if (target.supported.includes("fork")) {
          // A fork is of a version: the sandbox's state now, once snapshotted.
          const snap = await lab.api("POST", `/v1/envs/${id}/snapshot`, {});
          assert.equal(snap.data.status, "succeeded", JSON.stringify(snap.data));
          const fork = await lab.api("POST", `/v1/envs/${id}/fork`, { name: `contract-${target.name}` });
          assert.equal(fork.status, 201, JSON.stringify(fork.data));
          assert.equal(fork.data.target, target.name, "a fork runs where its version lives");
          const read = await lab.api("POST", `/v1/envs/${fork.data.id}/exec`, {
            command: "cat /work/note.txt",
          });
          assert.equal(read.data.stdout, "from the contract\n", "the fork holds what was written");
          assert.equal((await lab.api("DELETE", `/v1/envs/${fork.data.id}`)).status, 200);
        }
      } finally {
        assert.equal((await lab.api("DELETE", `/v1/envs/${id}`)).status, 200);
      }
      assert.equal((await lab.api("GET", `/v1/envs/${id}`)).status, 404, "gone after its delete");
    });
  }
});
