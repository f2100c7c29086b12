/**
 * The control plane's hygiene: what it keeps at rest, who DENV_ADMIN_KEY belongs to, port URLs that
 * die with their environment, rollbacks within an environment, limits on every route and every key,
 * event streams that do not leak, and errors in denv's words (never the engine's, never a
 * container id).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { statSync } from "node:fs";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { startServer } from "@denv/server";
import { type Lab, openLab } from "../harness/lab.ts";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";
import { elapse } from "../harness/wait-for.ts";

const CANARY = `canary-${randomBytes(8).toString("hex")}`;
let lab: Lab;
/** Set: the rate limiter's clock stands at this instant (performance.now). */
let limiterNow: number | null = null;
/** Every error body and deployment reason the tests saw, to check for the engine's words. */
const errorTexts: string[] = [];

async function call(method: string, path: string, body?: unknown, key?: string) {
  const r = await lab.api(method, path, body, key);
  if (r.status >= 400 && r.data?.error) errorTexts.push(JSON.stringify(r.data));
  if (r.data?.phases)
    for (const p of r.data.phases as { reason: string | null }[]) if (p.reason) errorTexts.push(p.reason);
  return r;
}

const box = (extra = "") =>
  `services:\n  box:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    command: [sleep, infinity]\n${extra}`;

async function project(name: string, compose: string, dotenv?: string) {
  assert.equal((await call("POST", "/v1/projects", { name, kind: "agent", source: "./x" })).status, 201);
  assert.equal((await call("PUT", `/v1/projects/${name}/source`, { compose, dotenv })).status, 200);
}

before(async () => {
  // The limiter's clock stands still while the burst test runs: on a busy machine 700 requests
  // may take long enough to refill the bucket, and the test is about the count, not the machine.
  lab = await openLab({
    rateLimit: { perSecond: 200, burst: 400, clock: () => limiterNow ?? performance.now() },
  });
});

after(async () => {
  await lab?.close();
});

describe("at rest", () => {
  test("the store is readable by the server's user only", async () => {
    const dir = lab.server.dataDir;
    assert.equal(statSync(dir).mode & 0o777, 0o700);
    for (const f of await readdir(dir)) {
      if (f.startsWith("denv.sqlite") || f === "secret.key")
        assert.equal(statSync(join(dir, f)).mode & 0o777, 0o600, f);
    }
  });

  test(".env text, compose text and resolved specs are sealed; the deploy still reads them", async () => {
    await project("sealed", box(`    environment: { TOKEN: "\${SECRET}" }\n`), `SECRET=${CANARY}\n`);
    const d = (await call("POST", "/v1/projects/sealed/deploy?wait=true", {})).data;
    assert.equal(d.status, "succeeded", d.reason);
    const env = (await call("POST", `/v1/envs/${d.environment_id}/exec`, { command: "echo $TOKEN" })).data;
    assert.equal(env.stdout, `${CANARY}\n`);
    const rows = [
      ...(await lab.server.store.selectFrom("projects").select(["compose_text", "dotenv_text"]).execute()),
      ...(await lab.server.store.selectFrom("versions").select("spec_json").execute()),
    ];
    const raw = JSON.stringify(rows);
    assert.ok(!raw.includes(CANARY), "the secret is not in the store in clear");
    assert.ok(!raw.includes("opsbox:bookworm"), "nor the compose file or spec");
    await call("DELETE", `/v1/envs/${d.environment_id}`);
  });
});

describe("the admin key", () => {
  test("DENV_ADMIN_KEY belongs to the admin team on every start, and never to another team's key", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "denv-sec-admin-"));
    try {
      const first = await startServer({
        dataDir,
        adminKey: "dk_first_admin_key_1234",
        fetchAllow: LOCAL_REGISTRY,
      });
      const teamB = await fetch(`${first.url}/v1/teams`, {
        method: "POST",
        headers: { authorization: "Bearer dk_first_admin_key_1234", "content-type": "application/json" },
        body: JSON.stringify({ name: "b" }),
      }).then((r) => r.json() as Promise<{ api_key: string; team_id: string }>);
      await first.close();
      const second = await startServer({
        dataDir,
        adminKey: "dk_second_admin_key_5678",
        fetchAllow: LOCAL_REGISTRY,
      });
      const row = await second.store
        .selectFrom("api_keys")
        .innerJoin("teams", "teams.id", "api_keys.team_id")
        .select(["teams.admin", "api_keys.admin as key_admin", "teams.id"])
        .where("api_keys.name", "=", "admin (from environment)")
        .executeTakeFirstOrThrow();
      assert.equal(row.admin, 1);
      assert.equal(row.key_admin, 1);
      assert.notEqual(row.id, teamB.team_id);
      await second.close();
      await assert.rejects(
        startServer({ dataDir, adminKey: teamB.api_key, fetchAllow: LOCAL_REGISTRY }),
        /another team, or not an admin key/,
      );
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe("port URLs", () => {
  test("listed without tokens, revoked per port or all, revoked on destroy, and never revived by a redeploy", async () => {
    await project("ported", box());
    const d = (await call("POST", "/v1/projects/ported/deploy?wait=true", { env: "web" })).data;
    assert.equal(d.status, "succeeded", d.reason);
    const env = d.environment_id as string;
    const a = (await call("POST", `/v1/envs/${env}/ports/8000`, {})).data.url as string;
    const b = (await call("POST", `/v1/envs/${env}/ports/9000`, {})).data.url as string;
    const listed = (await call("GET", `/v1/envs/${env}/ports`)).data.ports;
    assert.deepEqual(listed.map((p: any) => p.port).sort(), [8000, 9000]);
    assert.ok(!JSON.stringify(listed).includes("dpu_"), "no token is listed");
    assert.equal((await call("DELETE", `/v1/envs/${env}/ports/8000`)).data.revoked, 1);
    assert.equal((await fetch(`${a}/`)).status, 404);
    assert.notEqual((await fetch(`${b}/`)).status, 404); // still a URL (nothing listens: 503)
    assert.equal(
      (await call("DELETE", `/v1/envs/${encodeURIComponent("ported/web")}`)).data.status,
      "succeeded",
    );
    assert.equal((await fetch(`${b}/`)).status, 404);
    const again = (await call("POST", "/v1/projects/ported/deploy?wait=true", { env: "web" })).data;
    assert.equal(again.status, "succeeded", again.reason);
    assert.notEqual(again.environment_id, env, "a new environment, not the old one back");
    assert.equal((await fetch(`${b}/`)).status, 404);
    assert.deepEqual((await call("GET", `/v1/envs/${again.environment_id}/ports`)).data.ports, []);
    await call("DELETE", `/v1/envs/${again.environment_id}`);
  });
});

describe("rollback", () => {
  test("only to a version of the same environment (or the one it was forked from)", async () => {
    await project("rb", box());
    const one = (await call("POST", "/v1/projects/rb/deploy?wait=true", { env: "one" })).data;
    const two = (await call("POST", "/v1/projects/rb/deploy?wait=true", { env: "two" })).data;
    const v1 = one.phases.at(-1).evidence.version_id;
    const v2 = two.phases.at(-1).evidence.version_id;
    const r = await call("POST", `/v1/envs/${two.environment_id}/rollback`, { version: v1 });
    assert.equal(r.status, 400);
    assert.match(r.data.error.message, /not a version of environment two/);
    const own = await call("POST", `/v1/envs/${two.environment_id}/rollback`, { version: v2 });
    assert.equal(own.data.status, "succeeded");
    const fork = (await call("POST", `/v1/envs/${one.environment_id}/fork`, { name: "child" })).data;
    const parent = await call("POST", `/v1/envs/${fork.id}/rollback`, { version: v1 });
    assert.equal(parent.data.status, "succeeded");
    for (const id of [one.environment_id, two.environment_id, fork.id])
      await call("DELETE", `/v1/envs/${id}`);
  });
});

describe("limits", () => {
  test("every route refuses a body over its limit, before reading it", async () => {
    const big = new Uint8Array(2 * 1024 * 1024);
    for (const [method, path] of [
      ["POST", "/v1/hosts/join-token"],
      ["DELETE", "/v1/envs/nothing"],
      ["POST", "/v1/envs/nothing/snapshot"],
      ["POST", "/v1/hosts/join"],
      ["POST", "/v1/projects"],
    ] as const) {
      const r = await call(method, path, big);
      assert.equal(r.status, 413, `${method} ${path}`);
      assert.equal(r.data.error.code, "payload_too_large");
    }
  });

  test("a key over its rate limit gets 429 with Retry-After; another key does not notice", async () => {
    // A key of its own: the other tests' key keeps its whole burst.
    const burst = (await lab.api("POST", "/v1/teams", { name: "burst" })).data.api_key as string;
    limiterNow = performance.now();
    const answers = await Promise.all(
      Array.from({ length: 700 }, () => lab.api("GET", "/v1/hosts", undefined, burst)),
    ).finally(() => {
      limiterNow = null;
    });
    const limited = answers.filter((a) => a.status === 429);
    assert.ok(limited.length > 0, "some were limited");
    assert.equal(limited[0]?.data.error.code, "rate_limited");
    assert.ok(Number(limited[0]?.headers.get("retry-after")) >= 1);
    assert.equal((await lab.api("GET", "/v1/hosts", undefined, lab.keyB)).status, 200);
    assert.equal((await lab.api("GET", "/v1/hosts")).status, 200);
  });
});

describe("event streams", () => {
  test("a stream of a running deployment holds one listener, not one more each second", async () => {
    await project("slow", box(), undefined);
    await call("PUT", "/v1/projects/slow/source", {
      compose: `x-denv:\n  kind: agent\n  warm: [{ service: box, command: "sleep 3" }]\n${box()}`,
    });
    const started = (await call("POST", "/v1/projects/slow/deploy", {})).data;
    const res = await fetch(`${lab.server.url}/v1/deployments/${started.id}/events`, {
      headers: { authorization: `Bearer ${lab.keyA}` },
    });
    const counts: number[] = [];
    for (let i = 0; i < 4; i++) {
      await elapse(700, "the listener count is sampled while the deploy runs: it must not grow with time");
      counts.push(lab.server.deployer.events.listenerCount(started.id));
    }
    await res.body?.cancel();
    assert.ok(Math.max(...counts) <= 1, JSON.stringify(counts));
  });
});

describe("errors", () => {
  test("failures speak denv's words: no engine text and no container id in any error body or reason", async () => {
    const sb = (
      await call("POST", "/v1/sandboxes", {
        image: "127.0.0.1:5000/denv/opsbox:bookworm",
        cmd: ["sleep", "infinity"],
      })
    ).data;
    await call("PUT", `/v1/envs/${sb.id}/files?path=/no/such/dir`, new Uint8Array(1024));
    await call("GET", `/v1/envs/${sb.id}/files?path=/no/such/file`);
    await call("GET", `/v1/envs/${sb.id}/files?path=/etc/../etc/passwd`);
    await call("GET", `/v1/envs/${sb.id}/files?path=/etc/passwd&service=constructor`);
    await call("POST", `/v1/envs/${sb.id}/exec`, { command: "true", service: "__proto__" });
    await call("POST", `/v1/envs/${sb.id}/services/toString/stop`);
    await call("POST", "/v1/sandboxes", { image: "127.0.0.1:5000/denv/no-such-image:1" });
    await call("POST", "/v1/sandboxes", {
      image: "127.0.0.1:5000/denv/opsbox:bookworm",
      cmd: ["/no/such/binary"],
    });
    await call("DELETE", `/v1/envs/${sb.id}`);
    assert.ok(errorTexts.length >= 8, JSON.stringify(errorTexts));
    if (process.env.DENV_SHOW_ERRORS) console.log(errorTexts.join("\n"));
    for (const text of errorTexts) {
      assert.doesNotMatch(
        text,
        /Error response from daemon|\(HTTP code|no such container|OCI runtime|containerd/i,
        text,
      );
      assert.doesNotMatch(text, /(?<![_a-z0-9])[0-9a-f]{12,64}(?![0-9a-z])/, text);
      assert.doesNotMatch(text, /function |native code|\[object /, text);
    }
  });
});
