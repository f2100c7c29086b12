/**
 * The store's query layer on both of its databases: embedded SQLite, and a real PostgreSQL (Debian's,
 * a throw-away cluster started by the test on loopback). The same API flows run against each:
 * bootstrap, teams and isolation, projects, join tokens (single use), a deployment recorded and
 * rolled back, migrations applied once.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { type RunningServer, recordDelivery, startServer } from "@denv/server";
import { startPostgresCluster } from "../harness/postgres.ts";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";

const cleanups: (() => void)[] = [];
after(() => {
  for (const f of cleanups.reverse()) f();
});
const startPostgres = async () => {
  const pg = await startPostgresCluster();
  cleanups.push(pg.stop);
  return pg.url;
};

type Opener = (adminKey: string) => Promise<{ server: RunningServer; reopen: () => Promise<RunningServer> }>;

function flows(name: string, open: Opener) {
  describe(`store on ${name}`, () => {
    const KEY = `dk_store_${randomBytes(4).toString("hex")}`;
    test("bootstrap, teams, isolation, projects, join tokens, a recorded deployment; migrations once", async () => {
      const { server, reopen } = await open(KEY);
      assert.match(server.adminKey ?? "", /^dk_/, "the first start makes an admin key");
      let s = server;
      const api = async (method: string, path: string, body?: unknown, key = KEY) => {
        const res = await fetch(`${s.url}${path}`, {
          method,
          headers: {
            authorization: `Bearer ${key}`,
            ...(body ? { "content-type": "application/json" } : {}),
          },
          body: body ? JSON.stringify(body) : undefined,
        });
        return { status: res.status, data: (await res.json()) as any };
      };
      try {
        assert.equal((await api("GET", "/v1/hosts")).status, 401, "no admin key before bootstrap with it");
        await s.close();
        s = await reopen();
        assert.equal((await api("GET", "/v1/hosts")).status, 200);
        const other = (await api("POST", "/v1/teams", { name: "other" })).data.api_key as string;
        assert.equal(
          (await api("POST", "/v1/projects", { name: "p1", kind: "agent", source: "./p1" })).status,
          201,
        );
        assert.equal(
          (await api("POST", "/v1/projects", { name: "p1", kind: "agent", source: "./p1" })).status,
          409,
        );
        assert.equal((await api("GET", "/v1/projects/p1", undefined, other)).status, 404);
        assert.equal((await api("GET", "/v1/projects", undefined, other)).data.projects.length, 0);
        const token = (await api("POST", "/v1/hosts/join-token")).data.token as string;
        const join1 = await fetch(`${s.url}/v1/hosts/join`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ token }),
        });
        assert.equal(join1.status, 201);
        const join2 = await fetch(`${s.url}/v1/hosts/join`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ token }),
        });
        assert.equal(join2.status, 401);
        assert.equal((await api("GET", "/v1/hosts")).data.hosts.length, 1);
        await api("PUT", "/v1/projects/p1/source", {
          compose: "services:\n  a:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n",
        });
        const d = await api("POST", "/v1/projects/p1/deploy?wait=true", { env: "alpha" });
        assert.equal(d.data.status, "rolled_back", "the only host is not connected");
        assert.match(d.data.phases.find((p: any) => p.name === "place").reason, /no connected host/);
        const shown = await api("GET", `/v1/deployments/${d.data.id}`);
        assert.deepEqual(shown.data.phases, d.data.phases);
        assert.equal((await api("GET", `/v1/deployments/${d.data.id}`, undefined, other)).status, 404);
        // A webhook delivery acts once on either store: its id, or its body under a new id, again is refused.
        await s.store
          .insertInto("github_apps")
          .values({
            id: "gha_1",
            team_id: "t",
            app_id: "1",
            slug: "s",
            api_url: "https://api.github.com",
            private_key_sealed: "x",
            webhook_secret_sealed: "y",
            created_at: "now",
          })
          .execute();
        const delivery = (id: string, body: string) =>
          recordDelivery(s.store, {
            delivery_id: id,
            app_row_id: "gha_1",
            event: "push",
            body_sha256: body,
            outcome: "received",
            received_at: "now",
          });
        assert.equal(await delivery("d1", "b1"), true);
        assert.equal(await delivery("d1", "b2"), false);
        assert.equal(await delivery("d2", "b1"), false);
        assert.equal(await delivery("d3", "b3"), true);
        await s.close();
        s = await reopen();
        assert.equal(
          (await api("GET", "/v1/projects")).data.projects.length,
          1,
          "data survives a restart; migrations are not re-run",
        );
      } finally {
        await s.close();
      }
    });
  });
}

// The first start makes its own admin key; restarts add the key given in the environment.
flows("SQLite", async (adminKey) => {
  const dataDir = await mkdtemp(join(tmpdir(), "denv-store-"));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  const server = await startServer({ dataDir, fetchAllow: LOCAL_REGISTRY });
  return { server, reopen: () => startServer({ dataDir, adminKey, fetchAllow: LOCAL_REGISTRY }) };
});

flows("PostgreSQL", async (adminKey) => {
  const databaseUrl = await startPostgres();
  const dataDir = await mkdtemp(join(tmpdir(), "denv-store-"));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  const server = await startServer({ dataDir, databaseUrl, fetchAllow: LOCAL_REGISTRY });
  return {
    server,
    reopen: () => startServer({ dataDir, databaseUrl, adminKey, fetchAllow: LOCAL_REGISTRY }),
  };
});
