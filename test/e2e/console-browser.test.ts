/**
 * The console in a real browser (Debian's chromium, driven by playwright-core) against a real
 * server, denvd and engine: sign up; a `denv login` approved from the browser while the CLI waits;
 * a deploy watched live to its verdict; the fork tree after two forks and a snapshot made from the
 * page; a rolled-back deploy showing its reason; a new sandbox made on a target picked with that
 * target's row shown as it is picked; the exec terminal, streamed; another team's objects not
 * reachable by URL; a change without the CSRF token refused; sign out. With
 * DENV_CONSOLE_SCREENSHOTS=DIR the main pages are saved there (docs/console holds the README's).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { joinServer, Sidecar } from "@denv/denvd";
import { type RunningServer, startServer } from "@denv/server";
import {
  type Browser,
  type BrowserContext,
  chromium,
  type Locator,
  type Page,
  type Request,
} from "playwright-core";
import { type DaytonaDouble, startDaytonaDouble } from "../doubles/daytona-double.ts";
import { LOCAL_REGISTRY, openTestHost, repoRoot, type TestHost } from "../harness/test-host.ts";

const CHROMIUM = process.env.DENV_CHROMIUM ?? "/usr/bin/chromium";
const SHOTS = process.env.DENV_CONSOLE_SCREENSHOTS;
let server: RunningServer;
let host: TestHost;
let sidecar: Sidecar | undefined;
let dataDir: string;
let browser: Browser;
let ctx: BrowserContext;
let page: Page;
/** The key `denv login` got for the person: the test's own calls go through it. */
let key: string;
let alphaId: string;
/** A hosted provider connected beside the team's host, so the form has two targets to pick from. */
let daytona: DaytonaDouble;

async function api(method: string, path: string, body?: unknown) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, data: (await res.json()) as any };
}

/** What a locator's element shows as text (Playwright's, not the DOM's). */
const text = async (l: Locator) => (await l.textContent()) ?? "";

async function shot(name: string): Promise<void> {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

before(async () => {
  assert.ok(existsSync(CHROMIUM), `no browser at ${CHROMIUM}: scripts/ensure-chromium.sh installs Debian's`);
  dataDir = await mkdtemp(join(tmpdir(), "denv-console-"));
  daytona = await startDaytonaDouble();
  server = await startServer({
    dataDir,
    port: 0,
    fetchAllow: [...LOCAL_REGISTRY, new URL(daytona.url).host],
  });
  host = await openTestHost({});
  // As root, Chromium's own sandbox cannot start; the page it loads is this test's own server.
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  ctx = await browser.newContext({ viewport: { width: 1280, height: 860 }, colorScheme: "dark" });
  page = await ctx.newPage();
});

after(async () => {
  await browser?.close();
  if (key)
    for (const e of (await api("GET", "/v1/envs")).data.environments ?? [])
      await api("DELETE", `/v1/envs/${e.id}`);
  await sidecar?.stop();
  await server?.close();
  await host?.close();
  await daytona?.close();
  await rm(dataDir, { recursive: true, force: true });
});

describe("the console", () => {
  test("sign up: the first page asks to sign in; an account and its team are made", async () => {
    await page.goto(server.url);
    await page.waitForURL(/#\/login/);
    await page.getByRole("link", { name: "Create an account" }).click();
    // The sign-up form replaces the sign-in one once the page has read the session: typed into
    // before that, the email would land in the form being replaced.
    await page.getByRole("button", { name: "Create account" }).waitFor();
    await page.getByLabel("Email").fill("ada@example.com");
    await page.getByLabel("Password").fill("correct horse battery");
    await page.getByLabel("Team name").fill("analytical engines");
    await page.getByRole("button", { name: "Create account" }).click();
    await page.getByRole("heading", { name: "Environments" }).waitFor();
    assert.match(await text(page.locator("nav")), /ada@example\.com · analytical engines \(admin\)/);
    // What it takes to show: one script well under 300 KB.
    const js = await (await fetch(`${server.url}/console/console.js`)).text();
    assert.ok(js.length < 300 * 1024, `${js.length} bytes of script`);
    const paint = await page.evaluate(
      () => performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? null,
    );
    process.stdout.write(`# first contentful paint ${paint} ms, script ${js.length} bytes\n`);
  });

  test("denv login without a key: approved from the browser while the CLI waits", async () => {
    const config = join(dataDir, "cli", "config.json");
    const cli = spawn(
      process.execPath,
      [
        join(repoRoot, "packages/cli/bin/denv.js"),
        "login",
        server.url,
        "--no-browser",
        "--name",
        "ada-laptop",
      ],
      {
        env: { ...process.env, DENV_CONFIG: config, DENV_API_KEY: "", DENV_SERVER: "" },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let err = "";
    const url = await new Promise<string>((resolve) =>
      cli.stderr.on("data", (c: Buffer) => {
        err += c.toString();
        const m = /open (\S+)\n/.exec(err);
        if (m) resolve(m[1] as string);
      }),
    );
    const exited = new Promise<number | null>((r) => cli.on("close", r));
    await page.goto(url);
    await page.getByText("Asked by ada-laptop").waitFor();
    await shot("device-login");
    await page.getByRole("button", { name: "Approve" }).click();
    await page.getByText("Approved: the CLI is signed in").waitFor();
    assert.equal(await exited, 0, err);
    key = (JSON.parse(readFileSync(config, "utf8")) as { api_key: string }).api_key;
    assert.match(key, /^dk_/);
    // The new key is this person's, in their team: it joins the test's host to that team.
    const token = (await api("POST", "/v1/hosts/join-token")).data.token as string;
    const joined = await joinServer(server.url, token, "console-host");
    sidecar = new Sidecar({ serverUrl: server.url, secret: joined.secret, denvd: host.denvd });
    sidecar.start();
    await sidecar.ready;
  });

  test("a deploy watched live to its verdict, each phase's evidence readable", {
    timeout: 300_000,
  }, async () => {
    const compose = readFileSync(join(repoRoot, "examples/ops-world/docker-compose.yaml"), "utf8");
    await api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
    await api("PUT", "/v1/projects/ops-world/source", { compose });
    const d = await api("POST", "/v1/projects/ops-world/deploy", { env: "alpha" });
    assert.equal(d.status, 202, JSON.stringify(d.data));
    await page.goto(`${server.url}/#/deployment/${d.data.id}`);
    // The page follows the event stream: it reaches the verdict without a reload.
    await page.locator("#deployment-status").getByText("succeeded").waitFor({ timeout: 240_000 });
    assert.equal(await page.locator(".timeline > li").count(), 11);
    const verdict = page.locator("#phase-verdict");
    await verdict.locator("summary").click();
    assert.match(await text(verdict), /version ver_/);
    const health = page.locator("#phase-health");
    await health.locator("summary").click();
    assert.doesNotMatch(await text(health), /[{}]/, "evidence is laid out, not raw JSON");
    await shot("deployment");
    alphaId = (await api("GET", `/v1/envs/${encodeURIComponent("ops-world/alpha")}`)).data.id;
  });

  test("two forks and a snapshot from the page make the tree", { timeout: 300_000 }, async () => {
    const confirm = async (button: string) => {
      await page.locator(button).click();
      await page.locator("#confirm-ok").click();
      await page.locator("#deployment-status").getByText("succeeded").waitFor({ timeout: 120_000 });
    };
    for (const name of ["rollout-1", "rollout-2"]) {
      await page.goto(`${server.url}/#/env/${alphaId}`);
      await page.getByLabel("fork name").fill(name);
      await confirm("#act-fork");
    }
    const r1 = (await api("GET", `/v1/envs/${encodeURIComponent("ops-world/rollout-1")}`)).data;
    await page.goto(`${server.url}/#/env/${r1.id}`);
    await confirm("#act-snapshot");
    await page.goto(`${server.url}/#/`);
    const tree = page.getByRole("tree");
    await tree.waitFor();
    // alpha → its version → the two forks; rollout-1 → the snapshot's version.
    const node = (name: string) => tree.locator(`xpath=//li[span/a[normalize-space()='${name}']]`);
    const alphaVersion = (await api("GET", `/v1/envs/${alphaId}`)).data.current_version_id as string;
    for (const fork of ["ops-world/rollout-1", "ops-world/rollout-2"]) {
      // Each fork's node sits under alpha's version's node.
      const under = node("ops-world/alpha").locator(
        `xpath=.//li[span//code[normalize-space()='${alphaVersion}']]//li[span/a[normalize-space()='${fork}']]`,
      );
      assert.equal(await under.count(), 1, `${fork} under ${alphaVersion}: ${await text(tree)}`);
    }
    const snap = (await api("GET", `/v1/envs/${r1.id}/deployments`)).data.deployments.find(
      (d: any) => d.kind === "snapshot",
    );
    assert.match(await text(node("ops-world/rollout-1")), new RegExp(snap.version_id));
    await shot("environments");
  });

  test("from the page: a snapshot with processes says whose it kept; pause and resume keep memory", {
    timeout: 300_000,
  }, async () => {
    // An environment of this test's own (the verify below reads rollout-2 unchanged).
    const made3 = await api("POST", `/v1/envs/${alphaId}/fork`, { name: "rollout-3" });
    assert.equal(made3.status, 201, JSON.stringify(made3.data));
    const r2 = (await api("GET", `/v1/envs/${encodeURIComponent("ops-world/rollout-3")}`)).data;
    await page.goto(`${server.url}/#/env/${r2.id}`);
    await page.locator("#act-snapshot-live").click();
    await page.locator("#confirm-ok").click();
    await page.locator("#deployment-status").getByText("succeeded").waitFor({ timeout: 120_000 });
    const made = (await api("GET", `/v1/envs/${r2.id}/deployments`)).data.deployments.find(
      (d: any) => d.kind === "snapshot",
    );
    const phases = (await api("GET", `/v1/deployments/${made.id}`)).data.phases as any[];
    const live = phases.find((p) => p.name === "snapshot")?.evidence?.live;
    // Every service is either kept with its processes or said to be disk-only, with why.
    assert.deepEqual(
      [...Object.keys(live?.services ?? {}), ...Object.keys(live?.skipped ?? {})].sort(),
      ["db", "opsbox", "queue"],
      JSON.stringify(live),
    );
    await page.goto(`${server.url}/#/env/${r2.id}`);
    await page.locator("#act-pause").click();
    await page.locator("#confirm-ok").click();
    await page.locator("#act-resume").waitFor({ timeout: 120_000 });
    assert.equal((await api("GET", `/v1/envs/${r2.id}`)).data.status, "paused");
    await page.locator("#act-resume").click();
    await page.locator("#confirm-ok").click();
    await page.locator("#act-pause").waitFor({ timeout: 120_000 });
    assert.equal((await api("GET", `/v1/envs/${r2.id}`)).data.status, "running");
  });

  test("a verify's page shows what the episode changed; names and content the agent wrote are text", {
    timeout: 300_000,
  }, async () => {
    const r2 = (await api("GET", `/v1/envs/${encodeURIComponent("ops-world/rollout-2")}`)).data.id as string;
    const hostile = '<img src=x onerror="window.pwned=1">.txt';
    const ran = await api("POST", `/v1/envs/${r2}/exec`, {
      service: "opsbox",
      command: [
        "sh",
        "-c",
        'echo 7 > ~/answer.txt && printf "%s\\n" "<script>window.pwned=2</script>" > "$1"',
        "sh",
        `/home/ubuntu/${hostile}`,
      ],
    });
    assert.equal(ran.data.exit_code, 0, ran.data.stderr);
    const v = await api("POST", `/v1/envs/${r2}/verify`, {});
    assert.equal(v.data.status, "succeeded", v.data.reason);
    await page.goto(`${server.url}/#/deployment/${v.data.id}`);
    const diff = page.locator("#episode-diff");
    await diff.waitFor();
    // The agent's two files, and nothing else: the diff is read before the snapshot's checkpoint.
    assert.match(
      await text(page.locator("#phase-diff > details > summary")),
      /2 created · 0 modified · 0 deleted/,
    );
    assert.match(await text(diff), /home\/answer\.txt/);
    assert.ok((await text(diff)).includes(`home/${hostile}`), await text(diff));
    await diff.getByText("diff").first().click();
    assert.ok((await text(diff)).includes("+<script>window.pwned=2</script>"));
    assert.equal(await diff.locator("img, script").count(), 0, "nothing the agent wrote became markup");
    assert.equal(await page.evaluate("typeof window.pwned"), "undefined");
  });

  test("a rolled-back deploy shows its reason", { timeout: 300_000 }, async () => {
    const broken =
      'x-denv: { kind: agent }\nservices:\n  box:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    user: "1000:1000"\n    command: ["sh", "-c", "echo going; exit 3"]\n';
    await api("POST", "/v1/projects", { name: "broken", kind: "agent", source: "./broken" });
    await api("PUT", "/v1/projects/broken/source", { compose: broken });
    const d = await api("POST", "/v1/projects/broken/deploy?wait=true", { env: "alpha" });
    assert.equal(d.data.status, "rolled_back", JSON.stringify(d.data).slice(0, 300));
    await page.goto(`${server.url}/#/deployment/${d.data.id}`);
    await page.locator("#deployment-status").getByText("rolled back").waitFor();
    assert.match(await text(page.locator("#deployment-reason")), /box/);
    // The failed phase is open, its reason beside it.
    assert.ok(await page.locator(".phase.s-failed details[open]").count());
  });

  test("an environment's page shows its target and what that target can do", async () => {
    await page.goto(`${server.url}/#/env/${alphaId}`);
    await page.locator("#target-row").waitFor();
    assert.equal(await text(page.locator("#env-target")), "denvd");
    assert.equal(await page.locator("#target-row tr").count(), 8, "every cell of the row");
    assert.match(await text(page.locator('#target-row tr[data-cell="fork"]')), /✓/);
    // This machine has no GPU: the cell says so, from what its host reported.
    assert.match(
      await text(page.locator('#target-row tr[data-cell="gpu"]')),
      /✗ no host of the team can pass a GPU/,
    );
    // What the target does is offered: fork and snapshot are on for a running environment.
    assert.equal(await page.locator("#act-fork").isDisabled(), false);
  });

  test("a new sandbox: the picked target's row shows as it is picked, and the sandbox is made there", async () => {
    const connected = await api("POST", "/v1/clouds", {
      provider: "daytona",
      name: "daytona",
      token: daytona.apiKey,
      api_url: daytona.url,
    });
    assert.equal(connected.status, 201, JSON.stringify(connected.data));
    await page.goto(`${server.url}/#/`);
    const form = page.locator("#new-sandbox");
    await form.locator("#target-row").waitFor();
    assert.match(await text(form.locator("#target-h")), /What denvd \(denvd\) can do/);
    assert.match(await text(form.locator('#target-row tr[data-cell="fork"]')), /✓/);
    // Picking the hosted target shows its row: what it cannot do is marked before anything is made.
    await form.getByLabel("target").selectOption("daytona");
    await form.getByText("What daytona (daytona) can do").waitFor();
    assert.match(
      await text(form.locator('#target-row tr[data-cell="multi_service_stack"]')),
      /✗ no \(one container/,
    );
    assert.match(await text(form.locator('#target-row tr[data-cell="verify"]')), /✗/);
    assert.match(await text(form.locator("#target-row")), /not against the live Daytona/);
    assert.equal(daytona.sandboxes().length, 0, "picking makes nothing");
    // Back to the host, and created there: the page goes to the new environment, on denvd.
    await form.getByLabel("target").selectOption("denvd");
    await form.getByLabel("image").fill("127.0.0.1:5000/denv/opsbox:bookworm");
    await form.getByRole("button", { name: "Create" }).click();
    // The new environment's page, or the form's error (said, so a failure names its reason).
    await page.locator("#env-target").or(form.getByRole("alert")).first().waitFor({ timeout: 120_000 });
    if (await form.getByRole("alert").count()) assert.fail(await text(form.getByRole("alert")));
    assert.equal(await text(page.locator("#env-target")), "denvd");
    const id = decodeURIComponent(new URL(page.url()).hash.replace("#/env/", ""));
    assert.equal((await api("GET", `/v1/envs/${id}`)).data.sandbox, true);
    assert.equal(daytona.sandboxes().length, 0, "nothing was made at the provider");
    assert.equal((await api("DELETE", `/v1/envs/${id}?wait=true`)).data.status, "succeeded");
  });

  test("the exec terminal streams a command's output as it is written", async () => {
    await page.goto(`${server.url}/#/env/${alphaId}`);
    await page.getByLabel("service").selectOption("opsbox");
    await page.getByLabel("command").fill("echo hello-$((6*7)); id -un; sleep 4; echo tick-late");
    await page.getByRole("button", { name: "Run" }).click();
    const terminal = page.locator(".terminal");
    await terminal.getByText("hello-42").waitFor();
    // Shown while the command still runs: its last line is 4 s away, and Run waits for it.
    assert.doesNotMatch(await text(terminal), /\ntick-late\n/);
    assert.equal(await page.locator("#run").isDisabled(), true);
    await terminal.getByText("[exit 0]").waitFor({ timeout: 30_000 });
    assert.match(await text(terminal), /hello-42\nubuntu\ntick-late\n\[exit 0\]/);
    assert.doesNotMatch(await text(terminal), /\nroot\n/, "the agent is never root");
    await shot("environment");
  });

  test("an environment's logs: one service's last lines, or every service's, each named", async () => {
    await page.goto(`${server.url}/#/env/${alphaId}`);
    await page.getByLabel("logs of").selectOption("db");
    await page.getByRole("button", { name: "Show the last 200 lines" }).click();
    const logs = page.locator("#logs-out");
    await logs.getByText("ready to accept connections").first().waitFor();
    assert.ok(
      (await text(logs))
        .split("\n")
        .filter(Boolean)
        .every((l) => l.startsWith("db | ")),
      await text(logs),
    );
    await page.getByLabel("logs of").selectOption("");
    await page.getByRole("button", { name: "Show the last 200 lines" }).click();
    await logs.getByText("queue | ").first().waitFor();
  });

  test("another team's objects are not reachable by URL", async () => {
    const other = await browser.newContext();
    const p = await other.newPage();
    await p.goto(`${server.url}/#/signup`);
    await p.getByLabel("Email").fill("eve@example.com");
    await p.getByLabel("Password").fill("correct horse battery");
    await p.getByRole("button", { name: "Create account" }).click();
    // On a failure, what the page showed instead (a timeout alone says nothing).
    const landed = await p
      .getByRole("heading", { name: "Environments" })
      .waitFor()
      .then(
        () => "",
        async (err: Error) =>
          `${err.message}\nat ${p.url()} the page showed: ${(await text(p.locator("body"))).slice(0, 800)}`,
      );
    assert.equal(landed, "", landed);
    assert.match(await text(p.locator("main")), /No environments yet/);
    const deployment = (await api("GET", `/v1/envs/${alphaId}/deployments`)).data.deployments[0].id as string;
    for (const path of [`#/env/${alphaId}`, `#/deployment/${deployment}`]) {
      await p.goto(`${server.url}/${path}`);
      await p.getByRole("heading", { name: "Not found" }).waitFor();
    }
    await other.close();
  });

  test("a change without the session's CSRF token is refused, even from the console's own origin", async () => {
    // From a settled page: a page still streaming (an earlier test's logs or terminal) can have its
    // requests cut by its own re-render, which would fail the fetch before it is answered.
    await page.goto(`${server.url}/#/`);
    await page.getByRole("tree").waitFor();
    const status = await page.evaluate(async () => {
      const r = await fetch("/v1/projects", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "forged", kind: "agent", source: "./forged" }),
      });
      return r.status;
    });
    assert.equal(status, 403);
    assert.equal((await api("GET", "/v1/projects/forged")).status, 404, "nothing was made");
  });

  test("a page whose session read was overtaken by a newer one is not drawn over it", async () => {
    const other = await browser.newContext();
    const p = await other.newPage();
    // The first session read (the sign-up page's) answers late; every later one at once.
    let reads = 0;
    let lateRequest: (r: Request) => void = () => {};
    const late = new Promise<Request>((resolve) => (lateRequest = resolve));
    let releaseLate: () => void = () => {};
    const held = new Promise<void>((resolve) => (releaseLate = resolve));
    await p.route("**/v1/auth/session", async (r) => {
      if (reads++ === 0) {
        lateRequest(r.request());
        await held;
      }
      await r.continue();
    });
    await p.goto(`${server.url}/#/signup`);
    await p.evaluate("location.hash = '#/login'");
    await p.getByRole("button", { name: "Sign in" }).waitFor();
    const request = await late;
    releaseLate();
    await (await request.response())?.finished();
    // The late answer's render has had its turn: two frames after its body arrived.
    await p.evaluate("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))");
    assert.equal(await p.getByRole("button", { name: "Sign in" }).count(), 1, "the newer page stays");
    assert.equal(await p.getByRole("button", { name: "Create account" }).count(), 0);
    await other.close();
  });

  test("sign out: back to the sign-in page, and the session no longer opens anything", async () => {
    const cookies = await ctx.cookies();
    const session = cookies.find((c) => c.name === "__Host-denv_session");
    assert.ok(session?.httpOnly && session.secure && session.sameSite === "Strict", JSON.stringify(session));
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.waitForURL(/#\/login/);
    const replay = await fetch(`${server.url}/v1/projects`, {
      headers: { cookie: `__Host-denv_session=${session.value}` },
    });
    assert.equal(replay.status, 401);
    await page.goto(`${server.url}/#/keys`);
    await page.waitForURL(/#\/login/);
  });
});
