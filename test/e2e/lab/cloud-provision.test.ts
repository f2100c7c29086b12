/**
 * Connect a target, the cloud half: `denv cloud connect hetzner` stores the token encrypted; a
 * deploy that finds no host with capacity provisions a machine through the Hetzner API (a local
 * server implementing its documented subset, which boots each server as a fresh Debian host from
 * the cloud-init user data it was given), waits for it to join, and lands on it. API errors, a
 * quota and a machine that never joins roll the deployment back and leave nothing behind.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { type RunningServer, startServer } from "@denv/server";
import { HetznerDouble } from "../../doubles/hetzner-double.ts";
import { type Lab, openLab } from "../../harness/fresh-host.ts";
import { LOCAL_REGISTRY, repoRoot } from "../../harness/test-host.ts";

const DIST = join(repoRoot, "dist");
const ADMIN = `dk_cloud_${Date.now()}`;
const HZ_TOKEN = "hz-test-token-0123456789";
let lab: Lab;
let hetzner: HetznerDouble;
const servers: RunningServer[] = [];
const dirs: string[] = [];

async function serverWith(joinWaitMs: number): Promise<RunningServer> {
  const dataDir = await mkdtemp(join(tmpdir(), "denv-cloud-"));
  dirs.push(dataDir);
  const s = await startServer({
    dataDir,
    adminKey: ADMIN,
    host: lab.gateway,
    port: 0,
    downloadsDir: DIST,
    provisionJoinWaitMs: joinWaitMs,
    // The registry, and the stand-in for Hetzner's API an administrator allowed.
    fetchAllow: [...LOCAL_REGISTRY, new URL(hetzner.url).host],
  });
  servers.push(s);
  return s;
}

async function api(s: RunningServer, method: string, path: string, body?: unknown) {
  const res = await fetch(`${s.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(600_000),
  });
  return { status: res.status, data: (await res.json()) as any };
}

const compose = readFileSync(join(repoRoot, "examples/ops-world/docker-compose.yaml"), "utf8");

async function deployOpsWorld(s: RunningServer, project: string, pin?: string) {
  await api(s, "POST", "/v1/projects", {
    name: project,
    kind: "rl-environment",
    source: "./ops-world",
    ...(pin ? { pinned_target: pin } : {}),
  });
  await api(s, "PUT", `/v1/projects/${project}/source`, { compose });
  return (await api(s, "POST", `/v1/projects/${project}/deploy?wait=true`, { env: "alpha" })).data;
}

const phase = (d: any, name: string) => d.phases.find((p: any) => p.name === name);

before(async () => {
  lab = await openLab();
  hetzner = new HetznerDouble(lab, HZ_TOKEN);
  await hetzner.start();
});

after(async () => {
  for (const s of servers) {
    for (const e of (await api(s, "GET", "/v1/envs").catch(() => ({ data: {} }))).data.environments ?? [])
      await api(s, "DELETE", `/v1/envs/${e.id}`).catch(() => {});
    await s.close();
  }
  await hetzner?.close();
  await lab?.close();
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe("cloud connect", () => {
  test("the token is checked, stored encrypted, never shown; an AWS token that is no key pair is refused", async () => {
    const s = await serverWith(120_000);
    const wrong = await api(s, "POST", "/v1/clouds", {
      provider: "hetzner",
      name: "hz",
      token: "nope",
      server_type: "cx22",
      location: "fsn1",
      api_url: hetzner.url,
    });
    assert.equal(wrong.status, 400);
    assert.match(wrong.data.error.message, /Hetzner did not accept the token: .*unauthorized/);
    const aws = await api(s, "POST", "/v1/clouds", {
      provider: "aws",
      name: "aws",
      token: "x",
      server_type: "t3.large",
      location: "eu-central-1",
    });
    // AWS is connected with a key pair (aws-provision.test.ts): a token that is none is refused.
    assert.equal(aws.status, 400);
    assert.match(aws.data.error.message, /ACCESS_KEY_ID:SECRET_ACCESS_KEY/);
    const ok = await api(s, "POST", "/v1/clouds", {
      provider: "hetzner",
      name: "hz",
      token: HZ_TOKEN,
      server_type: "ax41-nvme",
      location: "fsn1",
      api_url: hetzner.url,
    });
    assert.equal(ok.status, 201, JSON.stringify(ok.data));
    assert.equal(JSON.stringify(ok.data).includes(HZ_TOKEN), false);
    const listed = await api(s, "GET", "/v1/clouds");
    assert.deepEqual(
      listed.data.clouds.map((c: any) => [c.name, c.provider, c.server_type, c.location]),
      [["hz", "hetzner", "ax41-nvme", "fsn1"]],
    );
    assert.equal(JSON.stringify(listed.data).includes(HZ_TOKEN), false);
    const row = await s.store.selectFrom("clouds").selectAll().executeTakeFirstOrThrow();
    assert.match(row.token_sealed, /^v1:/);
    assert.equal(row.token_sealed.includes(HZ_TOKEN), false);
    const again = await api(s, "POST", "/v1/clouds", {
      provider: "hetzner",
      name: "hz",
      token: HZ_TOKEN,
      server_type: "cx22",
      location: "fsn1",
      api_url: hetzner.url,
    });
    assert.equal(again.status, 409);
  });

  test("the CLI: denv cloud connect | list | disconnect", async () => {
    const s = servers[0] as RunningServer;
    // Asynchronously: the server answering the CLI runs in this process.
    const cli = (args: string[]) =>
      new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
        const child = spawn(
          process.execPath,
          [join(repoRoot, "packages/cli/bin/denv.js"), "--server", s.url, "--api-key", ADMIN, ...args],
          { stdio: ["ignore", "pipe", "pipe"] },
        );
        let stdout = "";
        let stderr = "";
        child.stdout.on("data", (c: Buffer) => {
          stdout += c.toString();
        });
        child.stderr.on("data", (c: Buffer) => {
          stderr += c.toString();
        });
        child.on("close", (status) => resolve({ status, stdout, stderr }));
      });
    const aws = await cli(["cloud", "connect", "aws", "--name", "aws", "--token", "x"]);
    assert.equal(aws.status, 2, aws.stderr); // invalid_argument: the error table's usage exit code
    // AWS takes a key pair (aws-provision.test.ts): a token that is none is refused, saying the form.
    assert.match(aws.stderr, /an AWS token is ACCESS_KEY_ID:SECRET_ACCESS_KEY/);
    const ok = await cli([
      "cloud",
      "connect",
      "hetzner",
      "--name",
      "hz2",
      "--token",
      HZ_TOKEN,
      "--server-type",
      "cx22",
      "--location",
      "nbg1",
      "--api-url",
      hetzner.url,
    ]);
    assert.equal(ok.status, 0, ok.stderr);
    assert.match(ok.stdout, /connected hetzner account hz2 \(cx22 in nbg1\)/);
    const listed = JSON.parse((await cli(["cloud", "list", "--json"])).stdout);
    assert.deepEqual(
      listed.clouds.map((c: any) => c.name),
      ["hz", "hz2"],
    );
    const gone = await cli(["cloud", "disconnect", "hz2"]);
    assert.equal(gone.status, 0, gone.stderr);
    const again = await cli(["cloud", "disconnect", "hz2"]);
    assert.equal(again.status, 1, again.stderr);
    assert.match(again.stderr, /no cloud hz2/);
  });
});

describe("provisioning", () => {
  test("a deploy with no host provisions a machine through the Hetzner API, which joins, and lands on it", {
    timeout: 600_000,
  }, async () => {
    const s = servers[0] as RunningServer;
    const creates = () => hetzner.calls.filter((c) => c.method === "POST").length;
    const d = await deployOpsWorld(s, "ops-world");
    assert.equal(d.status, "succeeded", JSON.stringify(d.phases.filter((p: any) => p.status === "failed")));
    assert.match(
      phase(d, "place").evidence.reason,
      /no connected host has capacity: provisioning a machine in cloud hz/,
    );
    const prov = phase(d, "provision");
    assert.equal(prov.status, "succeeded");
    assert.equal(prov.evidence.server_type, "ax41-nvme");
    assert.equal(prov.evidence.location, "fsn1");
    assert.equal(JSON.stringify(d).includes(HZ_TOKEN), false, "the token never reaches the phase log");
    const join_ = phase(d, "join");
    assert.equal(join_.status, "succeeded");
    assert.equal(join_.evidence.name, prov.evidence.name);
    // What the API was asked for: the machine, its label, and user data that installs and joins.
    const created = hetzner.calls.find((c) => c.method === "POST")?.body;
    assert.equal(created.image, "debian-12");
    assert.equal(created.labels.denv, "host");
    assert.match(created.user_data, /^#!\/bin\/sh\n/);
    assert.match(
      created.user_data,
      new RegExp(`curl -fsSL '${s.url}/install.sh' \\| sh -s -- --token 'djt_`),
    );
    // The host it became, and the stack running in that machine's engine.
    const hosts = (await api(s, "GET", "/v1/hosts")).data.hosts;
    assert.equal(hosts.length, 1);
    assert.equal(hosts[0].name, prov.evidence.name);
    assert.equal(hosts[0].connected, true);
    assert.equal(hosts[0].version, readFileSync(join(DIST, "denvd.version"), "utf8").trim());
    assert.equal(phase(d, "verdict").evidence.host_id, hosts[0].id);
    const env = (await api(s, "GET", `/v1/envs/${encodeURIComponent("ops-world/alpha")}`)).data;
    const count = await api(s, "POST", `/v1/envs/${env.id}/exec`, {
      service: "opsbox",
      command: ["psql", "-tAc", "select count(*) from orders"],
    });
    assert.equal(count.data.stdout.trim(), "100000");
    const machine = [...hetzner.servers.values()][0];
    assert.match((await machine?.host?.sh("docker ps --format '{{.Names}}'"))?.stdout ?? "", /opsbox/);
    const clouds = (await api(s, "GET", "/v1/clouds")).data.clouds;
    assert.deepEqual(
      clouds[0].machines.map((m: any) => m.status),
      ["joined"],
    );

    // A project pinned to the cloud lands on its machine, which has room: nothing new is created.
    const before = creates();
    const pinned = await deployOpsWorld(s, "pinned", "hz");
    assert.equal(
      pinned.status,
      "succeeded",
      JSON.stringify(pinned.phases.filter((p: any) => p.status === "failed")),
    );
    assert.equal(phase(pinned, "place").evidence.host_id, hosts[0].id);
    assert.equal(phase(pinned, "provision").status, "skipped");
    assert.equal(creates(), before);
    // Pinned to something that is neither a host nor a cloud: refused with the reason.
    const nowhere = await deployOpsWorld(s, "nowhere", "no-such-cloud");
    assert.equal(nowhere.status, "rolled_back");
    assert.match(
      nowhere.reason,
      /pinned to no-such-cloud, which is neither a connected host with capacity nor a connected cloud/,
    );
  });

  test("an API error and a quota roll back and create nothing", async () => {
    const s = await serverWith(10_000);
    await api(s, "POST", "/v1/clouds", {
      provider: "hetzner",
      name: "hz",
      token: HZ_TOKEN,
      server_type: "cx22",
      location: "nbg1",
      api_url: hetzner.url,
    });
    const count = hetzner.servers.size;
    // An API error: the server type does not exist.
    hetzner.failNextCreate = { status: 422, code: "invalid_input", message: "server type cx99 not found" };
    const bad = await deployOpsWorld(s, "bad-type");
    assert.equal(bad.status, "rolled_back");
    assert.match(bad.reason, /invalid_input: server type cx99 not found/);
    assert.equal(hetzner.servers.size, count);
    // A quota.
    hetzner.failNextCreate = {
      status: 403,
      code: "resource_limit_exceeded",
      message: "server limit reached",
    };
    const d = await deployOpsWorld(s, "quota");
    assert.equal(d.status, "rolled_back");
    assert.equal(phase(d, "provision").status, "failed");
    assert.match(d.reason, /resource_limit_exceeded: server limit reached/);
    assert.equal(hetzner.servers.size, count, "no server was created");
    assert.equal((await api(s, "GET", "/v1/hosts")).data.hosts.length, 0);
  });

  test("a machine that never joins is deleted and the deployment rolled back", async () => {
    const s = servers[servers.length - 1] as RunningServer;
    const count = hetzner.servers.size;
    hetzner.neverJoin = true;
    try {
      const d = await deployOpsWorld(s, "lost");
      assert.equal(d.status, "rolled_back");
      assert.equal(phase(d, "provision").status, "succeeded");
      assert.equal(phase(d, "join").status, "failed");
      assert.match(d.reason, /machine denv-[0-9a-f]+ did not join within 10 s/);
      const name = phase(d, "provision").evidence.name as string;
      assert.ok(
        hetzner.calls.some(
          (c) =>
            c.method === "DELETE" && c.path === `/v1/servers/${phase(d, "provision").evidence.server_id}`,
        ),
        "the server was deleted through the API",
      );
      assert.equal(hetzner.servers.size, count, "nothing is left in the cloud");
      const left = await lab.docker.listContainers({ all: true, filters: { name: [name] } });
      assert.equal(left.length, 0, "the machine is gone");
      const m = await s.store
        .selectFrom("cloud_machines")
        .selectAll()
        .where("name", "=", name)
        .executeTakeFirstOrThrow();
      assert.equal(m.status, "deleted");
      assert.equal((await api(s, "GET", "/v1/hosts")).data.hosts.length, 0);
    } finally {
      hetzner.neverJoin = false;
    }
  });
});
