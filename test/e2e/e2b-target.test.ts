/**
 * E2B as a target, as the connect-a-target document has a user reach it: `denv up`, `denv cloud
 * connect e2b`, then its two curl lines (the targets with their rows, a sandbox on e2b), against a
 * local double of E2B's API driven by E2B's official SDK; and what a hosted target refuses, each
 * with its reason, including a provider that answers wrongly and a key it does not take.
 */
import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { type E2bDouble, startE2bDouble } from "../doubles/e2b-double.ts";
import { cliRunner } from "../harness/cli-runner.ts";
import { repoRoot } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

const IMAGE = "127.0.0.1:5000/denv/opsbox:bookworm";
let e2b: E2bDouble;
/** A second endpoint a team may name: one that answers another account's sandbox id. */
let evil: E2bDouble;
let up: ChildProcess;
let dataDir: string;
let server: { url: string; key: string };
let denv: ReturnType<typeof cliRunner>;

async function api(method: string, path: string, body?: unknown) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${server.key}`,
      ...(body ? { "content-type": "application/json" } : {}),
    },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, data: (await res.json()) as any };
}

/** A curl line of the document, run by a shell with the document's variables set. */
async function curl(line: string): Promise<any> {
  const r = await promisify(execFile)("sh", ["-c", line], {
    env: { ...process.env, DENV_SERVER: server.url, DENV_API_KEY: server.key },
    encoding: "utf8",
  });
  return JSON.parse(r.stdout);
}

/** The double connected as `e2b`, for a test run alone (the first test connects it through the CLI). */
async function connectE2b(): Promise<void> {
  if ((await api("GET", "/v1/clouds")).data.clouds.length > 0) return;
  const c = await api("POST", "/v1/clouds", {
    provider: "e2b",
    name: "e2b",
    token: e2b.apiKey,
    api_url: e2b.url,
  });
  assert.equal(c.status, 201, JSON.stringify(c.data));
}

before(async () => {
  e2b = await startE2bDouble({ registry: "127.0.0.1:5000" });
  evil = await startE2bDouble({ registry: "127.0.0.1:5000" });
  dataDir = await mkdtemp(join(tmpdir(), "denv-e2b-up-"));
  up = spawn(
    process.execPath,
    [
      join(repoRoot, "packages/cli/bin/denv.js"),
      "up",
      "--port",
      "0",
      "--data-dir",
      dataDir,
      "--storage",
      "dir",
      "--allow-fetch",
      `${new URL(e2b.url).host},${new URL(evil.url).host}`,
      "--json",
    ],
    {
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, DENV_CONFIG: join(dataDir, "config.json") },
    },
  );
  server = await new Promise((resolve, reject) => {
    let out = "";
    up.stdout?.on("data", (c: Buffer) => {
      out += c.toString();
      const m = /\{[\s\S]*\}/.exec(out);
      if (m) {
        const j = JSON.parse(m[0]);
        resolve({ url: j.server, key: j.api_key });
      }
    });
    up.once("exit", (code) => reject(new Error(`denv up exited ${code}`)));
  });
  denv = cliRunner(() => server);
});

after(async () => {
  if (server)
    for (const e of (await api("GET", "/v1/envs")).data.environments ?? [])
      await api("DELETE", `/v1/envs/${e.id}?wait=true`);
  up?.kill("SIGTERM");
  if (up && up.exitCode === null) await new Promise((r) => up.once("exit", r));
  await e2b?.close();
  await evil?.close();
  await rm(dataDir, { recursive: true, force: true });
});

test("the connect-a-target lines against denv up: connect e2b, its row, a sandbox on it", async () => {
  // A key the provider does not take is refused, and nothing is kept.
  const wrong = await denv(
    "cloud",
    "connect",
    "e2b",
    "--name",
    "e2b",
    "--token",
    "e2b_00",
    "--api-url",
    e2b.url,
  );
  assert.notEqual(wrong.code, 0);
  assert.match(wrong.stderr, /E2B did not accept the key/);
  assert.equal((await api("GET", "/v1/clouds")).data.clouds.length, 0);

  const connected = await denv(
    "cloud",
    "connect",
    "e2b",
    "--name",
    "e2b",
    "--token",
    e2b.apiKey,
    "--api-url",
    e2b.url,
  );
  assert.equal(connected.code, 0, connected.stderr);
  assert.match(connected.stdout, /connected e2b account e2b: target e2b/);
  const clouds = (await api("GET", "/v1/clouds")).data.clouds;
  assert.deepEqual(
    clouds.map((c: any) => [c.name, c.provider]),
    [["e2b", "e2b"]],
  );
  assert.ok(!JSON.stringify(clouds).includes(e2b.apiKey), "the key is never shown");

  const rows = await curl('curl -s $DENV_SERVER/v1/targets -H "Authorization: Bearer $DENV_API_KEY"');
  assert.deepEqual(
    rows.targets.map((t: any) => t.name),
    ["denvd", "e2b"],
  );
  const row = rows.targets[1];
  assert.equal(row.type, "e2b");
  assert.equal(row.capabilities.multi_service_stack, "no (one VM per sandbox)");
  assert.equal(
    row.capabilities.egress_deny_verified,
    "provider network config (allow_internet_access: false), not probed",
  );
  assert.deepEqual(row.supported, ["consistent_snapshot", "fork", "egress_deny_verified", "caps_enforced"]);
  assert.match(row.note, /not against the live E2B/);

  // The document's image is python:3.12-slim; this machine reaches no public registry.
  const made = await curl(
    `curl -s -X POST $DENV_SERVER/v1/targets/e2b/sandboxes -H "Authorization: Bearer $DENV_API_KEY" \\
  -H 'Content-Type: application/json' -d '{"image":"${IMAGE}","cmd":["sleep","infinity"]}'`,
  );
  assert.equal(made.target, "e2b", JSON.stringify(made));
  assert.deepEqual(made.services, ["main"]);
  assert.equal(e2b.sandboxes().length, 1, "one sandbox at the provider");
  assert.equal(e2b.sandboxes()[0]?.internet, false, "egress denied by default, with the provider's setting");
  // Its command runs, as E2B's default user, not root.
  // Started in the background (the SDK's commands.run): on a busy machine it may show a moment
  // after the create answered, so the process list is read until it does.
  const ps = await waitFor("the background process to show", async () => {
    const answer = await api("POST", `/v1/envs/${made.id}/exec`, {
      command:
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done | grep -c '^sleep infinity'; id -un",
    });
    return answer.status !== 200 || answer.data.stdout !== "0\nuser\n" ? answer : undefined;
  });
  assert.equal(ps.status, 200, JSON.stringify(ps.data));
  assert.equal(ps.data.stdout, "1\nuser\n");
  // The CLI reaches it like any environment.
  const viaCli = await denv("exec", made.id, "--", "sh", "-c", "echo from-cli; exit 4");
  assert.equal(viaCli.code, 4, viaCli.stderr);
  assert.equal(viaCli.stdout, "from-cli\n");

  // Disconnecting the provider while it runs a sandbox would strand it.
  const strand = await api("DELETE", "/v1/clouds/e2b");
  assert.equal(strand.status, 409);
  assert.match(strand.data.error.message, /still runs/);
  const gone = await api("DELETE", `/v1/envs/${made.id}?wait=true`);
  assert.equal(gone.data.status, "succeeded", JSON.stringify(gone.data));
  assert.equal(e2b.sandboxes().length, 0, "the provider's sandbox is killed");
  assert.ok(e2b.seen.some((s) => /^DELETE \/sandboxes\//.test(s)));
});

test("a hosted target refuses what it cannot do, saying why; a provider answering wrongly leaves nothing", async () => {
  await connectE2b();
  // A cloud may not take the sidecar hosts' target name, nor an endpoint with credentials in it,
  // nor one the server is not allowed to fetch from.
  const denvdName = await api("POST", "/v1/clouds", {
    provider: "e2b",
    name: "denvd",
    token: e2b.apiKey,
    api_url: e2b.url,
  });
  assert.equal(denvdName.status, 400);
  const creds = await api("POST", "/v1/clouds", {
    provider: "e2b",
    name: "e2b-2",
    token: e2b.apiKey,
    api_url: e2b.url.replace("http://", "http://me:pw@"),
  });
  assert.equal(creds.status, 400);
  assert.match(creds.data.error.message, /credentials/);
  const elsewhere = await api("POST", "/v1/clouds", {
    provider: "e2b",
    name: "e2b-3",
    token: e2b.apiKey,
    api_url: "http://127.0.0.1:9/",
  });
  assert.equal(elsewhere.status, 403, JSON.stringify(elsewhere.data));
  assert.match(elsewhere.data.error.message, /not a host this server fetches from/);

  // The provider fails the create (a 500 whose body is not JSON): an error naming the target,
  // and no environment is left behind.
  const before = (await api("GET", "/v1/envs")).data.environments.length;
  e2b.fault("POST /v2/sandboxes", 500, "<html>upstream exploded</html>");
  const failed = await api("POST", "/v1/targets/e2b/sandboxes", { image: IMAGE });
  assert.ok(failed.status >= 400, JSON.stringify(failed.data));
  assert.match(failed.data.error.message, /on target e2b \(E2B\) failed/);
  assert.equal((await api("GET", "/v1/envs")).data.environments.length, before);

  // The provider answers an id that is a path: refused, nothing kept.
  e2b.nextSandboxId("../../v2/sandboxes");
  const odd = await api("POST", "/v1/targets/e2b/sandboxes", { image: IMAGE });
  assert.equal(odd.status, 503, JSON.stringify(odd.data));
  assert.match(odd.data.error.message, /answered a sandbox id that is not one/);
  assert.equal((await api("GET", "/v1/envs")).data.environments.length, before);

  const made = await api("POST", "/v1/targets/e2b/sandboxes", { image: IMAGE, name: "hosted-one" });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  const id = made.data.id as string;
  // What the target cannot do at all is not_supported (501), naming it; a bad request stays a 4xx.
  const refusals: [string, string, unknown, number, RegExp][] = [
    ["POST", `/v1/envs/${id}/ports/8080`, {}, 501, /runs on target e2b, a hosted provider/],
    ["POST", `/v1/envs/${id}/services/main/stop`, {}, 501, /one VM with one service/],
    [
      "POST",
      `/v1/envs/${id}/rollback`,
      { version: "ver_000000000000" },
      501,
      /target e2b.*a rollback needs a denvd host/,
    ],
    ["POST", `/v1/envs/${id}/verify`, {}, 501, /target e2b.*verify needs a denvd host/],
    [
      "GET",
      `/v1/envs/${id}/diff`,
      undefined,
      501,
      /target e2b.*a diff \(of its datasets\) needs a denvd host/,
    ],
    [
      "POST",
      `/v1/envs/${id}/exec`,
      { command: "true", service: "db" },
      404,
      /has no service "db"; it has main/,
    ],
    [
      "POST",
      "/v1/targets/e2b/sandboxes",
      { from_version: "ver_000000000000" },
      404,
      /no version ver_000000000000/,
    ],
    ["POST", "/v1/targets/e2b/sandboxes", { image: IMAGE, name: "hosted-one" }, 409, /already exists/],
  ];
  for (const [method, path, body, status, why] of refusals) {
    const r = await api(method, path, body);
    assert.equal(r.status, status, `${method} ${path}: ${r.status} ${JSON.stringify(r.data)}`);
    if (status === 501) assert.equal(r.data.error.code, "not_supported", path);
    assert.match(r.data.error.message, why, path);
  }
  // Files go both ways through the provider, as the sandbox's user.
  const put = await api("POST", `/v1/envs/${id}/files/mkdir`, { path: "/work/deep/er" });
  assert.equal(put.status, 200, JSON.stringify(put.data));
  const listed = await api("GET", `/v1/envs/${id}/files/list?path=${encodeURIComponent("/work")}&depth=2`);
  assert.deepEqual(
    listed.data.entries.map((e: any) => [e.path, e.type, e.owner]),
    [
      ["/work/deep", "directory", "user"],
      ["/work/deep/er", "directory", "user"],
    ],
  );
  const missing = await api("GET", `/v1/envs/${id}/files/stat?path=${encodeURIComponent("/work/nothing")}`);
  assert.equal(missing.status, 404);
  assert.equal((await api("DELETE", `/v1/envs/${id}?wait=true`)).data.status, "succeeded");
});

/** A command's stdout in an environment, as the API runs it. */
async function run(envId: string, command: string): Promise<string> {
  const r = await api("POST", `/v1/envs/${envId}/exec`, { command });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  assert.equal(r.data.exit_code, 0, JSON.stringify(r.data));
  return r.data.stdout;
}

test("a sandbox on E2B is snapshotted there as a version, and forked from it; what needs a denvd host is refused, saying so", async () => {
  await connectE2b();
  const made = await api("POST", "/v1/targets/e2b/sandboxes", { image: IMAGE, name: "snap-src" });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  const src = made.data.id as string;
  await run(src, "echo before > /work/state.txt");

  // A provider answering a snapshot id that is a path: the snapshot fails and no version is kept.
  const versionsBefore = (await api("GET", "/v1/versions")).data.versions.length;
  e2b.nextSnapshotId("../../templates/other");
  const odd = await api("POST", `/v1/envs/${src}/snapshot?wait=true`);
  assert.equal(odd.data.status, "failed", JSON.stringify(odd.data));
  assert.match(odd.data.reason, /answered a snapshot id that is not one/);
  assert.equal((await api("GET", "/v1/versions")).data.versions.length, versionsBefore);

  const snap = await api("POST", `/v1/envs/${src}/snapshot?wait=true`);
  assert.equal(snap.data.status, "succeeded", JSON.stringify(snap.data));
  const versionId = (await api("GET", `/v1/envs/${src}`)).data.current_version_id as string;
  const version = (await api("GET", `/v1/versions/${versionId}`)).data;
  assert.equal(version.target, "e2b");
  assert.equal(version.host_id, null);
  assert.equal(version.evidence.provider, "E2B");
  assert.ok(
    e2b.snapshots().some((id) => version.evidence.snapshot_ref.startsWith(id)),
    JSON.stringify(version),
  );
  await run(src, "echo after > /work/state.txt");

  // Forks, by each way the API makes them: each a new sandbox on e2b holding the snapshot's files.
  const one = await api("POST", "/v1/sandboxes", { from_version: versionId, name: "fork-a" });
  assert.equal(one.status, 201, JSON.stringify(one.data));
  assert.equal(one.data.target, "e2b");
  assert.equal(one.data.parent_version_id, versionId);
  assert.deepEqual(one.data.services, ["main"]);
  const fan = await api("POST", `/v1/versions/${versionId}/forks`, { count: 2, name_prefix: "fan" });
  assert.equal(fan.status, 200, JSON.stringify(fan.data));
  assert.equal(fan.data.created, 2, JSON.stringify(fan.data));
  const ofEnv = await api("POST", `/v1/envs/${one.data.id}/fork`, { name: "fork-of-fork" });
  assert.equal(ofEnv.status, 201, JSON.stringify(ofEnv.data));
  const forks = [one.data.id, ...fan.data.forks.map((f: any) => f.environment.id), ofEnv.data.id];
  for (const f of forks) assert.equal(await run(f, "cat /work/state.txt"), "before\n");
  assert.equal(await run(src, "cat /work/state.txt"), "after\n");
  // The fork is its own VM: what it writes stays in it.
  await run(one.data.id, "echo mine > /work/state.txt");
  assert.equal(await run(forks[1], "cat /work/state.txt"), "before\n");

  // What only a denvd host does with a version is refused, naming where the version lives.
  const refusals: [string, string, unknown][] = [
    ["PUT", `/v1/pools/${versionId}`, { size: 1 }],
    ["POST", `/v1/versions/${versionId}/replays`, {}],
    ["GET", `/v1/versions/${versionId}/datasheet`, undefined],
    ["POST", "/v1/projects/_sandboxes/promote", { version: versionId, to: "prod" }],
  ];
  for (const [method, path, body] of refusals) {
    const r = await api(method, path, body);
    assert.equal(r.status, 501, `${method} ${path}: ${r.status} ${JSON.stringify(r.data)}`);
    assert.equal(r.data.error.code, "not_supported", path);
    assert.match(r.data.error.message, /is a snapshot at target e2b, a hosted provider/, path);
  }
  const exported = await denv("export", "--harbor", versionId, join(dataDir, "export-out"));
  assert.notEqual(exported.code, 0);
  assert.match(
    exported.stderr,
    /is a snapshot at target e2b, a hosted provider: export needs a version made on a denvd host/,
  );
  // A version at E2B is not forked on another target.
  const elsewhere = await api("POST", "/v1/targets/denvd/sandboxes", { from_version: versionId });
  assert.equal(elsewhere.status, 400, JSON.stringify(elsewhere.data));

  // In use, it stays; once nothing uses it, deleting it deletes E2B's snapshot too.
  assert.equal((await api("DELETE", `/v1/versions/${versionId}`)).status, 409);
  for (const e of [...forks, src]) await api("DELETE", `/v1/envs/${e}?wait=true`);
  const del = await api("DELETE", `/v1/versions/${versionId}`);
  assert.ok(del.status < 300, JSON.stringify(del.data));
  assert.ok(!e2b.snapshots().some((id) => version.evidence.snapshot_ref.startsWith(id)));
});

test("a project pinned to a hosted target deploys its one service there as a sandbox, with its phases; several services are refused at prepare", async () => {
  await connectE2b();
  // (The sandbox whose odd id the driver refused above is still at the double: counted from here.)
  const atProvider = e2b.sandboxes().length;
  const two = `x-denv: { kind: service }\nservices:\n  web: { image: ${IMAGE}, command: ["sleep", "infinity"] }\n  db: { image: ${IMAGE}, command: ["sleep", "infinity"] }\n`;
  const one = `x-denv: { kind: service }\nservices:\n  web: { image: ${IMAGE}, command: ["sleep", "infinity"] }\n`;
  const project = async (name: string, compose: string) => {
    const made = await api("POST", "/v1/projects", {
      name,
      kind: "service",
      source: `./${name}`,
      pinned_target: "e2b",
    });
    assert.equal(made.status, 201, JSON.stringify(made.data));
    assert.equal((await api("PUT", `/v1/projects/${name}/source`, { compose })).status, 200);
  };
  const phasesOf = (d: any) => Object.fromEntries(d.phases.map((p: any) => [p.name, p]));

  await project("pinned-two", two);
  const refused = await api("POST", "/v1/projects/pinned-two/deploy?wait=true", { env: "alpha" });
  assert.equal(refused.data.status, "rolled_back", JSON.stringify(refused.data).slice(0, 400));
  const why =
    /pinned to e2b, a hosted e2b target, which runs one container per environment: this compose file has 2 services \(web, db\)/;
  assert.match(refused.data.reason, why);
  // Placed on the hosted target; no machine made or joined; prepare says why.
  let phases = phasesOf(refused.data);
  assert.equal(phases.place.status, "succeeded");
  assert.equal(phases.place.evidence.target.name, "e2b");
  assert.equal(phases.provision.status, "skipped");
  assert.equal(phases.join.status, "skipped");
  assert.equal(phases.prepare.status, "failed");
  assert.match(phases.prepare.reason, why);
  assert.equal(phases.start.status, "skipped");
  assert.equal(e2b.sandboxes().length, atProvider, "nothing was made at the provider");

  // One service: its sandbox made from the pinned image, its command started, its healthcheck run
  // until it passes, the warm command run, and E2B's snapshot kept as the version.
  const served = (word: string) =>
    [
      "x-denv:",
      "  kind: service",
      '  warm: [{ service: web, command: "echo warmed > /work/warm.txt" }]',
      "services:",
      "  web:",
      `    image: ${IMAGE}`,
      `    command: ["sh", "-c", "sleep 1; echo ${word} > /work/served.txt; exec sleep infinity"]`,
      "    environment: { MODE: deployed }",
      '    healthcheck: { test: ["CMD-SHELL", "test -s /work/served.txt"], interval: 1s, retries: 30 }',
      "",
    ].join("\n");
  await project("pinned-one", served("first"));
  const d = await api("POST", "/v1/projects/pinned-one/deploy?wait=true", { env: "alpha" });
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data).slice(0, 800));
  phases = phasesOf(d.data);
  assert.equal(phases.prepare.evidence.target.name, "e2b");
  assert.match(phases.prepare.evidence.image, /@sha256:[0-9a-f]{64}$/, "the image as resolve pinned it");
  assert.equal(phases.start.status, "succeeded");
  assert.equal(phases.health.status, "succeeded");
  assert.ok(phases.health.evidence.attempts >= 1);
  assert.equal(phases.warm.status, "succeeded");
  assert.equal(phases.snapshot.status, "succeeded");
  const env = (await api("GET", `/v1/envs/${d.data.environment_id}`)).data;
  assert.equal(env.target, "e2b");
  assert.equal(env.status, "running");
  assert.equal(
    await run(env.id, "cat /work/served.txt /work/warm.txt; echo $MODE"),
    "first\nwarmed\ndeployed\n",
  );
  const version = (await api("GET", `/v1/versions/${env.current_version_id}`)).data;
  assert.equal(version.target, "e2b");
  const firstSandbox = phases.prepare.evidence.sandbox_id as string;

  // A second deploy replaces the sandbox only once the new one is whole; the old one is ended.
  assert.equal(
    (await api("PUT", "/v1/projects/pinned-one/source", { compose: served("second") })).status,
    200,
  );
  const again = await api("POST", "/v1/projects/pinned-one/deploy?wait=true", { env: "alpha" });
  assert.equal(again.data.status, "succeeded", JSON.stringify(again.data).slice(0, 800));
  assert.equal(await run(env.id, "cat /work/served.txt"), "second\n");
  assert.ok(!e2b.sandboxes().some((s) => s.sandboxID === firstSandbox), "the first sandbox was ended");
  // A healthcheck that never passes rolls the deploy back: the new sandbox goes, the old one serves.
  const live = e2b.sandboxes().length;
  assert.equal(
    (
      await api("PUT", "/v1/projects/pinned-one/source", {
        compose: served("third")
          .replace("test -s /work/served.txt", "exit 1")
          .replace("retries: 30", "retries: 1"),
      })
    ).status,
    200,
  );
  const sick = await api("POST", "/v1/projects/pinned-one/deploy?wait=true", { env: "alpha" });
  assert.equal(sick.data.status, "rolled_back", JSON.stringify(sick.data).slice(0, 800));
  assert.match(sick.data.reason, /service web was not healthy after \d+ checks/);
  assert.equal(
    await run(env.id, "cat /work/served.txt"),
    "second\n",
    "the environment still serves what it did",
  );
  assert.equal(e2b.sandboxes().length, live, "the sick sandbox was ended");

  // Not pinned, it goes to the connected host, not to the hosted provider.
  assert.equal(
    (await api("POST", "/v1/projects", { name: "free", kind: "service", source: "./free" })).status,
    201,
  );
  assert.equal((await api("PUT", "/v1/projects/free/source", { compose: one })).status, 200);
  const free = await api("POST", "/v1/projects/free/deploy?wait=true", { env: "alpha" });
  assert.equal(free.data.status, "succeeded", JSON.stringify(free.data).slice(0, 400));
  assert.equal((await api("GET", `/v1/envs/${free.data.environment_id}`)).data.target, "denvd");
});

test("an environment moves between a hosted target and the team's host with its file's x-denv.target, what served it before ending", async () => {
  await connectE2b();
  const compose = (target: string | null) =>
    [
      `x-denv: { kind: service${target ? `, target: ${target}` : ""} }`,
      "services:",
      `  web: { image: ${IMAGE}, command: ["sleep", "infinity"] }`,
      "",
    ].join("\n");
  assert.equal(
    (await api("POST", "/v1/projects", { name: "moving", kind: "service", source: "./moving" })).status,
    201,
  );
  const deploy = async (target: string | null) => {
    assert.equal((await api("PUT", "/v1/projects/moving/source", { compose: compose(target) })).status, 200);
    const d = await api("POST", "/v1/projects/moving/deploy?wait=true", { env: "alpha" });
    assert.equal(d.data.status, "succeeded", JSON.stringify(d.data).slice(0, 600));
    return d.data;
  };
  const first = await deploy("e2b");
  const onE2b = (await api("GET", `/v1/envs/${first.environment_id}`)).data;
  assert.equal(onE2b.target, "e2b");
  const sandboxId = first.phases.find((p: any) => p.name === "prepare").evidence.sandbox_id as string;
  assert.ok(e2b.sandboxes().some((s) => s.sandboxID === sandboxId));
  // To the team's host: the sandbox at E2B ends once the host's stack serves.
  await deploy(null);
  const onHost = (await api("GET", `/v1/envs/${first.environment_id}`)).data;
  assert.equal(onHost.target, "denvd");
  assert.ok(onHost.host_id, JSON.stringify(onHost));
  assert.ok(!e2b.sandboxes().some((s) => s.sandboxID === sandboxId), "the E2B sandbox was ended");
  assert.equal(await run(first.environment_id, "echo on the host"), "on the host\n");
  // And back: E2B serves it again.
  await deploy("e2b");
  const back = (await api("GET", `/v1/envs/${first.environment_id}`)).data;
  assert.deepEqual([back.target, back.host_id], ["e2b", null]);
  assert.equal(await run(first.environment_id, "echo at e2b"), "at e2b\n");
});

test("an endpoint a team names cannot hand it another account's sandbox: each is reached through its own account", async () => {
  await connectE2b();
  const real = await api("POST", "/v1/targets/e2b/sandboxes", {
    image: IMAGE,
    env: { SECRET: "of-the-first-account" },
  });
  assert.equal(real.status, 201, JSON.stringify(real.data));
  // Reached once, so this server holds a connection to it.
  assert.equal(
    (await api("POST", `/v1/envs/${real.data.id}/exec`, { command: "echo $SECRET" })).data.stdout,
    "of-the-first-account\n",
  );
  // A second endpoint that answers the first sandbox's id for a sandbox of its own.
  {
    const byId = e2b.sandboxes().find((x) => x.envs.SECRET)?.sandboxID as string;
    evil.nextSandboxId(byId);
    const c = await api("POST", "/v1/clouds", {
      provider: "e2b",
      name: "other",
      token: evil.apiKey,
      api_url: evil.url,
    });
    assert.equal(c.status, 201, JSON.stringify(c.data));
    const twin = await api("POST", "/v1/targets/other/sandboxes", { image: IMAGE });
    assert.equal(twin.status, 201, JSON.stringify(twin.data));
    // The same id, another account: the command runs where that account's endpoint says.
    const seen = await api("POST", `/v1/envs/${twin.data.id}/exec`, { command: 'echo "[$SECRET]"' });
    assert.equal(seen.data.stdout, "[]\n", "the first account's sandbox was not reached");
    // Nor does the first account's environment now reach the second endpoint's sandbox.
    const mine = await api("POST", `/v1/envs/${real.data.id}/exec`, { command: 'echo "[$SECRET]"' });
    assert.equal(mine.data.stdout, "[of-the-first-account]\n", "still its own sandbox");
    assert.equal((await api("DELETE", `/v1/envs/${twin.data.id}?wait=true`)).data.status, "succeeded");
    assert.equal((await api("DELETE", "/v1/clouds/other")).status, 200);
  }
  // The first account's sandbox is untouched.
  assert.equal(
    (await api("POST", `/v1/envs/${real.data.id}/exec`, { command: "echo $SECRET" })).data.stdout,
    "of-the-first-account\n",
  );
  assert.equal((await api("DELETE", `/v1/envs/${real.data.id}?wait=true`)).data.status, "succeeded");
});
