/**
 * Deployments a user can find again (issue 70): the team's list (one environment's, those at
 * work), following one live from another terminal, and Ctrl-C during a follow stopping the
 * following, not the deployment, with the way back printed. Another team's key sees none of them.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { captureServerLog } from "../../packages/server/src/server-log.ts";
import { cliRunner } from "../harness/cli-runner.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
const CLI = join(import.meta.dirname, "../../packages/cli/bin/denv.js");
let lab: Lab;
const denv = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));

// Healthy only once the file exists, which the test makes: the deploy waits for it.
const COMPOSE = `x-denv: { kind: service }
services:
  app:
    image: ${OPSBOX}
    user: "1000:1000"
    command: ["sleep", "infinity"]
    healthcheck: { test: ["CMD", "test", "-f", "/tmp/ready"], interval: 200ms, retries: 3000 }
`;

before(async () => {
  lab = await openLab();
  await lab.api("POST", "/v1/projects", { name: "dl", kind: "service", source: "./dl" });
  const put = await lab.api("PUT", "/v1/projects/dl/source", { compose: COMPOSE });
  assert.equal(put.status, 200, JSON.stringify(put.data));
});

after(async () => {
  await lab?.close();
});

/** The deploy's own container, once the host made it: where the test makes the service healthy. */
async function makeReady(): Promise<void> {
  const stack = await waitFor("the deploy's stack", () =>
    lab.host.denvd.stacks().find((s) => s.name.startsWith("dl-") && s.containers.app),
  );
  await waitFor("the file that makes it healthy", async () => {
    const r = await lab.host.denvd
      .exec(stack.id, "app", { command: ["touch", "/tmp/ready"] })
      .catch(() => null);
    return r?.exitCode === 0;
  });
}

test("Ctrl-C during a follow stops the following, not the deployment, and says how to follow again", async () => {
  const d = await lab.api("POST", "/v1/projects/dl/deploy", { env: "e" });
  assert.equal(d.status, 202, JSON.stringify(d.data));
  const id = d.data.id as string;
  const child = spawn(process.execPath, [CLI, "deployment", "follow", id], {
    env: { ...process.env, DENV_SERVER: lab.server.url, DENV_API_KEY: lab.keyA, DENV_NO_STDIN: "1" },
  });
  let out = "";
  let err = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr.on("data", (b: Buffer) => (err += b.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  await waitFor("the follow printing a phase", () => /resolve/.test(out));
  child.kill("SIGINT");
  assert.equal(await exited, 130);
  assert.match(
    err,
    new RegExp(`deployment ${id} goes on without you: follow it again with \`denv deployment follow ${id}\``),
  );
  // It went on: made healthy, it succeeds, and a second follow sees it to the end.
  const running = await denv("deployment", "list", "--running", "--json");
  assert.ok(
    JSON.parse(running.stdout).deployments.some((x: { id: string }) => x.id === id),
    running.stdout,
  );
  await makeReady();
  const again = await denv("deployment", "follow", id);
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, /✓ health/);
  assert.match(again.stdout, /^succeeded$/m);
  // The health phase's time is its own (the services started and waited for), carved from the
  // host's one start step, and the timeline runs on from start to health without a gap.
  const done = (await lab.api("GET", `/v1/deployments/${id}`)).data;
  const phase = (n: string) =>
    done.phases.find((p: { name: string }) => p.name === n) as {
      started_at: string;
      finished_at: string;
      duration_ms: number;
      evidence: { ms: number };
    };
  const start = phase("start");
  const health = phase("health");
  assert.equal(health.started_at, start.finished_at);
  assert.ok(health.duration_ms >= Math.min(health.evidence.ms, start.duration_ms + health.duration_ms));
  assert.ok(
    health.duration_ms >= health.evidence.ms || start.duration_ms === 0,
    JSON.stringify([start, health]),
  );
  assert.ok(health.evidence.ms > 0);
});

test("the team's deployments, newest first; one environment's; none at work once done; another team sees none", async () => {
  const list = await denv("deployment", "list", "--env", "dl/e", "--json");
  assert.equal(list.code, 0, list.stderr);
  const rows = JSON.parse(list.stdout).deployments as { id: string; kind: string; environment: string }[];
  assert.ok(rows.length >= 1 && rows.every((r) => r.environment === "dl/e"), list.stdout);
  assert.equal(rows[0]?.kind, "deploy");
  const table = await denv("deployment", "list");
  assert.match(table.stdout, /^ID\s+KIND\s+STATUS\s+ENVIRONMENT\s+CREATED$/m);
  assert.match(table.stdout, new RegExp(`^${rows[0]?.id}\\s+deploy\\s+succeeded\\s+dl/e\\s+\\d{4}-`, "m"));
  assert.equal((await denv("deployment", "list", "--running")).stdout, "none\n");
  const theirs = await lab.api("GET", "/v1/deployments", undefined, lab.keyB);
  assert.deepEqual(theirs.data.deployments, []);
  assert.equal((await lab.api("GET", "/v1/deployments?env=dl/e", undefined, lab.keyB)).status, 404);
  assert.equal((await lab.api("GET", "/v1/deployments?limit=lots")).status, 400);
});

test("the server's log says at info when each deployment begins and ends, how, and when a host joins", async () => {
  const log = captureServerLog();
  try {
    const made = await lab.api("POST", "/v1/sandboxes", { image: OPSBOX, cmd: ["sleep", "infinity"] });
    assert.equal(made.status, 201, JSON.stringify(made.data));
    const gone = await lab.api("DELETE", `/v1/envs/${made.data.id}`);
    assert.equal(gone.status, 200, JSON.stringify(gone.data));
    const token = (await lab.api("POST", "/v1/hosts/join-token")).data.token as string;
    const joined = await fetch(`${lab.server.url}/v1/hosts/join`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token, name: "logged-host" }),
    });
    assert.equal(joined.status, 201);
    const hostId = ((await joined.json()) as { host_id: string }).host_id;
    const lines = log.lines();
    const said = (msg: string, match: (l: Record<string, unknown>) => boolean) =>
      lines.filter((l) => l.msg === msg && l.level === 30 && match(l));
    const begun = said("deployment begun", (l) => l.environment_id === made.data.id);
    // The one that made it (a deploy of its image, or a fork when it came from a pool), and its destroy.
    assert.deepEqual(
      begun.map((l) => l.kind),
      [begun[0]?.kind === "fork" ? "fork" : "deploy", "destroy"],
      JSON.stringify(begun),
    );
    for (const b of begun) {
      const ended = said("deployment ended", (l) => l.deployment_id === b.deployment_id);
      assert.equal(ended.length, 1, `${b.kind}: ${JSON.stringify(lines.map((l) => l.msg))}`);
      assert.equal(ended[0]?.status, "succeeded");
      assert.equal(typeof ended[0]?.ms, "number");
    }
    assert.equal(said("host joined", (l) => l.host_id === hostId).length, 1);
  } finally {
    log.stop();
  }
});

test("denv ps lists what runs in aligned columns; env destroy takes several, each its own outcome", async () => {
  const made: string[] = [];
  for (const name of ["ps-a", "ps-b"]) {
    const r = await lab.api("POST", "/v1/sandboxes", { image: OPSBOX, cmd: ["sleep", "infinity"], name });
    assert.equal(r.status, 201, JSON.stringify(r.data));
    made.push(r.data.id as string);
  }
  const ps = await denv("ps");
  assert.equal(ps.code, 0, ps.stderr);
  const [header, ...rows] = ps.stdout.trimEnd().split("\n");
  assert.match(
    header ?? "",
    /^ID {2,}PROJECT {2,}NAME {2,}STATUS {2,}VERSION {2,}PARENT {2,}RUNS ON {2,}AGE$/,
  );
  for (const id of made) {
    const row = rows.find((r) => r.startsWith(id)) ?? "";
    assert.match(row, / {2}running {2,}/, ps.stdout);
    // Each column starts where its header does.
    assert.equal(row.indexOf("running"), header?.indexOf("STATUS"), ps.stdout);
  }
  // Two that exist and one that does not: the two go, the third is named with why, exit 1.
  const gone = await denv("env", "destroy", made[0] as string, made[1] as string, "no-such-env");
  assert.equal(gone.code, 1, gone.stdout + gone.stderr);
  const said = gone.stdout.trimEnd().split("\n").sort();
  assert.deepEqual(said.slice(0, 2), made.map((id) => `destroyed ${id}`).sort());
  assert.match(said[2] ?? "", /^no-such-env: not destroyed: no environment no-such-env/);
  for (const id of made) assert.equal((await lab.api("GET", `/v1/envs/${id}`)).status, 404);
  // Destroyed ones run no more: ps shows neither.
  const after = await denv("ps", "--json");
  const ids = (JSON.parse(after.stdout).environments as { id: string }[]).map((e) => e.id);
  for (const id of made) assert.ok(!ids.includes(id));
});

test("denv member: invite someone (the link shown once), they join through it, change their role, remove them", async () => {
  const invited = await denv("member", "invite", "Ana@Example.com", "--role", "member");
  assert.equal(invited.code, 0, invited.stderr);
  const link = /^(http\S+#\/join\?invitation=(\S+))$/m.exec(invited.stdout);
  assert.ok(link, invited.stdout);
  assert.match(invited.stdout, /^invited ana@example\.com as member/);
  const pending = await denv("member", "list");
  assert.match(
    pending.stdout,
    /invited, not yet joined:\nEMAIL {2,}ROLE {2,}EXPIRES {2,}ID\nana@example\.com {2,}member /,
  );
  // They sign up through the link's invitation: a member of this team, not a team of their own.
  const joined = await fetch(`${lab.server.url}/v1/auth/signup`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      email: "ana@example.com",
      password: "a long enough passphrase",
      invitation: decodeURIComponent(link[2] as string),
    }),
  });
  assert.equal(joined.status, 201, await joined.text());
  const listed = JSON.parse((await denv("member", "list", "--json")).stdout) as {
    members: { email: string; role: string }[];
    invitations: unknown[];
  };
  assert.deepEqual(
    listed.members.find((m) => m.email === "ana@example.com"),
    { ...listed.members.find((m) => m.email === "ana@example.com"), role: "member" },
  );
  assert.equal(listed.invitations.length, 0, "the invitation was used");
  const demoted = await denv("member", "role", "ana@example.com", "read-only");
  assert.equal(demoted.stdout, "ana@example.com is read-only\n");
  const wrongRole = await denv("member", "role", "ana@example.com", "owner");
  assert.equal(wrongRole.code, 2);
  assert.match(wrongRole.stderr, /--role owner: one of admin, member, read-only/);
  const removed = await denv("member", "remove", "ana@example.com");
  assert.equal(removed.stdout, "removed ana@example.com\n");
  const gone = await denv("member", "remove", "ana@example.com");
  assert.notEqual(gone.code, 0);
  assert.match(gone.stderr, /no member ana@example\.com in your team/);
});

test("denv port: a URL that reaches a service's port (shown once), listed without its token, revoked", async () => {
  const r = await lab.api("POST", "/v1/sandboxes", {
    image: OPSBOX,
    cmd: ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/etc"],
    name: "port-box",
  });
  assert.equal(r.status, 201, JSON.stringify(r.data));
  const id = r.data.id as string;
  try {
    const made = await denv("port", id, "8000");
    assert.equal(made.code, 0, made.stderr);
    const url = made.stdout.trim();
    assert.match(url, /^http:\/\/\S+$/);
    const page = await waitFor("the server in the sandbox answers through the URL", async () => {
      const res = await fetch(`${url}/hostname`).catch(() => null);
      return res?.status === 200 ? await res.text() : undefined;
    });
    assert.ok(page.trim().length > 0);
    const listed = await denv("port", id);
    assert.match(listed.stdout, /^PORT {2}SERVICE {2}AGE {2,}ID\n8000 {2}\S+ +\d+[smhd] {2,}\S+\n$/);
    assert.ok(!listed.stdout.includes(url), "the URL is shown once, never listed");
    const bad = await denv("port", id, "http");
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /http: a port is a number from 1 to 65535/);
    const revoked = await denv("port", id, "--revoke");
    assert.equal(revoked.stdout, "revoked 1 port URL(s)\n");
    const after = await fetch(`${url}/hostname`);
    assert.equal(after.status, 404);
  } finally {
    await lab.api("DELETE", `/v1/envs/${id}`);
  }
});

test("files a service writes outside its volumes are named after the deploy: the version and its forks do not have them", async () => {
  const compose = `x-denv:
  kind: service
  warm:
    - service: box
      command: "mkdir -p /opt/app && echo 1 > /opt/app/cache.db && echo x > /tmp/scratch"
services:
  box:
    image: ${OPSBOX}
    user: "0:0"
    command: ["sleep", "infinity"]
    volumes: ["data:/data"]
volumes: { data: {} }
`;
  await lab.api("POST", "/v1/projects", { name: "ov", kind: "service", source: "./ov" });
  const put = await lab.api("PUT", "/v1/projects/ov/source", { compose });
  assert.equal(put.status, 200, JSON.stringify(put.data));
  const begun = await lab.api("POST", "/v1/projects/ov/deploy", { env: "alpha" });
  assert.equal(begun.status, 202, JSON.stringify(begun.data));
  // Followed from the CLI, as `denv deploy --wait` follows it.
  const d = await denv("deployment", "follow", begun.data.id as string);
  assert.equal(d.code, 0, d.stdout + d.stderr);
  // The file is named (its folder, and /tmp's run-time scratch, are not); written to /data it would be kept.
  assert.match(
    d.stderr,
    /^warning: box wrote 1 path outside its volumes \(\/opt\/app\/cache\.db\): a version keeps volumes only/m,
  );
  const envs = (await lab.api("GET", "/v1/envs")).data.environments as { id: string; project: string }[];
  const env = envs.find((e) => e.project === "ov");
  assert.ok(env);
  const dep = (await lab.api("GET", `/v1/envs/${env.id}/deployments`)).data.deployments[0];
  const snap = dep.phases.find((p: { name: string }) => p.name === "snapshot").evidence;
  assert.deepEqual(snap.outside_volumes, { box: { paths: 1, examples: ["/opt/app/cache.db"] } });
  await lab.api("DELETE", `/v1/envs/${env.id}`);
});

test("a running deploy cancelled stops before its next phase, removes what it built, and says who; ended ones are not cancelled", async () => {
  const d = await lab.api("POST", "/v1/projects/dl/deploy", { env: "c" });
  assert.equal(d.status, 202, JSON.stringify(d.data));
  const id = d.data.id as string;
  const phaseOf = async (name: string) =>
    ((await lab.api("GET", `/v1/deployments/${id}`)).data.phases as { name: string; status: string }[]).find(
      (p) => p.name === name,
    );
  await waitFor(
    "the deploy waiting for its service's health (the host's start step waits; the health phase is carved from it)",
    async () => (await phaseOf("start"))?.status === "running",
  );
  // Another team's key cannot reach it.
  assert.equal((await lab.api("POST", `/v1/deployments/${id}/cancel`, undefined, lab.keyB)).status, 404);
  const asked = await denv("deployment", "cancel", id, "--no-wait");
  assert.equal(asked.code, 0, asked.stderr);
  assert.match(asked.stdout, new RegExp(`asked deployment ${id} to stop`));
  const marked = (await lab.api("GET", `/v1/deployments/${id}`)).data;
  assert.equal(marked.status, "running", "the phase at work finishes first");
  assert.ok(marked.cancel_requested_by, JSON.stringify(marked));
  // Asking twice answers as the first did.
  assert.equal((await lab.api("POST", `/v1/deployments/${id}/cancel`)).status, 202);
  // The start step ends (the service made healthy); the next phase never begins.
  const stacksBefore = new Set(lab.host.denvd.stacks().map((s) => s.id));
  const building = await waitFor("the deploy's stack", () =>
    lab.host.denvd.stacks().find((s) => s.name.startsWith("dl-c") && s.containers.app),
  );
  await lab.host.denvd.exec(building.id, "app", { command: ["touch", "/tmp/ready"] });
  const followed = await denv("deployment", "follow", id);
  assert.equal(followed.code, 1, followed.stdout);
  const done = (await lab.api("GET", `/v1/deployments/${id}`)).data;
  assert.notEqual(done.status, "succeeded", JSON.stringify(done));
  assert.match(done.reason, new RegExp(`cancelled by ${marked.cancel_requested_by} before \\w+ began`));
  const phases = done.phases as { name: string; status: string; reason: string | null }[];
  assert.equal(phases.find((p) => p.name === "start")?.status, "succeeded");
  const stopped = phases.find((p) => p.status === "failed");
  assert.match(stopped?.reason ?? "", /^cancelled by /);
  assert.ok(
    phases
      .filter((p) => p.name === "snapshot" || p.name === "ingress")
      .every((p) => p.status !== "succeeded"),
    JSON.stringify(phases),
  );
  // What it was building is gone from the host, and the environment kept no version of it.
  assert.ok(stacksBefore.has(building.id));
  await waitFor(
    "the cancelled deploy's stack removed",
    () => !lab.host.denvd.stacks().some((s) => s.id === building.id),
  );
  const env = (await lab.api("GET", "/v1/envs/dl%2Fc")).data;
  assert.equal(env.current_version_id, null, JSON.stringify(env));
  // Ended: nothing to cancel, said as such.
  const late = await lab.api("POST", `/v1/deployments/${id}/cancel`);
  assert.equal(late.status, 409);
  assert.match(late.data.error.message, /has already ended/);
});
