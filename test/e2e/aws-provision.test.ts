/**
 * AWS as a cloud that makes machines, against a local double of the EC2 Query API on loopback
 * (ec2-double.ts; nothing is sent to AWS, and this has not run against AWS itself). `denv cloud
 * connect aws` checks the key pair, a deploy with no host provisions an instance of Debian 12's
 * newest image with cloud-init user data that installs denvd and joins; the test plays that machine
 * (a denvd on this machine's engine, joined with the token from the user data), and ops-world
 * deploys on it. A refused RunInstances rolls the deploy back with AWS's code; a machine that never
 * joins is terminated.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { joinServer, Sidecar } from "@denv/denvd";
import { type RunningServer, startServer } from "@denv/server";
import { Ec2Double, type Ec2Instance } from "../doubles/ec2-double.ts";
import { LOCAL_REGISTRY, openTestHost, repoRoot, type TestHost } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";
import { opsWorldCompose } from "./process-world.ts";

const KEY = "AKIATESTKEY000000001";
const SECRET = "test-secret-key-0123456789abcdef";
const ADMIN = `dk_aws_${Date.now()}`;
let ec2: Ec2Double;
let server: RunningServer;
let dataDir: string;
let host: TestHost | undefined;
let sidecar: Sidecar | undefined;

async function api(method: string, path: string, body?: unknown) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(600_000),
  });
  return { status: res.status, data: (await res.json()) as any };
}

before(async () => {
  ec2 = new Ec2Double({ accessKeyId: KEY, region: "eu-central-1" });
  await ec2.start();
  dataDir = await mkdtemp(join(tmpdir(), "denv-aws-"));
  server = await startServer({
    dataDir,
    adminKey: ADMIN,
    fetchAllow: [...LOCAL_REGISTRY, new URL(ec2.url).host],
    // What a new machine would dial (only written into its user data here: .invalid never resolves).
    publicUrl: "http://denv-server.invalid:8080",
    provisionJoinWaitMs: 60_000,
  });
  await api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
  await api("PUT", "/v1/projects/ops-world/source", { compose: opsWorldCompose });
});

after(async () => {
  await sidecar?.stop().catch(() => {});
  await server?.close();
  await host?.close();
  await ec2?.close();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

test("denv cloud connect aws checks the key pair and the region before keeping them", async () => {
  const base = { provider: "aws", server_type: "m7i.large", location: "eu-central-1", api_url: ec2.url };
  const malformed = await api("POST", "/v1/clouds", { ...base, name: "aws", token: "not-a-pair" });
  assert.equal(malformed.status, 400);
  assert.match(malformed.data.error.message, /ACCESS_KEY_ID:SECRET_ACCESS_KEY/);
  const wrong = await api("POST", "/v1/clouds", {
    ...base,
    name: "aws",
    token: `AKIAWRONGKEY00000001:${SECRET}`,
  });
  assert.equal(wrong.status, 400);
  assert.match(wrong.data.error.message, /AWS did not accept the token: .*AuthFailure/);
  const region = await api("POST", "/v1/clouds", {
    ...base,
    name: "aws",
    token: `${KEY}:${SECRET}`,
    location: "mars",
  });
  assert.equal(region.status, 400);
  assert.match(region.data.error.message, /not an AWS region/);
  const ok = await api("POST", "/v1/clouds", { ...base, name: "aws", token: `${KEY}:${SECRET}` });
  assert.equal(ok.status, 201, JSON.stringify(ok.data));
  assert.equal(JSON.stringify(ok.data).includes(SECRET), false, "the secret is never answered");
  const stored = await server.store.selectFrom("clouds").select("token_sealed").execute();
  assert.ok(
    stored.every((c) => !c.token_sealed.includes(SECRET)),
    "the secret is stored sealed",
  );
});

test("denv cloud connect aws --profile reads the key pair from the caller's credentials file", async () => {
  const dir = await mkdtemp(join(tmpdir(), "denv-aws-cred-"));
  const file = join(dir, "credentials");
  await writeFile(
    file,
    `[default]\naws_access_key_id = AKIAOTHER0000000001\naws_secret_access_key = other\n\n[lab]\naws_access_key_id = ${KEY}\naws_secret_access_key = ${SECRET}\n\n[temp]\naws_access_key_id = ${KEY}\naws_secret_access_key = ${SECRET}\naws_session_token = abc\n`,
  );
  // Not spawnSync: the server answering the CLI runs in this process.
  const denv = (...args: string[]) =>
    new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        [join(repoRoot, "packages/cli/bin/denv.js"), ...args],
        {
          encoding: "utf8",
          env: {
            ...process.env,
            DENV_SERVER: server.url,
            DENV_API_KEY: ADMIN,
            DENV_NO_STDIN: "1",
            AWS_SHARED_CREDENTIALS_FILE: file,
          },
        },
        (err, stdout, stderr) =>
          resolve({ status: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
    });
  try {
    const common = [
      "cloud",
      "connect",
      "aws",
      "--server-type",
      "m7i.large",
      "--location",
      "eu-central-1",
      "--api-url",
      ec2.url,
    ];
    const ok = await denv(...common, "--name", "aws-lab", "--profile", "lab");
    assert.equal(ok.status, 0, ok.stderr);
    assert.match(ok.stdout, /connected aws account aws-lab \(m7i\.large in eu-central-1\)/);
    const temp = await denv(...common, "--name", "aws-temp", "--profile", "temp");
    assert.equal(temp.status, 2, temp.stderr);
    assert.match(temp.stderr, /temporary credentials/);
    const none = await denv(...common, "--name", "aws-none", "--profile", "nope");
    assert.equal(none.status, 2);
    assert.match(none.stderr, /has no key pair for it/);
  } finally {
    await api("DELETE", "/v1/clouds/aws-lab");
    await rm(dir, { recursive: true, force: true });
  }
});

test("a refused RunInstances rolls the deploy back with AWS's code, and nothing is left", async () => {
  ec2.failNextRun = { status: 400, code: "InsufficientInstanceCapacity", message: "no m7i.large here now" };
  const d = await api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "refused" });
  assert.equal(d.data.status, "rolled_back", JSON.stringify(d.data));
  assert.match(d.data.reason, /InsufficientInstanceCapacity/);
  assert.equal([...ec2.instances.values()].filter((i) => i.state !== "terminated").length, 0);
});

test("a deploy with no host provisions an EC2 instance whose user data joins it, and deploys there", async () => {
  const deploying = api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "alpha" });
  const inst: Ec2Instance = await waitFor("EC2 to be asked for an instance", () =>
    [...ec2.instances.values()].find((i) => i.state === "pending"),
  );
  // What was asked of EC2: Debian 12's newest image (Debian's own account), the type, the tags.
  assert.equal(inst.imageId, "ami-0new0000000000000");
  assert.equal(inst.instanceType, "m7i.large");
  assert.equal(inst.tags.denv, "host");
  assert.match(inst.tags["denv-deployment"] ?? "", /^dep_/);
  const images = ec2.calls.find((c) => c.action === "DescribeImages")?.params;
  assert.equal(images?.get("Owner.1"), "136693071363");
  // The machine: its user data installs Docker, then denvd through the server's installer.
  assert.match(inst.userData, /^#!\/bin\/sh\n/);
  assert.match(
    inst.userData,
    /curl -fsSL 'http:\/\/denv-server\.invalid:8080\/install\.sh' \| sh -s -- --token '(djt_[^']+)'/,
  );
  const token = /--token '(djt_[^']+)'/.exec(inst.userData)?.[1] as string;
  const name = /--name '([^']+)'/.exec(inst.userData)?.[1] as string;
  assert.equal(name, inst.tags.Name);
  // Played here: a denvd joined with that token under that name.
  host = await openTestHost({});
  const joined = await joinServer(server.url, token, name);
  sidecar = new Sidecar({ serverUrl: server.url, secret: joined.secret, denvd: host.denvd });
  sidecar.start();
  const d = await deploying;
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data));
  const provision = d.data.phases.find((p: { name: string }) => p.name === "provision");
  assert.equal(provision.evidence.provider, "aws");
  assert.equal(provision.evidence.server_id, inst.id);
  const listed = (await api("GET", "/v1/clouds")).data.clouds[0];
  assert.deepEqual(
    listed.machines.map((m: { name: string }) => m.name),
    [name],
  );
});

test("a machine that never joins is terminated, and the deploy rolls back", async () => {
  // The joined host is busy elsewhere: pinned to the cloud, a new machine is made for this one.
  await sidecar?.stop();
  sidecar = undefined;
  const before = ec2.instances.size;
  const s2 = await startServerWithShortJoin();
  try {
    const d = await s2.api("POST", "/v1/projects/ops-world/deploy?wait=true", { env: "never" });
    assert.equal(d.data.status, "rolled_back", JSON.stringify(d.data));
    assert.match(d.data.reason, /did not join/);
    const made = [...ec2.instances.values()].slice(before);
    assert.equal(made.length, 1);
    assert.equal(made[0]?.state, "terminated");
  } finally {
    await s2.close();
  }
});

/** A second server on its own store with a 2 s join wait, its own AWS account connected. */
async function startServerWithShortJoin() {
  const dir = await mkdtemp(join(tmpdir(), "denv-aws2-"));
  const key = `dk_aws2_${Date.now()}`;
  const s = await startServer({
    dataDir: dir,
    adminKey: key,
    fetchAllow: [...LOCAL_REGISTRY, new URL(ec2.url).host],
    publicUrl: "http://denv-server.invalid:8080",
    provisionJoinWaitMs: 2000,
  });
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${s.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, data: (await res.json()) as any };
  };
  await call("POST", "/v1/clouds", {
    provider: "aws",
    name: "aws",
    token: `${KEY}:${SECRET}`,
    server_type: "m7i.large",
    location: "eu-central-1",
    api_url: ec2.url,
  });
  await call("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
  await call("PUT", "/v1/projects/ops-world/source", { compose: opsWorldCompose });
  return {
    api: call,
    close: async () => {
      await s.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
