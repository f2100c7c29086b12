/**
 * Connect a target: one `curl | sh` line turns a fresh Debian host with Docker (made here, see
 * fresh-host-helpers.ts) into a joined denv host running denvd as one executable (no Node on it),
 * which then deploys ops-world. Everything starts as a previous release (PREVIOUS_COMMIT, before
 * the op journal, the statuses in denvd's hello and the people tables): its server, run from that
 * commit's sources, and its denvd, built from them. Then the release is upgraded as an operator
 * would: the server first (this checkout's, on the same store and port; the old denvd reconnects),
 * then the host, by re-running the installer: same identity, and the environment the old release
 * made still answers and forks. A bad token,
 * an unreachable server, a missing Docker and an unsupported architecture change nothing.
 */
import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { startServer } from "@denv/server";
import { bootFreshHost, type FreshHost, type Lab, openLab } from "../../harness/fresh-host.ts";
import { LOCAL_REGISTRY, repoRoot } from "../../harness/test-host.ts";

const DIST = join(repoRoot, "dist");
/** What the server serves: the previous build first, the current one for the upgrade. */
let served: string;
const FILES = ["denvd-linux-x86_64", "denvd-linux-aarch64", "denvd.version"];
/**
 * The release a host upgrades from: the last commit before crash safety changed denvd's state (its
 * op journal) and its hello (the statuses it reports). Built from its own sources, as released.
 */
const PREVIOUS_COMMIT = "a5f5324181ab1fe9ffa488e02c265cb2888e323a";
/** Where scripts/build-denvd.sh keeps what it fetched; builds kept between runs go there too. */
const BUILD_CACHE = "/var/cache/denv";
const PREVIOUS_VERSION = `0.0.0-previous+${PREVIOUS_COMMIT.slice(0, 12)}`;
const ADMIN = `dk_install_${Date.now()}`;
let lab: Lab;
/** The control plane running now: the previous release's (a process) until the upgrade, then this checkout's. */
let server: { url: string; close: () => Promise<void> };
let port: number;
/** The previous release's sources (git archive of PREVIOUS_COMMIT, with modules). */
let previousTree: string;
let dataDir: string;
let host: FreshHost;
/** A second fresh host, running systemd. */
let sdHost: FreshHost | undefined;
let sdHostId: string;

async function api(method: string, path: string, body?: unknown) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(300_000),
  });
  return { status: res.status, data: (await res.json()) as any };
}

/**
 * denvd as PREVIOUS_COMMIT had it, built into `out`: that commit's sources (git archive) with this
 * checkout's installed modules, except that @denv/* are the old tree's own packages; the build
 * script is today's (it takes the version and the output directory), the code built is the old one.
 */
function buildPrevious(tree: string): string {
  const has = spawnSync("git", ["-C", repoRoot, "cat-file", "-e", `${PREVIOUS_COMMIT}^{commit}`]);
  assert.equal(has.status, 0, `this clone lacks ${PREVIOUS_COMMIT} (a shallow clone?): the upgrade needs it`);
  mkdirSync(tree, { recursive: true });
  execFileSync("bash", [
    "-c",
    `git -C "$1" archive "$2" | tar -x -C "$3"`,
    "_",
    repoRoot,
    PREVIOUS_COMMIT,
    tree,
  ]);
  const modules = join(tree, "node_modules");
  mkdirSync(join(modules, "@denv"), { recursive: true });
  for (const e of readdirSync(join(repoRoot, "node_modules")))
    if (e !== "@denv") symlinkSync(join(repoRoot, "node_modules", e), join(modules, e));
  for (const dir of readdirSync(join(tree, "packages"))) {
    const pkg = join(tree, "packages", dir, "package.json");
    if (!existsSync(pkg)) continue;
    const name = (JSON.parse(readFileSync(pkg, "utf8")) as { name: string }).name;
    symlinkSync(join(tree, "packages", dir), join(modules, name));
  }
  for (const f of ["build-denvd.sh", "ensure-node.sh"])
    copyFileSync(join(repoRoot, "scripts", f), join(tree, "scripts", f));
  // Built into the machine's cache: the commit is fixed, so the script finds its inputs unchanged
  // from the last run and builds nothing (about 15 s of both cores otherwise), then copied out.
  const cached = join(BUILD_CACHE, `denvd-${PREVIOUS_VERSION}`);
  execFileSync("bash", [join(tree, "scripts/build-denvd.sh")], {
    cwd: tree,
    env: { ...process.env, DENVD_VERSION: PREVIOUS_VERSION, DENVD_OUT: cached },
    stdio: ["ignore", "ignore", "inherit"],
  });

  // The old sources really are different: its journal-less state is what the upgrade must read.
  assert.ok(!existsSync(join(tree, "packages/denvd/src/op-journal.ts")), "the old tree has no op journal");
  return cached;
}

async function freePort(host: string): Promise<number> {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, host, r));
  const { port: p } = probe.address() as { port: number };
  await new Promise((r) => probe.close(r));
  return p;
}

/** The previous release's `denv server`, run from its own sources, until it says where it listens. */
async function startPreviousServer(): Promise<{ url: string; close: () => Promise<void> }> {
  const child = spawn(
    process.execPath,
    [
      join(previousTree, "packages/cli/bin/denv.js"),
      "server",
      ...["--data-dir", dataDir, "--host", lab.gateway, "--port", String(port)],
      ...["--downloads-dir", served, "--allow-fetch", LOCAL_REGISTRY.join(",")],
    ],
    { env: { ...process.env, DENV_ADMIN_KEY: ADMIN }, stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  let err = "";
  child.stderr.on("data", (c: Buffer) => {
    err += c.toString();
  });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`the previous server did not start in 60 s: ${err}`)),
      60_000,
    );
    child.stdout.on("data", (c: Buffer) => {
      out += c.toString();
      const m = /listening on (\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1] as string);
      }
    });
    child.on("exit", (code) => reject(new Error(`the previous server exited (${code}): ${err}`)));
  });
  const close = async () => {
    if (child.exitCode !== null) return;
    const exited = new Promise((r) => child.on("exit", r));
    child.kill("SIGTERM");
    await exited;
  };
  return { url, close };
}

const installLine = (args: string) => `curl -fsSL ${server.url}/install.sh | sh -s -- ${args}`;
const nothingInstalled = async (h: FreshHost) =>
  (
    await h.sh(
      "test -e /usr/local/bin/denvd || test -e /var/lib/denvd || test -e /etc/systemd/system/denvd.service",
    )
  ).exitCode === 1;

before(async () => {
  assert.ok(
    existsSync(join(DIST, "denvd-linux-x86_64")),
    "dist/ has no denvd build: run scripts/build-denvd.sh",
  );
  lab = await openLab();
  dataDir = await mkdtemp(join(tmpdir(), "denv-install-"));
  previousTree = join(dataDir, "previous-tree");
  const previous = buildPrevious(previousTree);
  served = join(dataDir, "served");
  mkdirSync(served);
  for (const f of FILES) copyFileSync(join(previous, f), join(served, f));
  // The server listens on this machine's address on the lab network only, on a port that stays
  // the same across the upgrade (the host's config names it).
  port = await freePort(lab.gateway);
  server = await startPreviousServer();
  host = await bootFreshHost(lab, { name: `${lab.runId}-fresh` });
});

after(async () => {
  for (const e of (await api("GET", "/v1/envs").catch(() => ({ data: { environments: [] } }))).data
    .environments ?? [])
    await api("DELETE", `/v1/envs/${e.id}`).catch(() => {});
  await server?.close();
  await sdHost?.remove();
  await lab?.close();
  await rm(dataDir, { recursive: true, force: true });
});

describe("the installer", () => {
  test("the fresh host has Docker and nothing of denv (no Node either)", async () => {
    assert.equal((await host.sh("docker info >/dev/null && echo ok")).stdout.trim(), "ok");
    assert.notEqual((await host.sh("command -v node || command -v nodejs || command -v npm")).exitCode, 0);
    assert.ok(await nothingInstalled(host));
  });

  test("a bad token, an unreachable server, no Docker and an unknown architecture change nothing", async () => {
    const bad = await host.sh(installLine(`--token djt_not-a-token --server ${server.url}`));
    assert.equal(bad.exitCode, 1);
    assert.match(bad.stderr, /joining failed: .*not valid/);
    const unreachable = await host.sh(
      `curl -fsSL ${server.url}/install.sh | sh -s -- --token djt_x --server http://${lab.gateway}:1`,
    );
    assert.equal(unreachable.exitCode, 1);
    // The previous release's installer (this server is that release until it is upgraded below).
    assert.match(unreachable.stderr, /cannot reach the denv server at http:\/\/.*:1/);
    const arch = await host.sh(
      `mkdir -p /tmp/fake && printf '#!/bin/sh\\necho riscv64\\n' > /tmp/fake/uname && chmod +x /tmp/fake/uname && curl -fsSL ${server.url}/install.sh | PATH=/tmp/fake:$PATH sh -s -- --token djt_x --server ${server.url}`,
    );
    assert.equal(arch.exitCode, 1);
    assert.match(arch.stderr, /unsupported architecture riscv64: denvd is built for x86_64 and aarch64/);
    assert.ok(await nothingInstalled(host), "a refused install left something behind");

    const noEngine = await bootFreshHost(lab, { docker: false });
    const stopped = await noEngine.sh(installLine(`--token djt_x --server ${server.url}`));
    assert.equal(stopped.exitCode, 1);
    assert.match(stopped.stderr, /Docker is installed but its engine does not answer/);
    assert.ok(await nothingInstalled(noEngine));
    await noEngine.sh("rm -f /usr/bin/docker");
    const none = await noEngine.sh(installLine(`--token djt_x --server ${server.url}`));
    assert.match(none.stderr, /Docker is not installed: install it first/);
    assert.ok(await nothingInstalled(noEngine));
    await noEngine.remove();
    assert.equal((await api("GET", "/v1/hosts")).data.hosts.length, 0, "no host joined");
  });

  let hostId: string;
  test("one curl | sh line installs denvd, joins, and reports what the host is", async () => {
    const token = (await api("POST", "/v1/hosts/join-token")).data.token as string;
    const r = await host.sh(installLine(`--token ${token} --server ${server.url} --name fresh-1`));
    assert.equal(r.exitCode, 0, r.stdout + r.stderr);
    assert.ok(r.stdout.includes(`installed denvd ${PREVIOUS_VERSION} and joined`), r.stdout);
    assert.match(r.stdout, /systemd is not running here/); // this host has no systemd: it says so
    assert.match(r.stdout, /this host reported: \{.*"storage":"dir"/);
    const { hosts } = (await api("GET", "/v1/hosts")).data;
    assert.equal(hosts.length, 1);
    const [h] = hosts;
    assert.equal(h.name, "fresh-1");
    assert.equal(h.arch, "x86_64");
    assert.equal(h.storage, "dir");
    assert.equal(h.version, PREVIOUS_VERSION);
    assert.equal(h.connected, true);
    assert.ok(h.capacity.cpus >= 1 && h.capacity.total_bytes > 0 && h.last_seen);
    hostId = h.id;
    // What people see: denv host list (asynchronously: the server runs in this process).
    const listed = await new Promise<string>((resolve) => {
      const child = spawn(
        process.execPath,
        [
          join(repoRoot, "packages/cli/bin/denv.js"),
          "--server",
          server.url,
          "--api-key",
          ADMIN,
          "host",
          "list",
        ],
        { stdio: ["ignore", "pipe", "inherit"] },
      );
      let out = "";
      child.stdout.on("data", (c: Buffer) => {
        out += c.toString();
      });
      child.on("close", () => resolve(out));
    });
    const row = listed.split("\n").find((l) => l.includes("fresh-1")) ?? "";
    // Columns aligned, two spaces at least between them (a cell may hold single spaces).
    assert.match(row, / {2}x86_64 {2,}dir {2,}\d+GiB free of \d+GiB, \d+ cpu, \d+GiB mem {2}/);
    assert.match(row, new RegExp(` {2}${PREVIOUS_VERSION.replace(/[.+]/g, "\\$&")} {2,}true {2}`), row);
    // The token was single-use.
    const again = await fetch(`${server.url}/v1/hosts/join`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token, name: "copycat" }),
    });
    assert.equal(again.status, 401);
  });

  test("the new host deploys ops-world and serves its data", { timeout: 600_000 }, async () => {
    const compose = readFileSync(join(repoRoot, "examples/ops-world/docker-compose.yaml"), "utf8");
    await api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
    await api("PUT", "/v1/projects/ops-world/source", { compose });
    const d = await fetch(`${server.url}/v1/projects/ops-world/deploy?wait=true`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      body: JSON.stringify({ env: "alpha" }),
      signal: AbortSignal.timeout(600_000),
    }).then((res) => res.json() as Promise<any>);
    assert.equal(d.status, "succeeded", JSON.stringify(d.phases.find((p: any) => p.status === "failed")));
    assert.equal(d.phases.find((p: any) => p.name === "place").evidence.host_id, hostId);
    const env = (await api("GET", `/v1/envs/${encodeURIComponent("ops-world/alpha")}`)).data;
    const count = await api("POST", `/v1/envs/${env.id}/exec`, {
      service: "opsbox",
      command: ["psql", "-tAc", "select count(*) from orders"],
    });
    assert.equal(count.data.stdout.trim(), "100000");
    // The stack runs in the fresh host's own engine, not this machine's.
    const inside = await host.sh("docker ps --format '{{.Names}}'");
    assert.match(inside.stdout, /opsbox/);
  });

  test("on a machine that runs systemd, the installer sets up an enabled denvd unit", async () => {
    const sd = await bootFreshHost(lab, { systemd: true });
    sdHost = sd;
    const token = (await api("POST", "/v1/hosts/join-token")).data.token as string;
    const r = await sd.sh(installLine(`--token ${token} --server ${server.url} --name systemd-1`));
    assert.equal(r.exitCode, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /running as systemd service denvd/);
    assert.doesNotMatch(r.stdout, /systemd is not running here/);
    assert.equal((await sd.sh("systemctl is-enabled denvd")).stdout.trim(), "enabled");
    assert.equal((await sd.sh("systemctl is-active denvd")).stdout.trim(), "active");
    assert.match(
      (await sd.sh("cat /etc/systemd/system/denvd.service")).stdout,
      /ExecStart=\/usr\/local\/bin\/denvd run/,
    );
    const joined = (await api("GET", "/v1/hosts")).data.hosts.find((h: any) => h.name === "systemd-1");
    assert.ok(joined?.connected, "joined and connected");
    sdHostId = joined.id;
    assert.equal((await sd.sh("/usr/local/bin/denvd --version")).stdout.trim(), PREVIOUS_VERSION);
  });

  test("the server is upgraded first: this checkout's, on the previous release's store; the old denvd is told to upgrade", async () => {
    await server.close();
    const upgradedAt = new Date().toISOString();
    for (const f of FILES) copyFileSync(join(DIST, f), join(served, f));
    const current = await startServer({
      dataDir,
      host: lab.gateway,
      port,
      downloadsDir: served,
      fetchAllow: LOCAL_REGISTRY,
    });
    server = current;
    assert.equal(current.adminKey, null, "the store was the previous release's: no first start");
    // The store's migrations ran on the old records: the environment is there.
    const env = (await api("GET", `/v1/envs/${encodeURIComponent("ops-world/alpha")}`)).data;
    assert.equal(env.status, "running", JSON.stringify(env));
    // The old denvd speaks an older protocol: refused at hello (told to upgrade), not taken on to
    // fail each deploy with "Unrecognized key". The host list shows it was heard from since the
    // upgrade, what it runs, and that it is not connected.
    const deadline = Date.now() + 60_000;
    for (;;) {
      const hosts = (await api("GET", "/v1/hosts")).data.hosts as any[];
      const refused = hosts.filter(
        (h) => h.version === PREVIOUS_VERSION && h.connected === false && h.last_seen > upgradedAt,
      );
      if (refused.length === 2) break;
      assert.ok(Date.now() < deadline, `the old denvds' hellos were not answered: ${JSON.stringify(hosts)}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  });

  test("once the server serves a newer build, running it again upgrades in place and keeps the host's identity", async () => {
    assert.equal((await host.sh("/usr/local/bin/denvd --version")).stdout.trim(), PREVIOUS_VERSION);
    const current = readFileSync(join(DIST, "denvd.version"), "utf8").trim();
    assert.notEqual(current, PREVIOUS_VERSION);
    const before = (await host.sh("cat /var/lib/denvd/host.json")).stdout;
    const r = await host.sh(installLine(`--server ${server.url}`));
    assert.equal(r.exitCode, 0, r.stderr);
    assert.ok(
      r.stdout.includes(`upgraded denvd ${PREVIOUS_VERSION} -> ${current}, same host identity`),
      r.stdout,
    );
    assert.equal((await host.sh("/usr/local/bin/denvd --version")).stdout.trim(), current);
    assert.equal((await host.sh("cat /var/lib/denvd/host.json")).stdout, before);
    // The old denvd stopped: exactly one runs, the new one.
    // (by executable: a replaced binary shows as "…/denvd (deleted)"; a reaped zombie has none)
    const running = await host.sh(
      'for p in /proc/[0-9]*; do case "$(readlink "$p/exe" 2>/dev/null)" in /usr/local/bin/denvd*) echo "$p";; esac; done | wc -l',
    );
    assert.equal(running.stdout.trim(), "1");
    const { hosts } = (await api("GET", "/v1/hosts")).data;
    const fresh = (hosts as any[]).filter((h) => h.name === "fresh-1");
    assert.equal(fresh.length, 1);
    assert.equal(fresh[0].id, hostId);
    assert.equal(fresh[0].connected, true);
    assert.equal(fresh[0].version, current, "the host reports the new build");
    // The environment it ran before the upgrade is still there and answers.
    const env = (await api("GET", `/v1/envs/${encodeURIComponent("ops-world/alpha")}`)).data;
    const r2 = await api("POST", `/v1/envs/${env.id}/exec`, {
      service: "opsbox",
      command: ["echo", "still"],
    });
    assert.equal(r2.data.stdout, "still\n");
    // The new denvd forks what the old one made: its stack records, datasets and version.
    const fork = await api("POST", `/v1/envs/${env.id}/fork`, { name: "after-upgrade" });
    if (fork.status !== 201) console.error((await host.sh("tail -40 /var/log/denvd.log")).stdout);
    assert.equal(fork.status, 201, JSON.stringify(fork.data));
    const forked = await api("POST", `/v1/envs/${fork.data.id}/exec`, {
      service: "opsbox",
      command: ["psql", "-tAc", "select count(*) from orders"],
    });
    assert.equal(forked.data.stdout.trim(), "100000", JSON.stringify(forked.data));
  });

  test("the systemd host's upgrade restarts its unit in place, on the new binary", async () => {
    const sd = sdHost;
    assert.ok(sd, "the systemd host was installed");
    const pidBefore = (await sd.sh("systemctl show -p MainPID --value denvd")).stdout.trim();
    const current = readFileSync(join(DIST, "denvd.version"), "utf8").trim();
    const up = await sd.sh(installLine(`--server ${server.url}`));
    assert.equal(up.exitCode, 0, up.stderr);
    assert.ok(up.stdout.includes(`upgraded denvd ${PREVIOUS_VERSION} -> ${current}`), up.stdout);
    assert.equal((await sd.sh("/usr/local/bin/denvd --version")).stdout.trim(), current);
    assert.match(up.stdout, /upgraded denvd .* same host identity; running as systemd service denvd/);
    const pidAfter = (await sd.sh("systemctl show -p MainPID --value denvd")).stdout.trim();
    assert.notEqual(pidAfter, pidBefore, "the service was restarted on the new binary");
    assert.equal((await sd.sh("systemctl is-active denvd")).stdout.trim(), "active");
    const again = (await api("GET", "/v1/hosts")).data.hosts.filter((h: any) => h.name === "systemd-1");
    assert.equal(again.length, 1);
    assert.equal(again[0].id, sdHostId);
    assert.equal(again[0].connected, true);
  });
});
