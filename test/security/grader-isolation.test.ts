/**
 * Issue 33, attack 2: the agent sets its own reward by planting code where the grader runs. A
 * verifier "inside a service" ran as root in the agent's own container, from the agent's working
 * directory, with the service's PATH and variables: a `json.py` in /home/app was imported before the
 * standard library's. Here the agent (uid 1000) plants everything it can reach — json.py,
 * sitecustomize.py and a user site in /home/app, .bashrc and .profile, /home/app/bin/python3 and
 * /home/app/bin/env — in a project whose author pointed HOME, PATH, PYTHONPATH, BASH_ENV and LD_PRELOAD
 * at the agent's workspace. The grader, in the agent's service (a fresh container of its image) or
 * in another service sharing the volume (by exec), must still score 0 for a wrong answer, 1 for the
 * right one, and see none of those variables. Real server, denvd and engine.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type Lab, openLab } from "../harness/lab.ts";

let lab: Lab;

// Reward 1 only for the answer 42 in the collected files; its environment to stderr, for the evidence.
const GRADE = [
  "bash",
  "-c",
  // $$: a literal $ in a compose file.
  'env >&2; echo cwd=$$(pwd) >&2; python3 -c \'import json, os; p = os.path.join(os.environ["DENV_COLLECT_DIR"], "home", "app", "answer"); a = open(p).read().strip() if os.path.exists(p) else ""; print(json.dumps(1 if a == "42" else 0))\'',
];

function compose(graderService: "box" | "side", command: string[]): string {
  return `services:
  box:
    image: 127.0.0.1:5000/denv/openenv-echo:0.1
    user: "1000:1000"
    command: ["sleep", "infinity"]
    working_dir: /home/app
    environment: &steer
      HOME: /home/app
      PATH: /home/app/bin:/usr/local/bin:/usr/bin:/bin
      PYTHONPATH: /home/app
      PYTHONUSERBASE: /home/app/.local
      BASH_ENV: /home/app/.bashrc
      ENV: /home/app/.profile
      LD_PRELOAD: /home/app/preload.so
    volumes: ["work:/home/app"]
  side:
    image: 127.0.0.1:5000/denv/openenv-echo:0.1
    user: "1000:1000"
    command: ["sleep", "infinity"]
    working_dir: /home/app
    environment: *steer
    volumes: ["work:/home/app"]
volumes:
  work: {}
x-denv:
  kind: rl-environment
  agent:
    service: box
  verifier:
    service: ${graderService}
    collect: ["/home/app/answer"]
    command: ${JSON.stringify(command)}
    timeout: 60s
`;
}

// What the agent plants: each makes the grader print 1 if it is ever run or imported.
const PLANT = [
  "mkdir -p /home/app/bin /home/app/.local/lib/python3.11/site-packages",
  "printf 'print(1)\\nraise SystemExit(0)\\n' > /home/app/json.py",
  "cp /home/app/json.py /home/app/sitecustomize.py",
  "cp /home/app/json.py /home/app/.local/lib/python3.11/site-packages/usercustomize.py",
  "printf 'echo 1; exit 0\\n' > /home/app/.bashrc",
  "cp /home/app/.bashrc /home/app/.profile && cp /home/app/.bashrc /home/app/.bash_profile",
  "printf '#!/bin/sh\\necho 1\\n' > /home/app/bin/python3 && cp /home/app/bin/python3 /home/app/bin/env && cp /home/app/bin/python3 /home/app/bin/bash",
  "chmod +x /home/app/bin/*",
  "echo 41 > /home/app/answer",
].join(" && ");

async function deploy(name: string, text: string): Promise<void> {
  assert.equal(
    (await lab.api("POST", "/v1/projects", { name, kind: "rl-environment", source: `./${name}` })).status,
    201,
  );
  const src = await lab.api("PUT", `/v1/projects/${name}/source`, { compose: text });
  assert.equal(src.status, 200, JSON.stringify(src.data));
  const d = await lab.api("POST", `/v1/projects/${name}/deploy?wait=true`, { env: "alpha" });
  assert.equal(d.data.status, "succeeded", d.data.reason);
}

async function episode(name: string, fork: string, setup: string) {
  const f = await lab.api("POST", `/v1/envs/${encodeURIComponent(`${name}/alpha`)}/fork`, { name: fork });
  assert.equal(f.status, 201, JSON.stringify(f.data));
  const planted = await lab.api("POST", `/v1/envs/${f.data.id}/exec`, {
    service: "box",
    command: ["sh", "-c", setup],
  });
  assert.equal(planted.data.exit_code, 0, planted.data.stderr);
  const v = await lab.api("POST", `/v1/envs/${f.data.id}/verify`, { resume: false });
  assert.equal(v.data.status, "succeeded", v.data.reason);
  await lab.api("DELETE", `/v1/envs/${f.data.id}`);
  const grade = v.data.phases.find((p: { name: string }) => p.name === "grade")?.evidence;
  return {
    ...(grade as { stderr_tail: string; stdout_tail: string; mode: string }),
    reward: v.data.verify.reward as number,
  };
}

before(async () => {
  lab = await openLab();
});

after(async () => {
  if (lab)
    for (const e of (await lab.api("GET", "/v1/envs")).data.environments ?? [])
      await lab.api("DELETE", `/v1/envs/${e.id}`);
  await lab?.close();
});

for (const where of ["box", "side"] as const) {
  test(`a grader in ${where === "box" ? "the agent's own service" : "another service"} never runs what the agent planted`, async () => {
    const name = `graded-${where}`;
    await deploy(name, compose(where, GRADE));
    const attacked = await episode(name, "attacked", PLANT);
    process.stdout.write(`# ${where}: ${JSON.stringify(attacked).slice(0, 600)}\n`);
    assert.equal(attacked.reward, 0, JSON.stringify(attacked));
    assert.equal(attacked.mode, "service");
    // What the grader ran with: none of the variables that pointed into the agent's workspace.
    assert.match(
      attacked.stderr_tail,
      /^PATH=\/usr\/local\/sbin:\/usr\/local\/bin:\/usr\/sbin:\/usr\/bin:\/sbin:\/bin$/m,
    );
    assert.match(attacked.stderr_tail, /^HOME=\/denv-grade$/m);
    assert.match(attacked.stderr_tail, /^cwd=\/denv-grade$/m);
    assert.doesNotMatch(attacked.stderr_tail, /\/home\/app/);
    assert.doesNotMatch(attacked.stderr_tail, /^(PYTHONPATH|PYTHONUSERBASE|BASH_ENV|ENV)=/m);
    // The loader's list is denvd's clock library alone (the episode's frozen clock), never the agent's.
    assert.match(attacked.stderr_tail, /^LD_PRELOAD=\/\.denv\/clock\/libdenv-clock\.so$/m);
    // The same plants with the right answer: the grader works, and reads the collected file.
    const solved = await episode(name, "solved", `${PLANT} && echo 42 > /home/app/answer`);
    assert.equal(solved.reward, 1, JSON.stringify(solved));
  });
}

test("python graders run isolated: the agent's json.py is not imported from its working directory", async () => {
  // The Karotte import's shape: python3 -c in a service whose working directory is the agent's.
  const name = "graded-python";
  await deploy(name, compose("box", ["python3", "-c", "import json; print(json.dumps(0))"]));
  const v = await episode(name, "attacked", PLANT);
  assert.equal(v.reward, 0, JSON.stringify(v));
});
