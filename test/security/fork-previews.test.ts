/**
 * Round 4's finding 6: every successful deploy replaced the project's declared warm pool with its
 * own spec's, so a pull request from a fork, whose compose file an outsider writes, replaced
 * alpha's `x-denv.pool: 1` with its own (up to 256 ready copies of the outsider's code on the
 * team's hosts, refilled as taken). Here, for real, with the GitHub double, a git repository served
 * over smart HTTP and a live denv: alpha is deployed by a push with `pool: 1`; a fork's pull
 * request declaring `pool: 256` waits for a member's approval, is approved, deploys, and the pool
 * stays alpha's; a member's deploy of another environment leaves it too; the project's preview
 * budget and its "no forks" setting refuse further previews, saying why.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { GitHubDouble } from "../doubles/github-double.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

const APP_ID = "626262";
const SECRET = "the App's webhook secret, long";
const INSTALLATION = 4242;
const REPO = "acme/pooled";
let lab: Lab;
let double: GitHubDouble;
let gitRoot: string;
let repoDir: string;

const compose = (pool: string) =>
  `x-denv: { kind: agent, pool: ${pool} }\nservices:\n  box:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    user: "1000"\n    command: [sleep, infinity]\n`;

function git(...args: string[]): string {
  return execFileSync("git", ["-C", repoDir, "-c", "user.name=t", "-c", "user.email=t@t", ...args], {
    encoding: "utf8",
  }).trim();
}

function commit(branch: string, text: string): string {
  git("checkout", "-q", "-B", branch);
  writeFileSync(join(repoDir, "compose.yaml"), text);
  git("add", "-A");
  git("commit", "-q", "--allow-empty", "-m", `on ${branch}`);
  return git("rev-parse", "HEAD");
}

async function deliver(event: string, payload: unknown) {
  const d = double.delivery(APP_ID, SECRET, event, payload);
  const res = await fetch(`${lab.server.url}/v1/github/webhook`, {
    method: "POST",
    headers: d.headers,
    body: d.body,
  });
  return { status: res.status, data: (await res.json()) as { outcome: string; deployments: string[] } };
}

function verdict(id: string): Promise<any> {
  return waitFor(`deployment ${id}'s verdict`, async () => {
    const d = await lab.api("GET", `/v1/deployments/${id}`);
    return d.data.status !== "running" && d.data.status !== "queued" ? d.data : undefined;
  });
}

const repository = { id: 7007, full_name: REPO, default_branch: "main", private: true };
const pr = (number: number, head: string, fromFork: string | null) => ({
  action: "opened",
  number,
  installation: { id: INSTALLATION },
  repository,
  sender: { login: "outsider" },
  pull_request: {
    number,
    head: { sha: head, ref: `change-${number}`, repo: { full_name: fromFork ?? REPO } },
    base: { ref: "main", repo: { full_name: REPO } },
  },
});

before(async () => {
  gitRoot = await mkdtemp(join(tmpdir(), "denv-forkpr-"));
  repoDir = join(gitRoot, "acme", "pooled.git");
  mkdirSync(repoDir, { recursive: true });
  execFileSync("git", ["init", "-q", "-b", "main", repoDir]);
  double = new GitHubDouble(gitRoot);
  await double.start();
  const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  double.apps.set(APP_ID, {
    id: APP_ID,
    slug: "denv-pooled",
    publicKeyPem: publicKey.export({ type: "spki", format: "pem" }).toString(),
  });
  double.repos.set(REPO, { id: 7007, fullName: REPO, defaultBranch: "main" });
  double.installations.set(INSTALLATION, { appId: APP_ID, account: "acme", repos: [REPO] });
  lab = await openLab({ fetchAllow: [...LOCAL_REGISTRY, double.host] });
  const app = await lab.api("POST", "/v1/github/apps", {
    app_id: APP_ID,
    private_key: privateKey.export({ type: "pkcs1", format: "pem" }).toString(),
    webhook_secret: SECRET,
    api_url: double.url,
  });
  assert.equal(app.status, 201, JSON.stringify(app.data));
  const p = await lab.api("POST", "/v1/projects", {
    name: "pooled",
    kind: "agent",
    source: `github:${REPO}`,
  });
  assert.equal(p.status, 201, JSON.stringify(p.data));
});

after(async () => {
  if (lab)
    for (const e of (await lab.api("GET", "/v1/envs")).data.environments ?? [])
      await lab.api("DELETE", `/v1/envs/${e.id}?wait=true`);
  await lab?.close();
  await double?.close();
  await rm(gitRoot, { recursive: true, force: true });
});

test("a fork's pull request cannot set the project's pool, waits for approval, and is held to the preview budget", async () => {
  // alpha, from a push to main, declares one warm copy.
  const main = commit("main", compose("1"));
  const pushed = await deliver("push", {
    ref: "refs/heads/main",
    before: "0".repeat(40),
    after: main,
    created: false,
    deleted: false,
    installation: { id: INSTALLATION },
    repository,
    pusher: { name: "owner" },
    sender: { login: "owner" },
  });
  const alpha = await verdict(pushed.data.deployments[0] as string);
  assert.equal(alpha.status, "succeeded", alpha.reason);
  const alphaVersion = alpha.version_id as string;
  const declared = async () => (await lab.api("GET", `/v1/pools/${alphaVersion}`)).data;
  await waitFor("alpha's pool to be declared", async () => (await declared()).size === 1);

  // An outsider's pull request asks for 256 copies of its own code.
  const head = commit("change-1", compose("256"));
  const opened = await deliver("pull_request", pr(1, head, "outsider/pooled"));
  assert.deepEqual(opened.data.deployments, [], opened.data.outcome);
  assert.match(opened.data.outcome, /waiting: #1 is from a fork/);
  assert.equal(
    (await lab.api("GET", "/v1/envs/pooled%2Fpr-1")).status,
    404,
    "nothing deployed before approval",
  );
  // A member approves it (the route needs a role that may change things).
  const approved = await lab.api("POST", "/v1/projects/pooled/previews/1/approve");
  assert.equal(approved.status, 202, JSON.stringify(approved.data));
  const preview = await verdict(approved.data.deployment_id);
  assert.equal(preview.status, "succeeded", preview.reason);
  // The pool is alpha's still: one copy of alpha's version, nothing of the pull request's.
  const all = (await lab.api("GET", "/v1/pools")).data.pools as any[];
  assert.deepEqual(
    all.map((p) => [p.version_id, p.size]),
    [[alphaVersion, 1]],
    JSON.stringify(all),
  );

  // A member's deploy of another environment declaring a pool leaves it as well.
  const other = await lab.api("POST", "/v1/projects/pooled/deploy?wait=true", { env: "scratch" });
  assert.equal(other.data.status, "succeeded", other.data.reason);
  assert.deepEqual(
    ((await lab.api("GET", "/v1/pools")).data.pools as any[]).map((p) => [p.version_id, p.size]),
    [[alphaVersion, 1]],
  );

  // The budget: one preview at a time; a second pull request is refused, saying why.
  const set = await lab.api("PUT", "/v1/projects/pooled/previews", { budget: 1 });
  assert.equal(set.status, 200, JSON.stringify(set.data));
  const second = await deliver("pull_request", pr(2, head, null));
  assert.deepEqual(second.data.deployments, []);
  assert.match(second.data.outcome, /keeps at most 1 previews at once, and 1 run \(pr-1\)/);
  // Forks off: a fork's pull request is refused outright.
  await lab.api("PUT", "/v1/projects/pooled/previews", { budget: 4, forks: "off" });
  const third = await deliver("pull_request", pr(3, head, "another/pooled"));
  assert.deepEqual(third.data.deployments, []);
  assert.match(third.data.outcome, /deploys no previews of pull requests from forks/);
  assert.deepEqual((await lab.api("GET", "/v1/projects/pooled/previews")).data.waiting, []);
});
