/**
 * Connect a target: one `curl | sh` line turns a fresh Debian host with Docker (made here, see
 * fresh-host-helpers.ts) into a joined denv host running denvd as one executable (no Node on it),
 * which then deploys ops-world. The host is installed from a previous build (another denvd, built
 * here with an earlier version number) and re-running the installer once the server serves the
 * current build upgrades it in place, with the same identity; a bad token,
 * an unreachable server, a missing Docker and an unsupported architecture change nothing.
 */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { type RunningServer, startServer } from "@denv/server";
import { LOCAL_REGISTRY, repoRoot } from "../denvd-helpers.ts";
import { bootFreshHost, type FreshHost, type Lab, openLab } from "./fresh-host-helpers.ts";

const DIST = join(repoRoot, "dist");
/** What the server serves: the previous build first, the current one for the upgrade. */
let served: string;
const FILES = ["denvd-linux-x86_64", "denvd-linux-aarch64", "denvd.version"];
const PREVIOUS_VERSION = `0.0.0-previous+${Date.now()}`;
const ADMIN = `dk_install_${Date.now()}`;
let lab: Lab;
let server: RunningServer;
let dataDir: string;
let host: FreshHost;

async function api(method: string, path: string, body?: unknown) {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(300_000),
  });
  return { status: res.status, data: (await res.json()) as any };
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
  // A second build of denvd, numbered as an earlier release, for the host to upgrade from.
  const previous = join(dataDir, "previous");
  execFileSync("bash", [join(repoRoot, "scripts/build-denvd.sh")], {
    env: { ...process.env, DENVD_VERSION: PREVIOUS_VERSION, DENVD_OUT: previous },
    stdio: ["ignore", "ignore", "inherit"],
  });
  served = join(dataDir, "served");
  mkdirSync(served);
  for (const f of FILES) copyFileSync(join(previous, f), join(served, f));
  // The server listens on this machine's address on the lab network only.
  server = await startServer({
    dataDir,
    adminKey: ADMIN,
    host: lab.gateway,
    port: 0,
    downloadsDir: served,
    fetchAllow: LOCAL_REGISTRY,
  });
  host = await bootFreshHost(lab, { name: `${lab.runId}-fresh` });
});

after(async () => {
  for (const e of (await api("GET", "/v1/envs").catch(() => ({ data: { environments: [] } }))).data
    .environments ?? [])
    await api("DELETE", `/v1/envs/${e.id}`).catch(() => {});
  await server?.close();
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
    assert.match(row, /\tx86_64\tdir\t\d+GiB free of \d+GiB, \d+ cpu, \d+GiB mem\t/);
    assert.ok(row.includes(`\t${PREVIOUS_VERSION}\ttrue\t`), row);
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

  test("once the server serves a newer build, running it again upgrades in place and keeps the host's identity", async () => {
    assert.equal((await host.sh("/usr/local/bin/denvd --version")).stdout.trim(), PREVIOUS_VERSION);
    const current = readFileSync(join(DIST, "denvd.version"), "utf8").trim();
    assert.notEqual(current, PREVIOUS_VERSION);
    for (const f of FILES) copyFileSync(join(DIST, f), join(served, f));
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
    assert.equal(hosts.length, 1);
    assert.equal(hosts[0].id, hostId);
    assert.equal(hosts[0].connected, true);
    assert.equal(hosts[0].version, current, "the host reports the new build");
    // The environment it ran before the upgrade is still there and answers.
    const env = (await api("GET", `/v1/envs/${encodeURIComponent("ops-world/alpha")}`)).data;
    const r2 = await api("POST", `/v1/envs/${env.id}/exec`, {
      service: "opsbox",
      command: ["echo", "still"],
    });
    assert.equal(r2.data.stdout, "still\n");
  });
});

describe("on a machine that runs systemd", () => {
  test("the installer sets up an enabled denvd unit, and an upgrade restarts it in place", {
    timeout: 300_000,
  }, async () => {
    const sd = await bootFreshHost(lab, { systemd: true });
    // Installed from the previous build, upgraded to the current one: the unit runs the new binary.
    for (const f of FILES) copyFileSync(join(dataDir, "previous", f), join(served, f));
    try {
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
      const host = (await api("GET", "/v1/hosts")).data.hosts.find((h: any) => h.name === "systemd-1");
      assert.ok(host?.connected, "joined and connected");
      const pidBefore = (await sd.sh("systemctl show -p MainPID --value denvd")).stdout.trim();
      assert.equal((await sd.sh("/usr/local/bin/denvd --version")).stdout.trim(), PREVIOUS_VERSION);
      for (const f of FILES) copyFileSync(join(DIST, f), join(served, f));
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
      assert.equal(again[0].id, host.id);
    } finally {
      await sd.remove();
    }
  });
});
