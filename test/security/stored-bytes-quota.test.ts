/**
 * Issue 33, finding 4: anyone who signs up could fill the control plane's disk with build contexts
 * (2 GiB each, kept until that team next sent a source). Now each team has a quota of stored bytes,
 * counted as uploads arrive (parallel ones together), refused with `quota_exceeded` and the
 * figures; and contexts no project names expire on a timer. Real server and store, over HTTP.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { readdirSync, utimesSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { type RunningServer, startServer } from "@denv/server";
import { waitFor } from "../harness/wait-for.ts";

const ADMIN = `dk_quota_${randomBytes(8).toString("hex")}`;
const running: { server: RunningServer; dir: string }[] = [];

after(async () => {
  for (const r of running) {
    await r.server.close();
    await rm(r.dir, { recursive: true, force: true });
  }
});

async function serve(options: Parameters<typeof startServer>[0] extends infer O ? Partial<O> : never) {
  const dir = await mkdtemp(join(tmpdir(), "denv-quota-"));
  const server = await startServer({ dataDir: dir, port: 0, adminKey: ADMIN, ...options });
  running.push({ server, dir });
  const call = async (method: string, path: string, body?: unknown, key = ADMIN) => {
    const res = await fetch(`${server.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${key}`,
        ...(body instanceof Uint8Array ? {} : body ? { "content-type": "application/json" } : {}),
      },
      body: body instanceof Uint8Array ? body : body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, data: (await res.json()) as any };
  };
  return { server, dir, call };
}

const digestOf = (b: Uint8Array) => `sha256:${createHash("sha256").update(b).digest("hex")}`;

test("a team's uploads stop at its quota, with the figures; another team is not affected", async () => {
  const KiB = 1024;
  const { server, dir, call } = await serve({ teamQuotaBytes: 1000 * KiB });
  assert.equal(
    (await call("POST", "/v1/projects", { name: "big", kind: "service", source: "./big" })).status,
    201,
  );
  const upload = (b: Uint8Array, key = ADMIN, project = "big") =>
    call("PUT", `/v1/projects/${project}/contexts/${digestOf(b)}`, b, key);
  for (let i = 0; i < 2; i++) assert.equal((await upload(randomBytes(400 * KiB))).status, 200);
  const over = await upload(randomBytes(400 * KiB));
  assert.equal(over.status, 413, JSON.stringify(over.data));
  assert.equal(over.data.error.code, "quota_exceeded");
  assert.match(over.data.error.message, /quota of 1024000 bytes \(819200 stored\)/);
  // Two at once, each of which would fit alone, cannot pass together.
  const both = await Promise.all([upload(randomBytes(150 * KiB)), upload(randomBytes(150 * KiB))]);
  assert.deepEqual(both.map((r) => r.status).sort(), [200, 413], JSON.stringify(both.map((r) => r.data)));
  // Nothing half-written is left, and what was refused is not stored.
  const team = readdirSync(join(dir, "build-contexts"))[0] as string;
  const files = readdirSync(join(dir, "build-contexts", team));
  assert.equal(files.filter((f) => f.endsWith(".part")).length, 0, files.join(","));
  assert.equal(files.length, 3);
  // Another team has a quota of its own.
  const keyB = (await call("POST", "/v1/teams", { name: "other" })).data.api_key as string;
  assert.equal(
    (await call("POST", "/v1/projects", { name: "b", kind: "service", source: "./b" }, keyB)).status,
    201,
  );
  assert.equal((await upload(randomBytes(400 * KiB), keyB, "b")).status, 200);
  assert.ok(server.url);
});

test("contexts no project names expire on the timer; named ones stay", async () => {
  const { dir, call } = await serve({ contextExpiry: { everyMs: 50 } });
  assert.equal(
    (await call("POST", "/v1/projects", { name: "app", kind: "service", source: "./app" })).status,
    201,
  );
  const named = randomBytes(1000);
  const loose = randomBytes(1000);
  for (const b of [named, loose])
    assert.equal((await call("PUT", `/v1/projects/app/contexts/${digestOf(b)}`, b)).status, 200);
  const compose = "services:\n  app:\n    build: .\n    image: app:dev\nx-denv:\n  kind: service\n";
  const put = await call("PUT", "/v1/projects/app/source", {
    compose,
    build_contexts: { ".": digestOf(named) },
  });
  assert.equal(put.status, 200, JSON.stringify(put.data));
  // Both written two hours ago: past the grace an upload waiting for its source gets.
  const team = readdirSync(join(dir, "build-contexts"))[0] as string;
  const old = new Date(Date.now() - 2 * 3600_000);
  for (const b of [named, loose])
    utimesSync(join(dir, "build-contexts", team, `${digestOf(b).slice(7)}.tar`), old, old);
  const has = async (b: Uint8Array) => (await call("GET", `/v1/projects/app/contexts/${digestOf(b)}`)).status;
  // The timer runs every 50 ms: each poll waits for its next pass (no fixed budget).
  await waitFor("the timer to remove the loose upload", async () => (await has(loose)) === 404);
  assert.equal(await has(loose), 404);
  assert.equal(await has(named), 200);
});
