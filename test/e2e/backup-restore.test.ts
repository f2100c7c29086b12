/**
 * A server's backup restored onto a fresh server serves the same teams, keys and versions (issue
 * 70): `denv backup` taken while the server runs, the server gone, `denv restore` into an empty
 * directory, a new server started there, the host connected to it with its own identity — and a
 * version made before the backup forks there. Hostile archives (a path that climbs, a link, a name
 * a backup never holds) and a restore over a store are refused with nothing written.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { Sidecar } from "@denv/denvd";
import { type RunningServer, startServer } from "@denv/server";
import tar from "tar-stream";
import { type Lab, openLab } from "../harness/lab.ts";

const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
const CLI = join(import.meta.dirname, "../../packages/cli/bin/denv.js");
const work = mkdtempSync(join(tmpdir(), "denv-backup-"));
let lab: Lab;
let restored: RunningServer | null = null;
let sidecar: Sidecar | null = null;

const denv = async (...args: string[]) => {
  try {
    const r = await promisify(execFile)(process.execPath, [CLI, ...args], { encoding: "utf8" });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
};

before(async () => {
  lab = await openLab();
});

after(async () => {
  await sidecar?.stop().catch(() => {});
  await restored?.close().catch(() => {});
  await lab?.close();
  rmSync(work, { recursive: true, force: true });
});

test("a backup taken while the server runs, restored onto a fresh server, serves the same versions", async () => {
  await lab.api("POST", "/v1/projects", { name: "bk", kind: "agent", source: "./bk" });
  await lab.api("PUT", "/v1/projects/bk/source", {
    compose: `x-denv: { kind: agent }\nservices:\n  box:\n    image: ${OPSBOX}\n    command: ["sleep", "infinity"]\n    volumes: [w:/work]\nvolumes: { w: {} }\n`,
  });
  const d = await lab.api("POST", "/v1/projects/bk/deploy?wait=true", { env: "alpha" });
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data));
  const env = (await lab.api("GET", "/v1/envs/bk%2Falpha")).data;
  const versionId = env.current_version_id as string;
  assert.ok(versionId);
  // Taken while the server runs (and writes).
  const file = join(work, "denv.backup.tar");
  const b = await denv("backup", "--data-dir", lab.server.dataDir, file, "--json");
  assert.equal(b.code, 0, b.stderr);
  const summary = JSON.parse(b.stdout);
  assert.equal(summary.store, true);
  assert.ok(summary.files.includes("denv.sqlite") && summary.files.includes("secret.key"), b.stdout);
  assert.equal(statSync(file).mode & 0o777, 0o600, "the backup holds the sealing key: its owner's only");
  // The server is gone; the host stays, with its stacks and snapshots.
  await lab.sidecar.stop();
  await lab.server.close();
  const fresh = join(work, "restored");
  const r = await denv("restore", file, "--data-dir", fresh);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /restored \d+ file\(s\)/);
  restored = await startServer({ dataDir: fresh, fetchAllow: ["127.0.0.1:5000"] });
  assert.equal(restored.adminKey, null, "no new admin team: the restored store has one");
  sidecar = new Sidecar({ serverUrl: restored.url, secret: lab.hostSecret, denvd: lab.host.denvd });
  sidecar.start();
  await sidecar.ready;
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${restored?.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${lab.keyA}`,
        ...(body ? { "content-type": "application/json" } : {}),
      },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, data: (await res.json()) as any };
  };
  // The same key, the same version, the same environment.
  const v = await api("GET", `/v1/versions/${versionId}`);
  assert.equal(v.status, 200, JSON.stringify(v.data));
  assert.equal((await api("GET", "/v1/envs/bk%2Falpha")).data.current_version_id, versionId);
  // And it forks there: the host holds its snapshots, the restored store knows where.
  const fork = await api("POST", `/v1/versions/${versionId}/forks`, {
    count: 1,
    name_prefix: "after-restore",
  });
  assert.equal(fork.status, 200, JSON.stringify(fork.data));
  assert.equal(fork.data.created, 1, JSON.stringify(fork.data));
  const made = fork.data.forks[0].environment;
  const ran = await api("POST", `/v1/envs/${made.id}/exec`, { command: ["true"] });
  assert.equal(ran.data.exit_code, 0, JSON.stringify(ran.data));
  // Restoring again over it is refused: a restore never replaces a store.
  const again = await denv("restore", file, "--data-dir", fresh);
  assert.equal(again.code, 1);
  assert.match(again.stderr, /already holds a server's data/);
});

/** A tar of the given entries (name, type, body or link target). */
async function archive(path: string, entries: { name: string; type?: "file" | "symlink"; body?: string }[]) {
  const pack = tar.pack();
  for (const e of entries) {
    if (e.type === "symlink") pack.entry({ name: e.name, type: "symlink", linkname: "/etc/passwd" });
    else pack.entry({ name: e.name }, e.body ?? "x");
  }
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack) chunks.push(c as Buffer);
  writeFileSync(path, Buffer.concat(chunks));
}

test("a hostile archive is refused naming its entry, and nothing is written", async () => {
  const cases: [string, { name: string; type?: "file" | "symlink"; body?: string }[]][] = [
    ["climbs", [{ name: "secret.key" }, { name: "build-contexts/../../escaped" }]],
    ["absolute", [{ name: "secret.key" }, { name: "/tmp/denv-escaped" }]],
    ["a link", [{ name: "secret.key" }, { name: "build-contexts/t/x", type: "symlink" }]],
    ["another name", [{ name: "secret.key" }, { name: "authorized_keys" }]],
    ["no key", [{ name: "denv.sqlite" }]],
  ];
  for (const [what, entries] of cases) {
    const file = join(work, `hostile-${what.replace(/\W/g, "-")}.tar`);
    await archive(file, entries);
    const into = join(work, `into-${what.replace(/\W/g, "-")}`);
    const r = await denv("restore", file, "--data-dir", into);
    assert.equal(r.code, 2, `${what}: ${r.stdout}${r.stderr}`);
    assert.match(r.stderr, /is not a denv backup/, what);
    assert.ok(!existsSync(into) || readdirSync(into).length === 0, `${what}: nothing written`);
  }
  assert.ok(!existsSync("/tmp/denv-escaped"));
  assert.ok(!existsSync(join(work, "escaped")));
});
