/**
 * Live versions through the API and the CLI (issue 71): `x-denv.live: true` makes a deploy's
 * version live, a fork through the API continues the parent's process, `denv fork --cold` starts it
 * afresh, `denv snapshot --live` takes another and says which services' processes it kept, and a
 * bad `--live` value or a live snapshot of a hosted sandbox is refused saying why. Another team
 * cannot snapshot or fork the environment. Verify of a live environment grades a fork that keeps a
 * simulator's memory, while the agent's own service starts afresh there.
 *
 * The ticker holds a token it drew at its start in memory only and writes it with its count every
 * tick: a fork whose file carries the parent's token runs the parent's process image.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { cliRunner } from "../harness/cli-runner.ts";
import { keyWithRole, type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
const TICKER =
  't=$(cat /proc/sys/kernel/random/uuid); i=0; while :; do i=$((i+1)); echo "$t $i" > /srv/count.new; mv /srv/count.new /srv/count; sleep 0.1; done';
const COMPOSE = `x-denv: { kind: service, live: true }
services:
  ticker:
    image: ${OPSBOX}
    command: ["sh", "-c", ${JSON.stringify(TICKER.replaceAll("$", "$$$$"))}]
`;

let lab: Lab;
let cli: ReturnType<typeof cliRunner>;

async function token(env: string): Promise<string> {
  const r = await lab.api("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, {
    service: "ticker",
    command: ["cat", "/srv/count"],
  });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  return String(r.data.stdout).split(" ")[0] ?? "";
}

before(async () => {
  lab = await openLab();
  cli = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));
  await lab.api("POST", "/v1/projects", { name: "live", kind: "service", source: "./live" });
  const put = await lab.api("PUT", "/v1/projects/live/source", { compose: COMPOSE });
  assert.equal(put.status, 200, JSON.stringify(put.data));
  const d = await lab.api("POST", "/v1/projects/live/deploy?wait=true", { env: "alpha" });
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data));
  const snap = d.data.phases.find((p: { name: string }) => p.name === "snapshot");
  assert.ok(snap.evidence.live?.services?.ticker, JSON.stringify(snap.evidence));
});

after(async () => {
  await lab?.close();
});

test("a fork of a deploy's live version continues the parent's process; --cold starts it afresh", async () => {
  const parent = await waitFor("the ticker's first tick", async () => {
    const t = await token("live/alpha");
    return /^[0-9a-f-]{36}$/.test(t) ? t : null;
  });
  const f = await lab.api("POST", "/v1/envs/live%2Falpha/fork", { name: "warm-1" });
  assert.equal(f.status, 201, JSON.stringify(f.data));
  // The token the parent drew (in memory before its first tick, whenever the deploy's version was taken).
  await waitFor("the fork's ticker to write", async () => (await token("live/warm-1")) !== "");
  assert.equal(await token("live/warm-1"), parent);

  const cold = await cli("fork", "--name", "cold-1", "--cold", "live/alpha");
  assert.equal(cold.code, 0, cold.stderr);
  await waitFor("the cold fork's ticker to draw its own token", async () => {
    const t = await token("live/cold-1");
    return /^[0-9a-f-]{36}$/.test(t) && t !== parent;
  });
});

test("denv snapshot --live says whose processes it kept; a bad mode is refused before anything runs", async () => {
  const bad = await cli("snapshot", "--live=sometimes", "live/alpha");
  assert.equal(bad.code, 2, bad.stdout + bad.stderr);
  assert.match(bad.stderr, /--live takes no value or best-effort, not "sometimes"/);
  const raw = await lab.api("POST", "/v1/envs/live%2Falpha/snapshot", { live: "always" });
  assert.equal(raw.status, 400, JSON.stringify(raw.data));
  assert.match(raw.data.error.message, /live/);

  const r = await cli("snapshot", "--live", "live/alpha");
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /version ver_[0-9a-f]{12} \(frozen \d+ ms; processes of ticker\)/);
  // The version's data sheet lists its processes with their sizes.
  const version = /version (ver_[0-9a-f]{12})/.exec(r.stdout)?.[1] as string;
  const sheet = await lab.api("GET", `/v1/versions/${version}/datasheet`);
  assert.equal(sheet.status, 200, JSON.stringify(sheet.data));
  assert.ok(sheet.data.live.services.ticker.checkpoint_bytes > 0, JSON.stringify(sheet.data.live));
  assert.deepEqual(sheet.data.live.skipped, {});
  const md = await cli("datasheet", `live@${version}`);
  assert.equal(md.code, 0, md.stderr);
  assert.match(md.stdout, /## Processes \(a live version\)\n\n\| service \| checkpoint \| layer \| dump \|/);
  assert.match(md.stdout, /\| ticker \| [\d.]+ (KiB|MiB|B) \|/);
});

test("another team can neither snapshot nor fork the environment", async () => {
  const snap = await lab.api("POST", "/v1/envs/live%2Falpha/snapshot", { live: true }, lab.keyB);
  assert.equal(snap.status, 404, JSON.stringify(snap.data));
  const fork = await lab.api("POST", "/v1/envs/live%2Falpha/fork", { name: "stolen" }, lab.keyB);
  assert.equal(fork.status, 404, JSON.stringify(fork.data));
});

test("denv env pause keeps memory, exec meanwhile is told to resume, and resume carries on the same process", async () => {
  const before = await token("live/alpha");
  const stolen = await lab.api("POST", "/v1/envs/live%2Falpha/pause", undefined, lab.keyB);
  assert.equal(stolen.status, 404, JSON.stringify(stolen.data));
  const p = await cli("env", "pause", "live/alpha");
  assert.equal(p.code, 0, p.stderr);
  assert.match(p.stdout, /paused live\/alpha with its memory: paused/);
  const r = await lab.api("POST", "/v1/envs/live%2Falpha/exec", { service: "ticker", command: ["true"] });
  assert.equal(r.status, 409, JSON.stringify(r.data));
  assert.match(r.data.error.message, /paused with its memory: resume it/);
  const again = await lab.api("POST", "/v1/envs/live%2Falpha/pause");
  assert.equal(again.status, 409, JSON.stringify(again.data));

  const res = await cli("env", "resume", "live/alpha");
  assert.equal(res.code, 0, res.stderr);
  assert.match(res.stdout, /resumed live\/alpha: running/);
  assert.equal(await token("live/alpha"), before, "the same process carries on");
});

test("a paused environment can be rolled back instead of resumed: it runs its version afresh", async () => {
  const before = await token("live/alpha");
  const p = await lab.api("POST", "/v1/envs/live%2Falpha/pause");
  assert.equal(p.status, 200, JSON.stringify(p.data));
  assert.equal(p.data.status, "paused");
  const r = await lab.api("POST", "/v1/envs/live%2Falpha/rollback?wait=true", {
    version: p.data.current_version_id,
  });
  assert.equal(r.data.status, "succeeded", JSON.stringify(r.data));
  const e = await lab.api("GET", "/v1/envs/live%2Falpha");
  assert.equal(e.data.status, "running");
  // Rolled back, not resumed: the ticker started again from the version's disk, with a token of its own.
  await waitFor("the restarted ticker's own token", async () => {
    const t = await token("live/alpha");
    return /^[0-9a-f-]{36}$/.test(t) && t !== before;
  });
});

/** A simulator whose score lives in its memory alone: "add N" adds, "score" answers it. */
const SIM = `import socket, threading
score = 0
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 7000)); s.listen()
def serve(c):
    global score
    f = c.makefile("rwb", buffering=0)
    for line in f:
        word, _, n = line.decode().strip().partition(" ")
        if word == "add": score += int(n)
        f.write(f"{score}\\n".encode())
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()`;
const ASK = (what: string, host: string) =>
  `import socket; s = socket.create_connection(("${host}", 7000)); s.sendall(b"${what}\\n"); print(s.makefile().readline().strip())`;

test("verify of a live environment grades a fork that keeps the simulator's memory, never the agent's processes", async () => {
  const compose = `x-denv:
  kind: rl-environment
  live: best-effort
  agent: { service: box }
  verifier:
    service: sim
    command: ["python3", "-c", ${JSON.stringify(ASK("score", "127.0.0.1"))}]
    timeout: 30s
services:
  sim:
    image: ${OPSBOX}
    command: ["python3", "-c", ${JSON.stringify(SIM)}]
  box:
    image: ${OPSBOX}
    user: "1000:1000"
    command: ["sleep", "infinity"]
`;
  await lab.api("POST", "/v1/projects", { name: "sim", kind: "rl-environment", source: "./sim" });
  const put = await lab.api("PUT", "/v1/projects/sim/source", { compose });
  assert.equal(put.status, 200, JSON.stringify(put.data));
  const d = await lab.api("POST", "/v1/projects/sim/deploy?wait=true", { env: "base" });
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data));
  const version = d.data.phases.find((p: { name: string }) => p.name === "verdict").evidence.version_id;
  const sb = await lab.api("POST", "/v1/sandboxes", { from_version: version });
  assert.equal(sb.status, 201, JSON.stringify(sb.data));
  // The agent scores 7 in the simulator's memory (nothing of it on any disk).
  const play = await waitFor("the simulator to answer", async () => {
    const r = await lab.api("POST", `/v1/envs/${sb.data.id}/exec`, {
      service: "box",
      command: ["python3", "-c", ASK("add 7", "sim")],
    });
    return r.data.exit_code === 0 ? r.data : null;
  });
  assert.equal(String(play.stdout).trim(), "7");

  const v = await lab.api("POST", `/v1/envs/${sb.data.id}/verify`, {});
  const phase = (n: string) => v.data.phases.find((p: { name: string }) => p.name === n);
  assert.equal(v.data.status, "succeeded", JSON.stringify(v.data));
  // The grading fork restored the simulator (its 7 came from memory) and started the agent's
  // service afresh: the agent's frozen processes were never taken into the version.
  assert.equal(phase("verdict")?.evidence?.reward, 7, JSON.stringify(phase("grade")?.evidence));
  const snap = phase("snapshot")?.evidence;
  assert.deepEqual(Object.keys(snap?.live?.services ?? {}), ["sim"], JSON.stringify(snap?.live));
  assert.match(snap?.live?.skipped?.box ?? "", /frozen for a verify/);
  assert.deepEqual(phase("clone")?.evidence?.live?.restored, ["sim"]);
});

test("x-denv.idle_pause_s pauses an idle environment with its memory; the next exec or port URL request resumes it (a key that may only read is told why), and a pause by hand stays", async () => {
  const compose = `x-denv: { kind: service, idle_pause_s: 60 }
services:
  ticker:
    image: ${OPSBOX}
    command: ["sh", "-c", ${JSON.stringify(TICKER.replaceAll("$", "$$$$"))}]
  web:
    image: ${OPSBOX}
    command: ["python3", "-m", "http.server", "8000", "--directory", "/etc"]
`;
  await lab.api("POST", "/v1/projects", { name: "idle", kind: "service", source: "./idle" });
  const put = await lab.api("PUT", "/v1/projects/idle/source", { compose });
  assert.equal(put.status, 200, JSON.stringify(put.data));
  const d = await lab.api("POST", "/v1/projects/idle/deploy?wait=true", { env: "main" });
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data));
  const status = async () => (await lab.api("GET", "/v1/envs/idle%2Fmain")).data.status as string;
  const drawn = await waitFor("the ticker's first tick", async () => {
    const t = await token("idle/main");
    return /^[0-9a-f-]{36}$/.test(t) ? t : null;
  });
  const { idle } = lab.server.deployer;
  // The timer is driven here: half a minute on, nothing; past the minute, it pauses.
  assert.equal(await idle.sweep(Date.now() + 30_000), 0);
  assert.equal(await status(), "running");
  assert.equal(await idle.sweep(Date.now() + 61_000), 1);
  assert.equal(await status(), "paused");
  // A key that may only read is told why, and wakes nothing.
  const reader = await lab.api(
    "GET",
    "/v1/envs/idle%2Fmain/files?service=ticker&path=/srv/count",
    undefined,
    await keyWithRole(lab, "read-only", "denv"),
  );
  assert.equal(reader.status, 409, JSON.stringify(reader.data));
  assert.match(
    reader.data.error.message,
    /paused while idle: a request from a key that may change it resumes it/,
  );
  assert.equal(await status(), "paused");
  // An exec resumes it first: the same process (its token), carrying on.
  assert.equal(await token("idle/main"), drawn);
  assert.equal(await status(), "running");

  // A pause asked for by hand is not undone by a request.
  assert.equal((await lab.api("POST", "/v1/envs/idle%2Fmain/pause")).status, 200);
  const refused = await lab.api("POST", "/v1/envs/idle%2Fmain/exec", {
    service: "ticker",
    command: ["true"],
  });
  assert.equal(refused.status, 409, JSON.stringify(refused.data));
  assert.match(refused.data.error.message, /paused with its memory: resume it/);
  assert.equal((await lab.api("POST", "/v1/envs/idle%2Fmain/resume")).status, 200);

  // A request through a port URL resumes it too.
  const minted = await lab.api("POST", "/v1/envs/idle%2Fmain/ports/8000", { service: "web" });
  assert.equal(minted.status, 201, JSON.stringify(minted.data));
  await waitFor("the web service to answer", async () => (await fetch(`${minted.data.url}/hostname`)).ok);
  assert.equal(await idle.sweep(Date.now() + 61_000), 1);
  assert.equal(await status(), "paused");
  const page = await fetch(`${minted.data.url}/hostname`);
  assert.equal(page.status, 200, await page.text());
  assert.equal(await status(), "running");
  assert.equal(await token("idle/main"), drawn, "still the same process");
  // Each request counted: right after them, the timer has not run out.
  assert.equal(await idle.sweep(Date.now() + 30_000), 0);
});
