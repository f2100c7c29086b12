/**
 * `denv import harbor` on the real engine: five Harbor tasks (Dockerfile-only, a compose file with
 * a sidecar whose state the grader reads, a compose file whose main names its image with no
 * Dockerfile beside it, a prebuilt docker_image, and one whose environment/ files
 * Harbor uploads into the workdir, which its solution reads) become denv projects; each
 * deploys, its oracle scores 1 and its verifier scores 0 without it. A reward the agent writes
 * itself before grading counts for nothing.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { cliRunner } from "../harness/cli-runner.ts";
import { removeBuiltImages } from "../harness/engine.ts";
import { type Lab, openLab } from "../harness/lab.ts";

let lab: Lab;
const out = mkdtempSync(join(tmpdir(), "denv-harbor-"));
const fixtures = join(import.meta.dirname, "fixtures/harbor");

before(async () => {
  lab = await openLab();
});

after(async () => {
  await lab?.close();
  // The images this file built: the engine's build cache, needed by nothing after it.
  await removeBuiltImages([
    "compose-main-image",
    "hello-dockerfile",
    "image-with-files",
    "prebuilt-image",
    "sidecar-compose",
    "karotte-",
  ]);
  rmSync(out, { recursive: true, force: true });
});

const denv = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));

test("five Harbor tasks import, deploy, and verify to 1 with their oracle and 0 without", async () => {
  const r = await denv("import", "harbor", fixtures, out, "--json");
  assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
  const projects = JSON.parse(r.stdout).projects as {
    name: string;
    dir: string;
    unmapped: string[];
    check: {
      deploy: string;
      reward_with_oracle: number;
      reward_without_oracle: number;
      oracle_exit_code: number;
    };
  }[];
  assert.deepEqual(
    projects.map((p) => p.name),
    ["compose-main-image", "hello-dockerfile", "image-with-files", "prebuilt-image", "sidecar-compose"],
  );
  for (const p of projects) {
    assert.equal(p.check.deploy, "succeeded", p.name);
    assert.equal(p.check.oracle_exit_code, 0, p.name);
    assert.equal(p.check.reward_with_oracle, 1, p.name);
    assert.equal(p.check.reward_without_oracle, 0, p.name);
    // The task's files are kept with the project.
    for (const f of ["instruction.md", "tests/test.sh", "solution/solve.sh", "task.toml", "denv-import.json"])
      assert.ok(readFileSync(join(p.dir, f)).length > 0, `${p.name}: ${f}`);
  }
  const by = Object.fromEntries(projects.map((p) => [p.name, p]));
  // What does not map is listed, never dropped.
  assert.ok(by["prebuilt-image"]?.unmapped.some((u) => u.startsWith("[environment].storage_mb")));
  assert.ok(by["sidecar-compose"]?.unmapped.some((u) => u.includes("[environment].memory 1G")));
  assert.ok(by["hello-dockerfile"]?.unmapped.some((u) => u.startsWith("[agent].timeout_sec")));
  const compose = readFileSync(join(out, "sidecar-compose", "docker-compose.yaml"), "utf8");
  assert.match(compose, /context: \.\/environment\/store/);
  assert.match(compose, /egress: deny/);
  assert.match(
    readFileSync(join(out, "hello-dockerfile", "docker-compose.yaml"), "utf8"),
    /mem_limit: 1024m/,
  );

  // Imported projects stay deployed: `denv verify --oracle` checks one by hand.
  const v = await denv(
    "verify",
    "hello-dockerfile/alpha",
    "--oracle",
    join(out, "hello-dockerfile", "solution"),
    "--json",
  );
  assert.equal(v.code, 0, v.stderr);
  assert.equal(JSON.parse(v.stdout).reward, 1);
  // The oracle ran on a fork, since removed: alpha is as it was, and grading it scores 0.
  const envs = (await lab.api("GET", "/v1/envs")).data.environments as { name: string }[];
  assert.deepEqual(
    envs.filter((e) => e.name.startsWith("oracle-")),
    [],
  );
  const plain = await lab.api("POST", `/v1/envs/${encodeURIComponent("hello-dockerfile/alpha")}/verify`, {
    resume: true,
  });
  assert.equal(plain.data.status, "succeeded", plain.data.reason);
  assert.equal(plain.data.verify.reward, 0);
});

test("a reward the agent writes before grading, or a test.sh it plants, counts for nothing", async () => {
  const fork = await lab.api("POST", `/v1/envs/${encodeURIComponent("hello-dockerfile/alpha")}/fork`, {
    name: "cheater",
  });
  assert.equal(fork.status, 201, JSON.stringify(fork.data));
  const cheat = await lab.api("POST", `/v1/envs/${fork.data.id}/exec`, {
    service: "main",
    command: [
      "sh",
      "-c",
      'id -u; mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo \'{"reward": 1}\' > /logs/verifier/reward.json; mkdir -p /tests 2>/dev/null; echo "echo 1 > /logs/verifier/reward.txt" > /tests/test.sh 2>/dev/null; true',
    ],
  });
  assert.equal(cheat.data.exit_code, 0, cheat.data.stderr);
  assert.equal(cheat.data.stdout.trim().split("\n")[0], "1000");
  const v = await lab.api("POST", `/v1/envs/${fork.data.id}/verify`, { resume: false });
  assert.equal(v.data.status, "succeeded", v.data.reason);
  assert.equal(v.data.verify.reward, 0);
});

test("denv import karotte: a Karotte image's tasks as projects; an episode's transcript score is the reward", async () => {
  const image = "127.0.0.1:5000/denv/test-karotte:0.1";
  const dir = join(out, "karotte");
  const run = async (model: string) => {
    const r = await denv(
      "import",
      "karotte",
      image,
      dir,
      "--tasks",
      "say-hello,count-lines",
      "--model",
      model,
      "--egress",
      "deny",
      "--json",
    );
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    return JSON.parse(r.stdout).projects as {
      name: string;
      check: { deploy: string; reward: number; episode_exit_code: number };
    }[];
  };
  const solved = await run("oracle");
  assert.deepEqual(
    solved.map((p) => p.name),
    ["karotte-say-hello", "karotte-count-lines"],
  );
  for (const p of solved) {
    assert.equal(p.check.deploy, "succeeded", p.name);
    assert.equal(p.check.episode_exit_code, 0, p.name);
    assert.equal(p.check.reward, 1, p.name);
  }
  // The same projects, redeployed with a student that does nothing: the transcript scores 0.
  for (const p of await run("noop")) assert.equal(p.check.reward, 0, p.name);
  // The grader never follows a link the agent left where the transcript goes, nor reads a hard link.
  for (const [how, plant] of [
    ["symlink", "ln -sf /work/fake.json /work/out/transcript.json"],
    ["hard link", "ln -f /work/fake.json /work/out/transcript.json"],
    [
      "linked directory",
      "rm -rf /work/out && mkdir -p /work/elsewhere && cp /work/fake.json /work/elsewhere/transcript.json && ln -s /work/elsewhere /work/out",
    ],
  ] as const) {
    const fork = await lab.api("POST", `/v1/envs/${encodeURIComponent("karotte-say-hello/alpha")}/fork`, {
      name: `planted-${how.replace(/ /g, "-")}`,
    });
    assert.equal(fork.status, 201, JSON.stringify(fork.data));
    const planted = await lab.api("POST", `/v1/envs/${fork.data.id}/exec`, {
      service: "karotte",
      command: ["sh", "-c", `mkdir -p /work/out && echo '{"score": 1}' > /work/fake.json && ${plant}`],
    });
    assert.equal(planted.data.exit_code, 0, planted.data.stderr);
    const v = await lab.api("POST", `/v1/envs/${fork.data.id}/verify`, { resume: false });
    assert.equal(v.data.status, "succeeded", v.data.reason);
    assert.equal(v.data.verify.reward, 0, `${how}: ${JSON.stringify(v.data.verify)}`);
    await lab.api("DELETE", `/v1/envs/${fork.data.id}`);
  }
  // The agent's service is not root; hostile task ids and images are refused before anything runs.
  const who = await lab.api("POST", `/v1/envs/${encodeURIComponent("karotte-say-hello/alpha")}/exec`, {
    service: "karotte",
    command: ["id", "-u"],
  });
  assert.equal(who.data.stdout.trim(), "1000");
  for (const args of [
    [image, dir, "--tasks", "../../etc"],
    ["evil;rm -rf /", dir, "--tasks", "a"],
  ]) {
    const r = await denv("import", "karotte", ...args, "--no-check");
    assert.equal(r.code, 2, r.stderr);
  }
});
