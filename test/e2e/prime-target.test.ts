/**
 * Prime Intellect Sandboxes as a target: `denv cloud connect prime`, its row, a sandbox on it by
 * name, commands (as the unprivileged user denv makes, or as one named), a command past its
 * timeout, files, destroy; against a local double of Prime's published REST API. Then what it
 * refuses: a key it does not take, a gateway the provider names that the server may not call (or
 * whose path is not an id), a provider answering a 500 that is not JSON, another team.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type PrimeDouble, startPrimeDouble } from "../doubles/prime-double.ts";
import { cliRunner } from "../harness/cli-runner.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { filesOf, tarOf } from "../harness/tar-files.ts";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

const IMAGE = "127.0.0.1:5000/denv/opsbox:bookworm";
let lab: Lab;
let prime: PrimeDouble;
let denv: ReturnType<typeof cliRunner>;

before(async () => {
  prime = await startPrimeDouble();
  lab = await openLab({ fetchAllow: [...LOCAL_REGISTRY, new URL(prime.url).host] });
  denv = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));
});

after(async () => {
  if (lab)
    for (const e of (await lab.api("GET", "/v1/envs")).data.environments ?? [])
      await lab.api("DELETE", `/v1/envs/${e.id}?wait=true`);
  await lab?.close();
  await prime?.close();
});

async function connectPrime(): Promise<void> {
  if ((await lab.api("GET", "/v1/clouds")).data.clouds.some((c: any) => c.name === "prime")) return;
  const c = await lab.api("POST", "/v1/clouds", {
    provider: "prime",
    name: "prime",
    token: prime.apiKey,
    api_url: prime.url,
  });
  assert.equal(c.status, 201, JSON.stringify(c.data));
}

const exec = (id: string, body: Record<string, unknown>) => lab.api("POST", `/v1/envs/${id}/exec`, body);

test("connect prime, its row, a sandbox on it: commands, a timeout, files and destroy over its REST API", async () => {
  const wrong = await denv(
    "cloud",
    "connect",
    "prime",
    "--name",
    "prime",
    "--token",
    "pit_0",
    "--api-url",
    prime.url,
  );
  assert.notEqual(wrong.code, 0);
  assert.match(wrong.stderr, /Prime did not accept the key: 401: Invalid API key/);
  const ok = await denv(
    "cloud",
    "connect",
    "prime",
    "--name",
    "prime",
    "--token",
    prime.apiKey,
    "--api-url",
    prime.url,
  );
  assert.equal(ok.code, 0, ok.stderr);
  const row = (await lab.api("GET", "/v1/targets")).data.targets.find((t: any) => t.name === "prime");
  assert.equal(row?.type, "prime");
  assert.match(row.capabilities.egress_deny_verified, /network_access: false/);
  assert.match(row.note, /not against the live Prime/);

  const made = await lab.api("POST", "/v1/targets/prime/sandboxes", {
    image: IMAGE,
    cmd: ["sh", "-c", "echo started > /work/cmd.txt; exec sleep infinity"],
    env: { GREETING: "hello from denv" },
  });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  assert.equal(made.data.target, "prime");
  const id = made.data.id as string;
  const [at] = prime.sandboxes();
  assert.equal(at?.status, "RUNNING");
  assert.equal(at?.networkAccess, false, "egress deny is the provider's network_access");
  assert.ok(at?.labels.includes(`denv_name:${made.data.name}`));

  const hello = await exec(id, { command: "echo $GREETING; id -un" });
  assert.equal(hello.status, 200, JSON.stringify(hello.data));
  assert.equal(hello.data.stdout, "hello from denv\nuser\n", "the agent's commands are not root's");
  const asRoot = await exec(id, { command: "id -u", user: "root" });
  assert.equal(asRoot.data.stdout, "0\n", "a named user is carried");
  const split = await exec(id, { command: "echo out; echo err >&2; exit 3" });
  assert.deepEqual([split.data.exit_code, split.data.stdout, split.data.stderr], [3, "out\n", "err\n"]);
  const where = await exec(id, {
    command: 'printf "%s|%s" "$X" "$PWD"',
    env: { X: "it's $HOME" },
    cwd: "/tmp",
  });
  assert.equal(where.data.stdout, "it's $HOME|/tmp");
  const slow = await exec(id, { command: "sleep 30", timeout_ms: 1000 });
  assert.deepEqual([slow.data.timed_out, slow.data.exit_code], [true, 124]);

  const started = await waitFor(
    "the sandbox's cmd to run",
    async () =>
      (await exec(id, { command: "cat /work/cmd.txt 2>/dev/null || true" })).data.stdout || undefined,
  );
  assert.equal(started, "started\n", "the sandbox's cmd ran in the background");

  const put = await lab.api(
    "PUT",
    `/v1/envs/${id}/files?path=${encodeURIComponent("/work/in")}`,
    await tarOf("note.txt", "through the gateway\n"),
  );
  assert.equal(put.status, 200, JSON.stringify(put.data));
  assert.equal(
    (await exec(id, { command: "stat -c %U /work/in/note.txt; cat /work/in/note.txt" })).data.stdout,
    "user\nthrough the gateway\n",
  );
  const got = await lab.api("GET", `/v1/envs/${id}/files?path=${encodeURIComponent("/work/in/note.txt")}`);
  assert.equal(got.status, 200);
  assert.deepEqual(await filesOf(got.data as Buffer), { "note.txt": "through the gateway\n" });

  const gone = await lab.api("DELETE", `/v1/envs/${id}?wait=true`);
  assert.equal(gone.data.status, "succeeded", JSON.stringify(gone.data));
  assert.equal(prime.sandboxes()[0]?.status, "TERMINATED");
});

test("a gateway the provider names is called only when the server may call it, and a hostile answer is refused", async () => {
  await connectPrime();
  const live = () => prime.sandboxes().filter((s) => s.status !== "TERMINATED").length;
  const before = live();
  const seen = prime.seen.length;
  // An address outside the fetch policy (loopback, another port): refused before anything is sent.
  prime.nextAuth({ gateway_url: "http://127.0.0.2:9/steal" });
  const elsewhere = await lab.api("POST", "/v1/targets/prime/sandboxes", { image: IMAGE });
  assert.equal(elsewhere.status, 403, JSON.stringify(elsewhere.data));
  assert.match(
    elsewhere.data.error.message,
    /gateway_url: 127\.0\.0\.2:9 is not a host this server fetches from/,
  );
  // A path segment that is not an id would climb out of the gateway's path.
  prime.nextAuth({ user_ns: "..", job_id: "../../api/v1/sandbox" });
  const climbing = await lab.api("POST", "/v1/targets/prime/sandboxes", { image: IMAGE });
  assert.equal(climbing.status, 503, JSON.stringify(climbing.data));
  assert.match(climbing.data.error.message, /no gateway path or token that is one/);
  // Each refused sandbox was deleted at the provider; nothing reached a gateway.
  assert.equal(live(), before);
  assert.ok(!prime.seen.slice(seen).some((r) => r.includes("/gateway/")), prime.seen.slice(seen).join(", "));

  // An answer without end is read only so far: the server's memory is not the provider's to fill.
  prime.fault("GET /api/v1/sandbox", 200, `{"sandboxes": "${"x".repeat(2 * 1024 * 1024)}"}`);
  const endless = await lab.api("POST", "/v1/clouds", {
    provider: "prime",
    name: "prime-too",
    token: prime.apiKey,
    api_url: prime.url,
  });
  assert.equal(endless.status, 400, JSON.stringify(endless.data));
  assert.match(endless.data.error.message, /Prime did not accept the key: an answer over 1048576 bytes/);

  prime.fault("POST /api/v1/sandbox", 500, "<html>upstream fell over</html>");
  const broken = await lab.api("POST", "/v1/targets/prime/sandboxes", { image: IMAGE });
  assert.equal(broken.status, 503);
  assert.match(
    broken.data.error.message,
    /creating a sandbox from .* on target prime \(Prime\) failed: 500: <html>/,
  );

  const theirs = await lab.api("POST", "/v1/targets/prime/sandboxes", { image: IMAGE }, lab.keyB);
  assert.equal(theirs.status, 404);
});

test("a project pinned to prime deploys its one service there; Prime keeps no snapshot, so the deploy keeps no version", async () => {
  await connectPrime();
  const compose = `x-denv: { kind: service }\nservices:\n  web: { image: ${IMAGE}, command: ["sh", "-c", "echo up > /work/up.txt; exec sleep infinity"] }\n`;
  const made = await lab.api("POST", "/v1/projects", {
    name: "on-prime",
    kind: "service",
    source: "./on-prime",
    pinned_target: "prime",
  });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  assert.equal((await lab.api("PUT", "/v1/projects/on-prime/source", { compose })).status, 200);
  const d = await lab.api("POST", "/v1/projects/on-prime/deploy?wait=true", { env: "alpha" });
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data).slice(0, 600));
  const snapshot = d.data.phases.find((p: any) => p.name === "snapshot");
  assert.equal(snapshot.status, "skipped");
  assert.match(snapshot.reason, /target prime has no snapshot denv drives .*no version is kept/);
  const env = (await lab.api("GET", `/v1/envs/${d.data.environment_id}`)).data;
  assert.deepEqual([env.target, env.status, env.current_version_id], ["prime", "running", null]);
  const up = await waitFor(
    "the service's command to run",
    async () =>
      (await exec(env.id, { command: "cat /work/up.txt 2>/dev/null || true" })).data.stdout || undefined,
  );
  assert.equal(up, "up\n", "the service's command ran");
});
