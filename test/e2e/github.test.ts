/**
 * The GitHub App integration end to end against a local double of GitHub (github-double.ts) and a
 * real host: `denv github connect` and `denv project create --source github:OWNER/REPO` with the
 * real CLI, signed webhook deliveries that deploy alpha, branch and preview environments on the real
 * engine with check runs and deployments reported back, and the refusals (a bad signature, a
 * replayed delivery, an unknown installation, another team's App) that change nothing.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { chromium, type Page } from "playwright-core";
import { GitHubDouble } from "../doubles/github-double.ts";
import { cliRunner } from "../harness/cli-runner.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

const APP_ID = "424242";
const OTHER_APP_ID = "515151";
const SECRET = "a webhook secret of the App's";
const OTHER_SECRET = "the other team's webhook secret";
const INSTALLATION = 777;
const REPO = "acme/world";
const CHROMIUM = process.env.DENV_CHROMIUM ?? "/usr/bin/chromium";

let lab: Lab;
let gitRoot: string;
let double: GitHubDouble;
let otherKey: string;
let privateKey: string;
let otherPrivateKey: string;
let repoDir: string;
const cli = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));

function keyPair() {
  const { privateKey: priv, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  return {
    privatePem: priv.export({ type: "pkcs1", format: "pem" }).toString(),
    publicPem: publicKey.export({ type: "spki", format: "pem" }).toString(),
  };
}

const api = (method: string, path: string, body?: unknown, key: string | null = lab.keyA) =>
  lab.api(method, path, body, key);

async function deliver(
  event: string,
  payload: unknown,
  o: { appId?: string; secret?: string; id?: string } = {},
) {
  const d = double.delivery(o.appId ?? APP_ID, o.secret ?? SECRET, event, payload, o.id);
  const res = await fetch(`${lab.server.url}/v1/github/webhook`, {
    method: "POST",
    headers: d.headers,
    body: d.body,
  });
  return { status: res.status, data: (await res.json()) as any, id: d.headers["x-github-delivery"] };
}

function git(...args: string[]): string {
  return execFileSync("git", ["-C", repoDir, "-c", "user.name=t", "-c", "user.email=t@t", ...args], {
    encoding: "utf8",
  }).trim();
}

/** Commits the compose file (and any other files) on a branch; returns the commit. */
function commit(branch: string, compose: string, files: Record<string, string> = {}): string {
  git("checkout", "-q", "-B", branch);
  writeFileSync(join(repoDir, "compose.yaml"), compose);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(repoDir, name), text);
  git("add", "-A");
  git("commit", "-q", "--allow-empty", "-m", `on ${branch}`);
  return git("rev-parse", "HEAD");
}

const COMPOSE = (marker: string) =>
  `services:\n  box:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    command: [sleep, infinity]\n    environment:\n      MARKER: ${marker}\n    volumes:\n      - data:/data\nvolumes:\n  data: {}\n`;

const repository = { id: 9001, full_name: REPO, default_branch: "main", private: true };
/** Each push its own `before`, as GitHub's differ: the same body twice is a replay. */
let pushes = 0;
const pushPayload = (branch: string, after: string, extra: Record<string, unknown> = {}) => ({
  ref: `refs/heads/${branch}`,
  before: (++pushes).toString(16).padStart(40, "0"),
  after,
  created: false,
  deleted: false,
  installation: { id: INSTALLATION },
  repository,
  pusher: { name: "octo-dev" },
  sender: { login: "octo-dev" },
  ...extra,
});

/** Waits for a deployment's verdict by following its record (no fixed sleep decides anything). */
function verdict(id: string): Promise<any> {
  return waitFor(`deployment ${id}'s verdict`, async () => {
    const d = await api("GET", `/v1/deployments/${id}`);
    return d.data.status !== "running" && d.data.status !== "queued" ? d.data : undefined;
  });
}

/** Waits until the double has seen what the reporter sends once a deployment ends. */
function until<T>(what: string, read: () => T | undefined | null | false): Promise<T> {
  return waitFor(what, read) as Promise<T>;
}

/** A deployment's verdict, read with the person's session (her team's deployment). */
function verdictWith(page: Page, id: string): Promise<any> {
  return waitFor(`deployment ${id}'s verdict, read with the person's session`, async () => {
    const d = await (await page.request.get(`/v1/deployments/${id}`)).json();
    return d.status !== "running" && d.status !== "queued" ? d : undefined;
  });
}

async function execIn(env: string, command: string): Promise<{ exit_code: number; stdout: string }> {
  const r = await api("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, {
    service: "box",
    command: ["sh", "-c", command],
  });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  return r.data;
}

before(async () => {
  gitRoot = await mkdtemp(join(tmpdir(), "denv-gh-git-"));
  repoDir = join(gitRoot, "acme", "world.git");
  mkdirSync(repoDir, { recursive: true });
  execFileSync("git", ["init", "-q", "-b", "main", repoDir]);
  double = new GitHubDouble(gitRoot);
  await double.start();
  const mine = keyPair();
  const theirs = keyPair();
  privateKey = mine.privatePem;
  otherPrivateKey = theirs.privatePem;
  double.apps.set(APP_ID, { id: APP_ID, slug: "denv-acme", publicKeyPem: mine.publicPem });
  double.apps.set(OTHER_APP_ID, { id: OTHER_APP_ID, slug: "denv-other", publicKeyPem: theirs.publicPem });
  double.repos.set(REPO, { id: 9001, fullName: REPO, defaultBranch: "main" });
  double.installations.set(INSTALLATION, { appId: APP_ID, account: "acme", repos: [REPO] });
  // The other team's App is installed elsewhere, not on acme/world.
  double.installations.set(888, { appId: OTHER_APP_ID, account: "other", repos: [] });
  lab = await openLab({ fetchAllow: [...LOCAL_REGISTRY, double.host] });
  otherKey = (await lab.asTeam("other-team")).key;
});

after(async () => {
  for (const env of ["world/alpha", "world/feature-login", "world/pr-7", "world/pr-8"])
    await api("DELETE", `/v1/envs/${encodeURIComponent(env)}`).catch(() => {});
  await lab?.close();
  await double?.close();
  await rm(gitRoot, { recursive: true, force: true });
});

describe("GitHub App", () => {
  test("connect: the key is tried against GitHub before it is kept; a wrong key, a short secret or another team's App id are refused", async () => {
    const dir = await mkdtemp(join(tmpdir(), "denv-gh-keys-"));
    try {
      writeFileSync(join(dir, "app.pem"), privateKey);
      writeFileSync(join(dir, "wrong.pem"), otherPrivateKey);
      writeFileSync(join(dir, "secret"), `${SECRET}\n`);
      const wrong = await cli(
        "github",
        "connect",
        "--app-id",
        APP_ID,
        "--private-key",
        join(dir, "wrong.pem"),
        "--webhook-secret-file",
        join(dir, "secret"),
        "--api-url",
        double.url,
      );
      assert.notEqual(wrong.code, 0);
      assert.match(wrong.stderr, /GitHub did not accept App 424242 with this key/);
      const short = await api("POST", "/v1/github/apps", {
        app_id: APP_ID,
        private_key: privateKey,
        webhook_secret: "short",
        api_url: double.url,
      });
      assert.equal(short.status, 400);
      const offHost = await api("POST", "/v1/github/apps", {
        app_id: APP_ID,
        private_key: privateKey,
        webhook_secret: SECRET,
        api_url: "http://127.0.0.1:1",
      });
      assert.equal(offHost.status, 403);
      assert.match(offHost.data.error.message, /not a host this server fetches from/);
      assert.equal((await api("GET", "/v1/github/apps")).data.apps.length, 0);

      const ok = await cli(
        "github",
        "connect",
        "--app-id",
        APP_ID,
        "--private-key",
        join(dir, "app.pem"),
        "--webhook-secret-file",
        join(dir, "secret"),
        "--api-url",
        double.url,
      );
      assert.equal(ok.code, 0, ok.stderr);
      assert.match(ok.stdout, /connected GitHub App denv-acme \(424242\)/);
      assert.match(ok.stdout, /webhook URL: http:\/\/127\.0\.0\.1:\d+\/v1\/github\/webhook/);
      const apps = (await api("GET", "/v1/github/apps")).data.apps;
      assert.equal(apps.length, 1);
      assert.equal(JSON.stringify(apps).includes("PRIVATE KEY"), false);
      // The key and secret are sealed at rest.
      const row = await lab.server.store.selectFrom("github_apps").selectAll().executeTakeFirstOrThrow();
      assert.equal(row.private_key_sealed.includes("PRIVATE KEY"), false);
      assert.equal(row.webhook_secret_sealed.includes(SECRET), false);
      // An App id is one team's: another team cannot take its deliveries.
      const taken = await api(
        "POST",
        "/v1/github/apps",
        { app_id: APP_ID, private_key: privateKey, webhook_secret: SECRET, api_url: double.url },
        otherKey,
      );
      assert.equal(taken.status, 409);
      const other = await api(
        "POST",
        "/v1/github/apps",
        {
          app_id: OTHER_APP_ID,
          private_key: otherPrivateKey,
          webhook_secret: OTHER_SECRET,
          api_url: double.url,
        },
        otherKey,
      );
      assert.equal(other.status, 201, JSON.stringify(other.data));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test("project create --source github:OWNER/REPO binds the installation; a repository the App is not on is refused", async () => {
    const made = await cli(
      "project",
      "create",
      "--kind",
      "agent",
      "--source",
      `github:${REPO}`,
      "world",
      "--json",
    );
    assert.equal(made.code, 0, made.stderr);
    const p = JSON.parse(made.stdout);
    assert.equal(p.source_type, "github");
    assert.deepEqual(p.github, { installation_id: String(INSTALLATION), repository_id: "9001" });
    const repos = (await api("GET", "/v1/github/repositories")).data.installations;
    assert.deepEqual(
      repos.map((i: any) => [i.installation_id, i.repositories.map((r: any) => r.full_name)]),
      [[String(INSTALLATION), [REPO]]],
    );
    const missing = await api("POST", "/v1/projects", {
      name: "nope",
      kind: "agent",
      source: "github:acme/secret",
    });
    assert.equal(missing.status, 400);
    assert.match(
      missing.data.error.message,
      /none of the team's GitHub Apps is installed on it; install .*denv-acme/,
    );
    // The other team's App is not installed on acme/world: it cannot make a project of it.
    const theirs = await api(
      "POST",
      "/v1/projects",
      { name: "world", kind: "agent", source: `github:${REPO}` },
      otherKey,
    );
    assert.equal(theirs.status, 400);
    const bad = await api("POST", "/v1/projects", {
      name: "bad",
      kind: "agent",
      source: "github:acme/world@../x",
    });
    assert.equal(bad.status, 400);
  });

  test("a push to main deploys alpha at that commit; the check run ends success with the phase log's URL", async () => {
    const sha = commit("main", COMPOSE("one"));
    const r = await deliver("push", pushPayload("main", sha));
    assert.equal(r.status, 202, JSON.stringify(r.data));
    assert.equal(r.data.deployments.length, 1);
    const d = await verdict(r.data.deployments[0]);
    assert.equal(d.status, "succeeded", d.reason);
    assert.deepEqual(
      { ...d.phases[0].evidence.source },
      {
        type: "github",
        repository: REPO,
        commit: sha,
        ref: "main",
        path: null,
        file: "compose.yaml",
        trigger: "push",
        pushed_by: "octo-dev",
      },
    );
    assert.equal((await execIn("world/alpha", "echo $MARKER")).stdout.trim(), "one");
    const run = await until("the check run completed", () =>
      double.checkRuns.find((c) => c.external_id === d.id && c.status === "completed"),
    );
    assert.equal(run.conclusion, "success");
    assert.equal(run.head_sha, sha);
    assert.equal(run.details_url, `${lab.server.url}/#/deployment/${d.id}`);
    assert.equal(run.history[0], "queued");
    assert.ok(run.history.includes("in_progress"), run.history.join(","));
    assert.match(run.output?.summary ?? "", /\| resolve \| succeeded \| \d+ \|/);
    // No GitHub Deployment for alpha's pushes: the check run is their report.
    assert.equal(double.deployments.length, 0);
    const envs = (await api("GET", "/v1/projects/world/github")).data.environments;
    assert.deepEqual(
      envs.map((e: any) => [e.environment, e.trigger, e.commit, e.pushed_by, e.status]),
      [["alpha", "push", sha, "octo-dev", "running"]],
    );
  });

  test("a push that breaks the compose file is rolled back; the check run's failure names the phase", async () => {
    const good = (await api("GET", "/v1/envs/world%2Falpha")).data.current_version_id;
    const sha = commit("main", "services:\n  box:\n    image: [not, an, image]\n");
    const r = await deliver("push", pushPayload("main", sha));
    const d = await verdict(r.data.deployments[0]);
    assert.equal(d.status, "rolled_back");
    const run = await until("the failed check run", () =>
      double.checkRuns.find((c) => c.external_id === d.id && c.status === "completed"),
    );
    assert.equal(run.conclusion, "failure");
    assert.equal(run.output?.title, "rolled back at resolve");
    assert.match(run.output?.summary ?? "", /Phase \*\*resolve\*\* failed: the compose file was refused/);
    // alpha still serves what it served.
    assert.equal((await api("GET", "/v1/envs/world%2Falpha")).data.current_version_id, good);
    commit("main", COMPOSE("one"));
  });

  test("a bad signature, a replayed delivery, an unknown installation and another team's App change nothing", async () => {
    const sha = git("rev-parse", "main");
    const before = (await api("GET", "/v1/envs/world%2Falpha/deployments")).data.deployments.length;
    const deliveries = (await api("GET", "/v1/github/deliveries")).data.deliveries.length;

    const forged = await deliver("push", pushPayload("main", sha), { secret: "not the App's secret at all" });
    assert.equal(forged.status, 401);
    // The App's id is in a header anyone can write: an App no team connected is refused.
    const stranger = await deliver("push", pushPayload("main", sha), { appId: "999999" });
    assert.equal(stranger.status, 404);

    const genuine = pushPayload("main", sha);
    const first = await deliver("push", genuine);
    assert.equal(first.status, 202);
    await verdict(first.data.deployments[0]);
    const replay = await deliver("push", genuine, { id: first.id });
    assert.equal(replay.status, 409);
    assert.match(replay.data.outcome, /received already/);
    // The signature covers the body only: the same body under a fresh delivery id is a replay too.
    const renamed = await deliver("push", genuine);
    assert.notEqual(renamed.id, first.id);
    assert.equal(renamed.status, 409);

    const unknown = await deliver("push", { ...pushPayload("main", sha), installation: { id: 123456 } });
    assert.equal(unknown.status, 403);
    assert.match(unknown.data.outcome, /installation 123456 is not the one world read acme\/world through/);

    // The other team's App, signing a push to acme/world: none of its team's projects deploys it.
    const theirs = await deliver("push", pushPayload("main", sha), {
      appId: OTHER_APP_ID,
      secret: OTHER_SECRET,
    });
    assert.equal(theirs.status, 202);
    assert.deepEqual(theirs.data.deployments, []);
    assert.match(theirs.data.outcome, /ignored: no project of this App's team deploys acme\/world/);

    const afterCount = (await api("GET", "/v1/envs/world%2Falpha/deployments")).data.deployments.length;
    assert.equal(afterCount, before + 1, "only the one genuine delivery deployed");
    const seen = (await api("GET", "/v1/github/deliveries")).data.deliveries;
    // The forged and the unconnected App's were never recorded; the replay was not recorded again.
    assert.equal(seen.length, deliveries + 2);
    assert.equal((await api("GET", "/v1/github/deliveries", undefined, otherKey)).data.deliveries.length, 1);
  });

  test("a branch the project opted in deploys an environment named after it, destroyed when the branch is deleted", async () => {
    // The compose file's x-denv.branches, as alpha's current version has it.
    const withBranches = `${COMPOSE("one")}x-denv:\n  kind: agent\n  branches: ["hotfix/*"]\n`;
    const onMain = await deliver("push", pushPayload("main", commit("main", withBranches)));
    assert.equal((await verdict(onMain.data.deployments[0])).status, "succeeded");
    const hot = await deliver("push", pushPayload("hotfix/one", commit("hotfix/one", COMPOSE("hot"))));
    assert.equal(hot.data.deployments.length, 1, hot.data.outcome);
    assert.equal((await verdict(hot.data.deployments[0])).status, "succeeded");
    assert.equal((await execIn("world/hotfix-one", "echo $MARKER")).stdout.trim(), "hot");
    const hotGone = await deliver("push", { ...pushPayload("hotfix/one", "0".repeat(40)), deleted: true });
    assert.equal((await verdict(hotGone.data.deployments[0])).status, "succeeded");
    assert.equal((await api("GET", "/v1/envs/world%2Fhotfix-one")).status, 404);

    const ignored = await deliver(
      "push",
      pushPayload("feature/login", commit("feature/login", COMPOSE("login"))),
    );
    assert.match(ignored.data.outcome, /not a branch the project deploys/);
    assert.deepEqual(ignored.data.deployments, []);

    const set = await cli("project", "set", "world", "--branches", "feature/*", "--json");
    assert.equal(set.code, 0, set.stderr);
    assert.deepEqual(JSON.parse(set.stdout).branches, ["feature/*"]);
    const sha = git("rev-parse", "feature/login");
    const r = await deliver("push", pushPayload("feature/login", sha));
    assert.equal(r.status, 202, JSON.stringify(r.data));
    const d = await verdict(r.data.deployments[0]);
    assert.equal(d.status, "succeeded", d.reason);
    assert.equal((await execIn("world/feature-login", "echo $MARKER")).stdout.trim(), "login");
    const dep = await until("the branch's GitHub deployment succeeded", () =>
      double.deployments.find(
        (x) => x.environment === "world/feature-login" && x.statuses.some((s) => s.state === "success"),
      ),
    );
    assert.equal(dep.ref, sha);
    assert.equal(dep.transient_environment, false);
    const env = (await api("GET", "/v1/envs/world%2Ffeature-login")).data;
    assert.equal(dep.statuses.at(-1)?.environment_url, `${lab.server.url}/#/env/${env.id}`);

    const gone = await deliver("push", { ...pushPayload("feature/login", "0".repeat(40)), deleted: true });
    assert.equal(gone.status, 202, JSON.stringify(gone.data));
    assert.equal((await verdict(gone.data.deployments[0])).status, "succeeded");
    assert.equal((await api("GET", "/v1/envs/world%2Ffeature-login")).status, 404);
    await until("the branch's deployment inactive", () => dep.statuses.some((s) => s.state === "inactive"));
  });

  test("a pull request's preview deploys its head onto alpha's data and goes away when it closes; a fork's starts empty", async () => {
    // alpha's data: a file written into its volume, kept in a version by a snapshot.
    await execIn("world/alpha", "echo from-alpha > /data/note");
    const snap = await api("POST", "/v1/envs/world%2Falpha/snapshot");
    assert.equal(snap.data.status, "succeeded", snap.data.reason);
    const alphaVersion = (await api("GET", "/v1/envs/world%2Falpha")).data.current_version_id;
    const head = commit("login-page", COMPOSE("preview"));
    const pr = (action: string, number: number, fromFork = false, sha = head) => ({
      action,
      number,
      installation: { id: INSTALLATION },
      repository,
      sender: { login: "contributor" },
      pull_request: {
        number,
        head: { sha, ref: "login-page", repo: { full_name: fromFork ? "stranger/world" : REPO } },
        base: { ref: "main", repo: { full_name: REPO } },
      },
    });
    const opened = await deliver("pull_request", pr("opened", 7));
    assert.equal(opened.status, 202, JSON.stringify(opened.data));
    const d = await verdict(opened.data.deployments[0]);
    assert.equal(d.status, "succeeded", d.reason);
    const prepare = d.phases.find((p: any) => p.name === "prepare");
    assert.deepEqual(prepare.evidence.data_from, { version_id: alphaVersion, cloned: ["data"] });
    assert.equal((await api("GET", "/v1/envs/world%2Fpr-7")).data.parent_version_id, alphaVersion);
    assert.equal(
      (await execIn("world/pr-7", "cat /data/note; echo $MARKER")).stdout,
      "from-alpha\npreview\n",
    );
    // The preview's writes are its own: alpha's volume is untouched.
    await execIn("world/pr-7", "echo from-preview > /data/note");
    assert.equal((await execIn("world/alpha", "cat /data/note")).stdout, "from-alpha\n");
    const dep = await until("the preview's GitHub deployment succeeded", () =>
      double.deployments.find(
        (x) => x.environment === "world/pr-7" && x.statuses.some((s) => s.state === "success"),
      ),
    );
    assert.equal(dep.transient_environment, true);

    // A new push to the pull request: its preview is deployed again at the new head, onto alpha's data.
    const head2 = commit("login-page", COMPOSE("preview-2"));
    const synced = await deliver("pull_request", pr("synchronize", 7, false, head2));
    const sd = await verdict(synced.data.deployments[0]);
    assert.equal(sd.status, "succeeded", sd.reason);
    assert.equal(sd.phases[0].evidence.source.commit, head2);
    assert.equal(
      (await execIn("world/pr-7", "cat /data/note; echo $MARKER")).stdout,
      "from-alpha\npreview-2\n",
    );
    git("checkout", "-q", "login-page");
    git("reset", "-q", "--hard", head);

    // A fork's pull request waits for a member's approval of its head (the project's default).
    const fork = await deliver("pull_request", pr("opened", 8, true));
    assert.deepEqual(fork.data.deployments, []);
    assert.match(fork.data.outcome, /waiting: #8 is from a fork \(stranger\/world\)/);
    assert.deepEqual(
      (await api("GET", "/v1/projects/world/previews")).data.waiting.map((w: any) => [
        w.pull_request,
        w.commit,
      ]),
      [[8, head]],
    );
    const approved = await api("POST", "/v1/projects/world/previews/8/approve");
    assert.equal(approved.status, 202, JSON.stringify(approved.data));
    assert.equal(approved.data.commit, head);
    assert.deepEqual((await api("GET", "/v1/projects/world/previews")).data.waiting, []);
    const fd = await verdict(approved.data.deployment_id);
    assert.equal(fd.status, "succeeded", fd.reason);
    assert.equal(fd.phases.find((p: any) => p.name === "prepare").evidence.data_from, undefined);
    assert.equal(fd.phases[0].evidence.source.from_fork, true);
    assert.equal(
      (await execIn("world/pr-8", "cat /data/note 2>&1 || echo none")).stdout.trim().endsWith("none"),
      true,
    );

    const listed = (await api("GET", "/v1/projects/world/github")).data.environments;
    assert.deepEqual(
      listed
        .filter((e: any) => e.trigger === "preview")
        .map((e: any) => [e.environment, e.pull_request])
        .sort(),
      [
        ["pr-7", 7],
        ["pr-8", 8],
      ],
    );

    for (const n of [7, 8]) {
      const closed = await deliver("pull_request", pr("closed", n, n === 8));
      assert.equal(closed.status, 202, JSON.stringify(closed.data));
      assert.equal((await verdict(closed.data.deployments[0])).status, "succeeded");
      assert.equal((await api("GET", `/v1/envs/world%2Fpr-${n}`)).status, 404);
    }
    await until("the preview's deployment inactive", () => dep.statuses.some((s) => s.state === "inactive"));
    assert.deepEqual(
      (await api("GET", "/v1/projects/world/github")).data.environments
        .filter((e: any) => e.trigger === "preview")
        .map((e: any) => e.status),
      ["destroyed", "destroyed"],
    );
  });

  test("an environment a person made is never deployed over or destroyed by a branch or pull request of its name", async () => {
    const hand = await api("POST", "/v1/projects/world/deploy?wait=true", { env: "pr-9" });
    assert.equal(hand.data.status, "succeeded", hand.data.reason);
    const pr = {
      action: "closed",
      number: 9,
      installation: { id: INSTALLATION },
      repository,
      sender: { login: "contributor" },
      pull_request: {
        number: 9,
        head: { sha: git("rev-parse", "main"), ref: "x", repo: { full_name: REPO } },
        base: { ref: "main" },
      },
    };
    const closed = await deliver("pull_request", pr);
    assert.deepEqual(closed.data.deployments, []);
    assert.match(closed.data.outcome, /environment pr-9 exists and is not #9's preview/);
    assert.equal((await api("GET", "/v1/envs/world%2Fpr-9")).data.status, "running");
    assert.equal((await api("DELETE", "/v1/envs/world%2Fpr-9")).data.status, "succeeded");
  });

  test("the console: New project, a kind, a repository of an installation, deploy; the project page shows its previews", async () => {
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
    try {
      const ctx = await browser.newContext({ baseURL: lab.server.url });
      const page = await ctx.newPage();
      // A person joins the team (its host and its App) from an invitation, in the browser.
      const invited = await api("POST", "/v1/invitations", { email: "grace@example.com", role: "admin" });
      assert.equal(invited.status, 201, JSON.stringify(invited.data));
      await page.goto(`${lab.server.url}/#/join?invitation=${encodeURIComponent(invited.data.token)}`);
      await page.getByLabel("Email").fill("grace@example.com");
      await page.getByLabel("Password").fill("correct horse battery");
      await page.getByRole("button", { name: "Create account" }).click();
      await page.getByRole("heading", { name: "Environments" }).waitFor();
      const csrf = (await (await page.request.get("/v1/auth/session")).json()).csrf_token as string;

      await page.getByRole("link", { name: "Projects" }).click();
      await page.getByRole("button", { name: "New project" }).click();
      await page.getByLabel("kind", { exact: true }).selectOption("agent");
      await page.getByLabel("repository", { exact: true }).selectOption(REPO);
      assert.equal(await page.getByLabel("name", { exact: true }).inputValue(), "world");
      await page.getByLabel("name", { exact: true }).fill("world-ui");
      await page.getByRole("button", { name: "Create and deploy" }).click();
      await page.waitForURL(/#\/deployment\//);
      await page.locator("#deployment-status").getByText("succeeded").waitFor({ timeout: 240_000 });

      const head = git("rev-parse", "login-page");
      const opened = await deliver("pull_request", {
        action: "opened",
        number: 11,
        installation: { id: INSTALLATION },
        repository,
        sender: { login: "grace" },
        pull_request: {
          number: 11,
          head: { sha: head, ref: "login-page", repo: { full_name: REPO } },
          base: { ref: "main", repo: { full_name: REPO } },
        },
      });
      // Both of the team's projects of acme/world get the pull request's preview.
      assert.equal(opened.status, 202, JSON.stringify(opened.data));
      assert.equal(opened.data.deployments.length, 2, opened.data.outcome);
      for (const id of opened.data.deployments)
        assert.equal((await verdictWith(page, id)).status, "succeeded");
      await page.goto(`${lab.server.url}/#/project/world-ui`);
      const row = page.locator("#branches-previews tbody tr");
      await row.first().waitFor();
      const cells = await row.first().locator("td").allTextContents();
      assert.deepEqual(cells.slice(0, 5), [
        "pr-11",
        "pull request #11",
        head.slice(0, 12),
        "grace",
        "running",
      ]);
      assert.match((await page.locator("#project-envs").textContent()) ?? "", /alpha.*pr-11|pr-11.*alpha/s);
      for (const env of ["world-ui/pr-11", "world-ui/alpha", "world/pr-11"]) {
        const gone = await page.request.delete(`/v1/envs/${encodeURIComponent(env)}`, {
          headers: { "x-csrf-token": csrf },
        });
        assert.equal(gone.status(), 200, await gone.text());
      }
    } finally {
      await browser.close();
    }
  });
});
