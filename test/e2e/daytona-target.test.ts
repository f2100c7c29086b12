/**
 * Daytona as a target, as the connect-a-target document has a user reach it: `denv cloud connect
 * daytona`, its row in `/v1/targets`, a sandbox on it by name, exec and files through it, and
 * destroy; against a local double of Daytona's API driven by Daytona's official SDK. Then what
 * it refuses, each with its reason: a key it does not take, a user or path that would write a
 * line of its own into the Dockerfile, an id that is not one, a provider answering a 500 that is
 * not JSON, another team, a multi-service project pinned to it.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type DaytonaDouble, startDaytonaDouble } from "../doubles/daytona-double.ts";
import { cliRunner } from "../harness/cli-runner.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { streamedOutput } from "../harness/stream-proof.ts";
import { filesOf, tarOf } from "../harness/tar-files.ts";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

const IMAGE = "127.0.0.1:5000/denv/opsbox:bookworm";
let lab: Lab;
let daytona: DaytonaDouble;
let denv: ReturnType<typeof cliRunner>;

before(async () => {
  daytona = await startDaytonaDouble();
  lab = await openLab({ fetchAllow: [...LOCAL_REGISTRY, new URL(daytona.url).host] });
  denv = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));
});

after(async () => {
  if (lab)
    for (const e of (await lab.api("GET", "/v1/envs")).data.environments ?? [])
      await lab.api("DELETE", `/v1/envs/${e.id}?wait=true`);
  await lab?.close();
  await daytona?.close();
});

/** The double connected as `daytona`, for a test run alone (the first connects it through the CLI). */
async function connectDaytona(): Promise<void> {
  if ((await lab.api("GET", "/v1/clouds")).data.clouds.some((c: any) => c.name === "daytona")) return;
  const c = await lab.api("POST", "/v1/clouds", {
    provider: "daytona",
    name: "daytona",
    token: daytona.apiKey,
    api_url: daytona.url,
  });
  assert.equal(c.status, 201, JSON.stringify(c.data));
}

const exec = (id: string, body: Record<string, unknown>) => lab.api("POST", `/v1/envs/${id}/exec`, body);

test("connect daytona, its row, a sandbox on it: commands, files and destroy through the SDK", async () => {
  // A key the provider does not take is refused, and nothing is kept.
  const wrong = await denv(
    "cloud",
    "connect",
    "daytona",
    "--name",
    "daytona",
    "--token",
    "dtn_00",
    "--api-url",
    daytona.url,
  );
  assert.notEqual(wrong.code, 0);
  assert.match(wrong.stderr, /Daytona did not accept the key/);
  assert.equal((await lab.api("GET", "/v1/clouds")).data.clouds.length, 0);
  const ok = await denv(
    "cloud",
    "connect",
    "daytona",
    "--name",
    "daytona",
    "--token",
    daytona.apiKey,
    "--api-url",
    daytona.url,
  );
  assert.equal(ok.code, 0, ok.stderr);
  const row = (await lab.api("GET", "/v1/targets")).data.targets.find((t: any) => t.name === "daytona");
  assert.equal(row?.type, "daytona");
  assert.equal(row.available, true);
  assert.match(row.capabilities.multi_service_stack, /^no \(one container per sandbox/);
  assert.match(row.capabilities.egress_deny_verified, /networkBlockAll/);
  assert.ok(!row.supported.includes("verify") && !row.supported.includes("fork"));
  assert.match(row.note, /not against the live Daytona/);

  const made = await lab.api("POST", "/v1/targets/daytona/sandboxes", {
    image: IMAGE,
    cmd: ["sh", "-c", "echo started > /work/cmd.txt; exec sleep infinity"],
    env: { GREETING: "hello from denv" },
  });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  assert.equal(made.data.target, "daytona");
  assert.deepEqual(made.data.services, ["main"]);
  const id = made.data.id as string;
  // What the provider was asked for: the image, the user and its path, no network, denv's labels.
  const [at] = daytona.sandboxes();
  assert.equal(at?.state, "started");
  assert.equal(at?.user, "daytona");
  assert.equal(at?.networkBlockAll, true, "egress deny is the provider's networkBlockAll");
  assert.equal(at?.labels.denv_name, made.data.name);
  assert.match(at?.dockerfile ?? "", new RegExp(`^FROM ${IMAGE.replace(/[.]/g, "\\.")}\nRUN `));

  const hello = await exec(id, { command: "echo $GREETING; id -un" });
  assert.equal(hello.status, 200, JSON.stringify(hello.data));
  assert.equal(hello.data.stdout, "hello from denv\ndaytona\n");
  const split = await exec(id, { command: "echo out; echo err >&2; exit 3", env: { X: "it's" } });
  assert.deepEqual([split.data.exit_code, split.data.stdout, split.data.stderr], [3, "out\n", "err\n"]);
  // Output comes as the command writes it (the second command is sent only once "ready" arrived).
  assert.equal(
    await streamedOutput({ url: lab.server.url, key: lab.keyA }, id),
    "stdout:ready\nstdout:done\n",
  );
  const vars = await exec(id, {
    command: ["sh", "-c", 'printf "%s|" "$X" "$PWD"'],
    env: { X: "it's $HOME" },
    cwd: "/tmp",
  });
  assert.equal(vars.data.stdout, "it's $HOME|/tmp|", "variables and cwd arrive as given, not re-expanded");
  const slow = await exec(id, { command: "sleep 30", timeout_ms: 1000 });
  assert.equal(slow.data.timed_out, true);
  assert.equal(slow.data.exit_code, 124);
  const loud = await exec(id, { command: "head -c 5000 /dev/zero | tr '\\0' a", max_output_bytes: 100 });
  assert.equal(loud.data.stdout.length, 100);
  assert.equal(loud.data.stdout_dropped_bytes, 4900);
  assert.equal(loud.data.stdout_truncated, true);

  // The sandbox's cmd ran in the background, as its user.
  const started = await waitFor(
    "the sandbox's cmd to run",
    async () =>
      (await exec(id, { command: "cat /work/cmd.txt 2>/dev/null || true" })).data.stdout || undefined,
  );
  assert.equal(started, "started\n");

  const put = await lab.api(
    "PUT",
    `/v1/envs/${id}/files?path=${encodeURIComponent("/work/in")}`,
    await tarOf("note.txt", "through the toolbox\n"),
  );
  assert.equal(put.status, 200, JSON.stringify(put.data));
  assert.equal(
    (await exec(id, { command: "stat -c %U /work/in/note.txt; cat /work/in/note.txt" })).data.stdout,
    "daytona\nthrough the toolbox\n",
  );
  const got = await lab.api("GET", `/v1/envs/${id}/files?path=${encodeURIComponent("/work/in/note.txt")}`);
  assert.equal(got.status, 200);
  assert.deepEqual(await filesOf(got.data as Buffer), { "note.txt": "through the toolbox\n" });
  const stat = await lab.api("GET", `/v1/envs/${id}/files/stat?path=${encodeURIComponent("/work/in")}`);
  assert.equal(stat.data.type, "directory");
  assert.equal(stat.data.owner, "daytona");

  // Daytona runs everything as the sandbox's user: another is refused, saying so.
  const asRoot = await exec(id, { command: "id -u", user: "root" });
  assert.equal(asRoot.status, 400);
  assert.match(asRoot.data.error.message, /as the sandbox's user, daytona; as "root" is not carried/);
  const stop = await lab.api("POST", `/v1/envs/${id}/services/main/stop`, {});
  assert.match(stop.data.error.message, /one container with one service: destroy it instead/);
  // Its row says the snapshot is not driven by denv: a snapshot is refused before anything is recorded.
  const snap = await lab.api("POST", `/v1/envs/${id}/snapshot`, {});
  assert.equal(snap.status, 400, JSON.stringify(snap.data));
  assert.match(
    snap.data.error.message,
    /target daytona cannot snapshot environment .*: a sandbox's filesystem snapshot \(not driven by denv yet\)/,
  );
  const fork = await lab.api("POST", `/v1/envs/${id}/fork`, {});
  assert.equal(fork.status, 400, JSON.stringify(fork.data));

  const gone = await lab.api("DELETE", `/v1/envs/${id}?wait=true`);
  assert.equal(gone.data.status, "succeeded", JSON.stringify(gone.data));
  assert.equal(daytona.sandboxes()[0]?.state, "destroyed");
});

test("what a hostile request or provider gets from the Daytona driver: a refusal with its reason, nothing kept", async () => {
  await connectDaytona();
  const before = daytona.sandboxes().length;
  const envs = async () =>
    ((await lab.api("GET", "/v1/envs")).data.environments as any[]).filter((e) => e.status !== "destroyed")
      .length;
  const kept = await envs();
  // A user or path is written into the Dockerfile Daytona builds: a newline would be a line of its own.
  for (const [body, why] of [
    [{ image: IMAGE, user: "x\nRUN touch /pwned" }, /user: .* is not a user name/],
    [{ image: IMAGE, user: "Root;id" }, /is not a user name/],
    [{ image: IMAGE, volumes: ["/work\nRUN touch /pwned"] }, /volumes: .* control character/],
    [{ image: `${IMAGE}\nRUN touch /pwned` }, /image: .* control character or space/],
    [{ image: `${IMAGE} AS x` }, /image: .* control character or space/],
  ] as const) {
    const r = await lab.api("POST", "/v1/targets/daytona/sandboxes", body);
    assert.equal(r.status, 400, JSON.stringify(r.data));
    assert.match(r.data.error.message, why);
  }
  assert.equal(daytona.sandboxes().length, before, "nothing was asked of the provider");

  // An id that is not one is refused (and the sandbox it named is deleted), not kept or sent back.
  daytona.nextSandboxId("../../sandbox/other");
  const odd = await lab.api("POST", "/v1/targets/daytona/sandboxes", { image: IMAGE });
  assert.equal(odd.status, 503, JSON.stringify(odd.data));
  assert.match(odd.data.error.message, /answered a sandbox id that is not one/);

  // A provider answering a 500 that is not JSON: the caller hears which target and what failed.
  daytona.fault("POST /sandbox", 500, "<html>upstream fell over</html>");
  const broken = await lab.api("POST", "/v1/targets/daytona/sandboxes", { image: IMAGE });
  assert.equal(broken.status, 503, JSON.stringify(broken.data));
  assert.match(broken.data.error.message, /creating a sandbox from .* on target daytona \(Daytona\) failed/);

  // Another team sees neither the target nor can use it.
  const theirs = await lab.api("GET", "/v1/targets", undefined, lab.keyB);
  assert.ok(!theirs.data.targets.some((t: any) => t.name === "daytona"));
  const use = await lab.api("POST", "/v1/targets/daytona/sandboxes", { image: IMAGE }, lab.keyB);
  assert.equal(use.status, 404);
  assert.equal(await envs(), kept, "no environment was kept");
});

test("a multi-service project pinned to daytona (or whose file names it) is refused at prepare, naming the target and its limit", async () => {
  await connectDaytona();
  const compose = `x-denv: { kind: service }\nservices:\n  web: { image: ${IMAGE}, command: ["sleep", "infinity"] }\n  db: { image: ${IMAGE}, command: ["sleep", "infinity"] }\n`;
  assert.equal(
    (
      await lab.api("POST", "/v1/projects", {
        name: "pinned",
        kind: "service",
        source: "./pinned",
        pinned_target: "daytona",
      })
    ).status,
    201,
  );
  assert.equal((await lab.api("PUT", "/v1/projects/pinned/source", { compose })).status, 200);
  const before = daytona.sandboxes().length;
  const d = await lab.api("POST", "/v1/projects/pinned/deploy?wait=true", { env: "alpha" });
  assert.equal(d.data.status, "rolled_back", JSON.stringify(d.data).slice(0, 400));
  const prepare = d.data.phases.find((p: any) => p.name === "prepare");
  assert.equal(prepare.status, "failed");
  assert.match(
    prepare.reason,
    /pinned to daytona, a hosted daytona target, which runs one container per environment: this compose file has 2 services \(web, db\)/,
  );
  assert.equal(daytona.sandboxes().length, before, "nothing was made at the provider");
  // The file's own x-denv.target places it there too, and is refused the same way.
  const named = compose.replace("x-denv: { kind: service }", "x-denv: { kind: service, target: daytona }");
  assert.equal(
    (await lab.api("POST", "/v1/projects", { name: "named", kind: "service", source: "./named" })).status,
    201,
  );
  assert.equal((await lab.api("PUT", "/v1/projects/named/source", { compose: named })).status, 200);
  const n = await lab.api("POST", "/v1/projects/named/deploy?wait=true", { env: "alpha" });
  assert.equal(n.data.status, "rolled_back", JSON.stringify(n.data).slice(0, 400));
  assert.match(
    n.data.phases.find((p: any) => p.name === "prepare").reason,
    /x-denv.target names daytona, a hosted daytona target, which runs one container per environment/,
  );
  assert.equal(daytona.sandboxes().length, before, "nothing was made at the provider");
});
