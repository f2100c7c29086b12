/**
 * Verify's attack cases, through the API with a real denvd: an agent that tries to trick its grader
 * with links, special files, a race, a background writer, a huge answer or odd names scores 0 (or
 * gets its honest file graded), and no link is ever followed; a verifier that never ends or crashes
 * scores 0 with the reason and its output kept. Also: ops-world graded right and wrong.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { validateCompose } from "@denv/spec";
import { type Lab, openLab } from "../harness/lab.ts";
import { elapse, waitFor } from "../harness/wait-for.ts";

let lab: Lab;
const versions: Record<string, string> = {};

function compose(opts: { collect?: string; command?: string; timeout?: string }): string {
  return `x-denv:
  kind: rl-environment
  agent: { service: box }
  verifier:
    image: 127.0.0.1:5000/denv/ops-verifier:1.2
    command: ${opts.command ?? '["/verify.sh"]'}
    collect: ["${opts.collect ?? "/home/ubuntu/answer.txt"}"]
    timeout: ${opts.timeout ?? "30s"}
services:
  box:
    image: 127.0.0.1:5000/denv/opsbox:bookworm
    user: "1000:1000"
    command: ["sleep", "infinity"]
    volumes: ["home:/home/ubuntu"]
volumes: { home: {} }
`;
}

const api = (method: string, path: string, body?: unknown) => lab.api(method, path, body);

async function episode(project: string, agentScript: string) {
  const sb = await api("POST", "/v1/sandboxes", { from_version: versions[project] });
  assert.equal(sb.status, 201, JSON.stringify(sb.data));
  if (agentScript) {
    const service = project === "opsworld" ? "opsbox" : "box";
    const r = await api("POST", `/v1/envs/${sb.data.id}/exec`, { service, command: agentScript });
    assert.equal(r.data.exit_code, 0, r.data.stderr);
  }
  return sb.data as { id: string };
}

/** The agent's home dataset on the host, for what must be made or read from outside the agent. */
async function homeDataset(envId: string): Promise<string> {
  const row = await lab.server.store
    .selectFrom("environments")
    .select("stack_id")
    .where("id", "=", envId)
    .executeTakeFirstOrThrow();
  const rec = lab.host.denvd.stack(row.stack_id as string);
  return lab.host.storage.datasetPath(rec.datasets.home as string);
}

/** A counter file an agent's background process keeps increasing: waits to see it move (it runs). */
async function running(file: string): Promise<void> {
  const read = () => Number(readFileSync(file, "utf8") || 0);
  await waitFor(`${file} to appear`, () => existsSync(file), { intervalMs: 20 });
  const first = read();
  await waitFor(`the background process to move ${file} on from ${first}`, () => read() > first, {
    intervalMs: 20,
  });
  assert.ok(read() > first);
}

/** The counter after verify: it must not move again over a second (the process is frozen). */
async function frozenCount(file: string): Promise<number> {
  const read = () => Number(readFileSync(file, "utf8") || 0);
  const at = read();
  await elapse(1000, "a frozen process must be seen not to move its counter (it moved every 20 ms)");
  assert.equal(read(), at, `the background process ran after the stop (${file})`);
  return at;
}

async function verify(envId: string) {
  const t = performance.now();
  const d = (await api("POST", `/v1/envs/${envId}/verify`, {})).data;
  const phase = (n: string) => d.phases.find((p: any) => p.name === n);
  return {
    d,
    ms: performance.now() - t,
    reward: phase("verdict")?.evidence?.reward as number,
    reason: (phase("verdict")?.evidence?.reason ?? "") as string,
    collect: phase("collect")?.evidence,
    grade: phase("grade")?.evidence,
  };
}

before(async () => {
  lab = await openLab();
  const projects: Record<string, string> = {
    honest: compose({}),
    dir: compose({
      collect: "/home/ubuntu/out",
      // The reward depends on what was collected: 1 only when out/a reads "a" and out/sub/b "b".
      command:
        '["sh", "-c", "ls -laR /collect/home/ubuntu/out; [ \\"$$(cat /collect/home/ubuntu/out/a /collect/home/ubuntu/out/sub/b)\\" = \\"$$(printf \'a\\\\nb\')\\" ] && echo 1 || echo 0"]',
    }),
    slow: compose({ command: '["sleep", "1000"]', timeout: "2s" }),
    crash: compose({ command: '["sh", "-c", "echo partial output; echo oops >&2; exit 3"]' }),
    inservice: compose({})
      .replace(
        '    image: 127.0.0.1:5000/denv/ops-verifier:1.2\n    command: ["/verify.sh"]',
        // A function, not a string: in a replacement string "$$" would become "$".
        () =>
          '    service: grader\n    command: ["sh", "-c", "id -u; cat $$DENV_COLLECT_DIR/home/ubuntu/answer.txt; echo 0.5 > $$DENV_REWARD_FILE"]',
      )
      .replace(
        "volumes: { home: {} }",
        '  grader:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    command: ["sleep", "infinity"]\nvolumes: { home: {} }',
      ),
    opsworld: readFileSync(join(import.meta.dirname, "../../examples/ops-world/docker-compose.yaml"), "utf8"),
  };
  for (const [name, text] of Object.entries(projects)) {
    await api("POST", "/v1/projects", { name, kind: "rl-environment", source: `./${name}` });
    await api("PUT", `/v1/projects/${name}/source`, { compose: text });
    const d = await api("POST", `/v1/projects/${name}/deploy?wait=true`, { env: "base" });
    assert.equal(d.data.status, "succeeded", d.data.reason);
    versions[name] = d.data.phases.find((p: any) => p.name === "verdict").evidence.version_id;
  }
});

after(async () => {
  await lab?.close();
});

describe("graded answers", () => {
  test("ops-world: the right answer earns 1, a wrong one 0; the agent is left frozen", async () => {
    const right = await episode(
      "opsworld",
      "psql -tAc \"select count(*) from orders where status='failed' and total_cents > 50000\" > /home/ubuntu/answer.txt",
    );
    const v = await verify(right.id);
    assert.equal(v.d.status, "succeeded", v.d.reason);
    assert.deepEqual(
      v.d.phases.map((p: any) => p.name),
      ["stop", "diff", "collect", "snapshot", "clone", "grade", "verdict"],
    );
    assert.equal(v.reward, 1);
    assert.equal(v.grade.exit_code, 0);
    assert.equal((await api("GET", `/v1/envs/${right.id}`)).data.status, "frozen");
    assert.equal((await api("POST", `/v1/envs/${right.id}/exec`, { command: "true" })).status, 409);
    const wrong = await episode("opsworld", "echo 10000 > /home/ubuntu/answer.txt");
    assert.equal((await verify(wrong.id)).reward, 0);
  });

  test("--resume lets the agent run again", async () => {
    const e = await episode("honest", "echo 9993 > /home/ubuntu/answer.txt");
    const d = (await api("POST", `/v1/envs/${e.id}/verify`, { resume: true })).data;
    assert.equal(d.phases.at(-1).evidence.reward, 1);
    const r = await api("POST", `/v1/envs/${e.id}/exec`, { command: "echo alive" });
    assert.equal(r.data.stdout, "alive\n");
  });
});

describe("attack cases", () => {
  const refused = (v: Awaited<ReturnType<typeof verify>>, pattern: RegExp) => {
    assert.equal(v.d.status, "succeeded", v.d.reason);
    assert.equal(v.reward, 0);
    assert.match(v.collect.refused ?? "", pattern);
    assert.match(v.reason, pattern);
    assert.equal(v.grade ?? null, null, "nothing was graded");
    assert.equal(v.d.phases.find((p: any) => p.name === "grade").status, "skipped");
  };

  test("the answer is a symlink to a root-only file", async () => {
    const e = await episode("honest", "ln -s /etc/shadow /home/ubuntu/answer.txt");
    refused(await verify(e.id), /symbolic link/);
  });

  test("a collected directory holds a symlink", async () => {
    const e = await episode(
      "dir",
      "mkdir -p /home/ubuntu/out/sub && echo ok > /home/ubuntu/out/a && ln -s /etc/passwd /home/ubuntu/out/sub/p",
    );
    refused(await verify(e.id), /out\/sub\/p is a symbolic link/);
  });

  test("a collected path whose parent is a symlink", async () => {
    const e = await episode(
      "dir",
      "mkdir -p /tmp/elsewhere && echo x > /tmp/elsewhere/a && ln -s /tmp/elsewhere /home/ubuntu/out",
    );
    refused(await verify(e.id), /symbolic link/);
  });

  test("the answer is a hard link to another file", async () => {
    const e = await episode(
      "honest",
      "echo 9993 > /home/ubuntu/real && ln /home/ubuntu/real /home/ubuntu/answer.txt",
    );
    refused(await verify(e.id), /hard link/);
  });

  test("the answer is a FIFO (a grader that opened it would hang)", async () => {
    const e = await episode("honest", "mkfifo /home/ubuntu/answer.txt");
    const v = await verify(e.id);
    // Refused by name: a grader that had opened it would have hung until its timeout instead.
    refused(v, /FIFO/);
  });

  test("the answer is a socket", async () => {
    const e = await episode("honest", "");
    // The agent's image has nothing to make a socket with; make it where the agent's home lives.
    const path = join(await homeDataset(e.id), "answer.txt");
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(path, r));
    try {
      refused(await verify(e.id), /socket/);
    } finally {
      srv.close();
    }
  });

  test("a path swapped for a link around the stop: no link is followed", async () => {
    // setsid: out of the exec's process group, so the swapper outlives the exec (as an agent's
    // would) and races the stop. Each round is counted in swaps.n, renamed into place so a freeze
    // between truncating and writing cannot leave it empty (likely how a CI run saw 0); the exec returns
    // only once the first round is counted, i.e. once the swapper has left the group the exec kills.
    const e = await episode(
      "honest",
      "cd /home/ubuntu; setsid -f bash -c 'n=0; while :; do ln -sf /etc/shadow l.tmp && mv -T l.tmp answer.txt; echo 9993 > f.tmp && mv -T f.tmp answer.txt; n=$((n+1)); echo $n > n.tmp && mv -T n.tmp swaps.n; done' </dev/null >/dev/null 2>&1; while [ ! -e swaps.n ]; do sleep 0.01; done",
    );
    const counter = join(await homeDataset(e.id), "swaps.n");
    await running(counter);
    const v = await verify(e.id);
    const stopped = await frozenCount(counter);
    assert.ok(stopped > 0, `the swapper ran until the stop (swaps.n reads ${stopped})`);
    assert.equal(v.d.status, "succeeded", v.d.reason);
    if (v.collect.refused) assert.match(v.collect.refused, /symbolic link/);
    else {
      assert.equal(v.reward, 1, `the honest file was graded: ${JSON.stringify(v.collect)}`);
      assert.equal(v.collect.files[0].sha256, createHash("sha256").update("9993\n").digest("hex"));
    }
  });

  test("a background process that rewrites the answer after the agent is done cannot", async () => {
    const e = await episode(
      "honest",
      "echo 9993 > /home/ubuntu/answer.txt; setsid -f bash -c 'n=0; while :; do n=$((n+1)); echo $n > /home/ubuntu/beat; [ $n -ge 40 ] && echo 0 > /home/ubuntu/answer.txt; sleep 0.05; done' </dev/null >/dev/null 2>&1; while [ ! -e /home/ubuntu/beat ]; do sleep 0.01; done",
    );
    const beat = join(await homeDataset(e.id), "beat");
    await running(beat);
    const v = await verify(e.id);
    assert.equal(v.reward, 1);
    await frozenCount(beat);
    const answer = readFileSync(join(await homeDataset(e.id), "answer.txt"), "utf8");
    assert.equal(answer, "9993\n", "the frozen background process never ran again");
  });

  test("an answer too large", async () => {
    const e = await episode("honest", "head -c 70000000 /dev/zero > /home/ubuntu/answer.txt");
    refused(await verify(e.id), /exceed/);
  });

  test("names that are not UTF-8", async () => {
    const e = await episode(
      "dir",
      "mkdir -p /home/ubuntu/out && touch \"/home/ubuntu/out/$(printf 'bad\\377name')\"",
    );
    refused(await verify(e.id), /not UTF-8/);
  });

  test("names with .. are refused before anything runs", () => {
    const r = validateCompose(compose({ collect: "/home/ubuntu/../../etc/shadow" }), { env: {} });
    assert.ok(!r.ok && r.errors.some((x) => x.code === "collect_path_invalid"));
  });

  test("a verifier that never ends is stopped at its timeout and scores 0", async () => {
    const e = await episode("slow", "echo 9993 > /home/ubuntu/answer.txt");
    const v = await verify(e.id);
    assert.equal(v.d.status, "succeeded", v.d.reason);
    assert.equal(v.reward, 0);
    assert.equal(v.grade.timed_out, true);
    assert.match(v.reason, /did not finish within 2000 ms/);
  });

  test("a verifier that crashes scores 0 and its output is kept", async () => {
    const e = await episode("crash", "echo 9993 > /home/ubuntu/answer.txt");
    const v = await verify(e.id);
    assert.equal(v.reward, 0);
    assert.equal(v.grade.exit_code, 3);
    assert.match(v.grade.stdout_tail, /partial output/);
    assert.match(v.grade.stderr_tail, /oops/);
    assert.match(v.reason, /exited with 3/);
  });

  test("a verifier inside a named service of the fork runs as root with the collected files", async () => {
    const e = await episode("inservice", "echo 9993 > /home/ubuntu/answer.txt");
    const v = await verify(e.id);
    assert.equal(v.d.status, "succeeded", v.d.reason);
    assert.equal(v.grade.mode, "service", JSON.stringify(v.grade));
    assert.equal(v.reason, "", JSON.stringify(v.grade)); // compose interpolates $VAR: the file writes $$VAR
    assert.equal(v.reward, 0.5);
    assert.match(v.grade.stdout_tail, /^0\n9993\n/);
  });

  test("a collection of 20,000 files is refused, scores 0, and the record stays small", async () => {
    const e = await episode(
      "dir",
      "mkdir -p /home/ubuntu/out && cd /home/ubuntu/out && seq 1 20000 | xargs touch",
    );
    const v = await verify(e.id);
    refused(v, /more than 10000 files and directories/);
    assert.ok(JSON.stringify(v.d).length < 50_000, `${JSON.stringify(v.d).length} bytes`);
  });

  test("a collected directory of plain files is graded", async () => {
    const e = await episode(
      "dir",
      "mkdir -p /home/ubuntu/out/sub && echo a > /home/ubuntu/out/a && echo b > /home/ubuntu/out/sub/b",
    );
    const v = await verify(e.id);
    assert.equal(v.reward, 1);
    assert.deepEqual(v.collect.files.map((f: any) => f.path).sort(), [
      "/home/ubuntu/out/a",
      "/home/ubuntu/out/sub/b",
    ]);
    assert.match(v.grade.stdout_tail, /sub/);
    // The same directory with another content scores 0: the reward is the grader's, not a constant.
    const other = await episode(
      "dir",
      "mkdir -p /home/ubuntu/out/sub && echo a > /home/ubuntu/out/a && echo c > /home/ubuntu/out/sub/b",
    );
    assert.equal((await verify(other.id)).reward, 0);
  });
});
