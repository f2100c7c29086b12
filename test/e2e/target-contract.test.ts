/**
 * The contract every target keeps, run against each one a team has (today its denvd hosts; a
 * hosted provider's driver joins by being connected in `before`): its row is whole and says what
 * it supports; a sandbox made on it by name answers exec with its environment, takes and gives
 * back files, snapshots and forks where the row says it can, and is gone after its delete.
 * Through the API, on the real server and engine; E2B through its official SDK against a local
 * double of its API (e2b-dev's spec; the double runs each sandbox as a container on the engine).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import tar from "tar-stream";
import { type Lab, openLab } from "../security/security-lab.ts";
import { LOCAL_REGISTRY } from "./denvd-helpers.ts";
import { type E2bDouble, startE2bDouble } from "./e2b-double.ts";

let lab: Lab;
let e2b: E2bDouble;
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
  lab = await openLab({ fetchAllow: [...LOCAL_REGISTRY, new URL(e2b.url).host] });
  // The seed's `denv cloud connect e2b --name e2b --token KEY`, against the double.
  const connected = await lab.api("POST", "/v1/clouds", {
    provider: "e2b",
    name: "e2b",
    token: e2b.apiKey,
    api_url: e2b.url,
  });
  assert.equal(connected.status, 201, JSON.stringify(connected.data));
});

after(async () => {
  await lab?.close();
  await e2b?.close();
});

async function tarOf(name: string, body: string): Promise<Uint8Array> {
  const pack = tar.pack();
  pack.entry({ name, mode: 0o644 }, body);
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack) chunks.push(c as Buffer);
  return new Uint8Array(Buffer.concat(chunks));
}

async function untar(body: Buffer): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const extract = tar.extract();
  const done = new Promise<void>((resolve, reject) => {
    extract.on("entry", (h, stream, next) => {
      const parts: Buffer[] = [];
      stream.on("data", (d: unknown) => parts.push(d as Buffer));
      stream.on("end", () => {
        if (h.type === "file") out[h.name] = Buffer.concat(parts).toString();
        next();
      });
    });
    extract.on("finish", resolve);
    extract.on("error", reject);
  });
  extract.end(body);
  await done;
  return out;
}

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
  const hosted = targets.find((t) => t.name === "e2b");
  assert.equal(hosted?.type, "e2b");
  assert.equal(hosted?.capabilities.multi_service_stack, "no (one VM per sandbox)");
  assert.ok(!hosted?.supported.includes("verify"));
  assert.match(hosted?.note ?? "", /not against the live E2B/);
  // An unknown target is named as such, with the ones there are.
  const none = await lab.api("POST", "/v1/targets/nowhere/sandboxes", { image: "x" });
  assert.equal(none.status, 404);
  assert.match(none.data.error.message, /no target "nowhere".*denvd, e2b/);
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
        const put = await lab.api(
          "PUT",
          `/v1/envs/${id}/files?path=${encodeURIComponent("/work")}`,
          await tarOf("note.txt", "from the contract\n"),
        );
        assert.equal(put.status, 200, JSON.stringify(put.data));
        const got = await lab.api("GET", `/v1/envs/${id}/files?path=${encodeURIComponent("/work/note.txt")}`);
        assert.equal(got.status, 200);
        assert.deepEqual(Object.values(await untar(got.data as Buffer)), ["from the contract\n"]);
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
