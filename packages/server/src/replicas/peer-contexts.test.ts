import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { createServer, type RequestListener, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { text } from "node:stream/consumers";
import { after, before, test } from "node:test";
import { BuildContexts } from "../build-contexts.ts";
import { contextsFromPeers, servePeerContext } from "./peer-contexts.ts";
import type { ReplicaRegistry } from "./replica-registry.ts";

const team = "team_abc";
const key = randomBytes(16).toString("hex");
const body = Buffer.from(`a build context ${randomBytes(8).toString("hex")}`);
const digest = `sha256:${createHash("sha256").update(body).digest("hex")}`;
let dirs: string[] = [];
let holder: BuildContexts;
let holderUrl: string;
let liar: string;
const servers: Server[] = [];

async function listen(handler: RequestListener): Promise<string> {
  const s = createServer(handler);
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

/** A replica that holds nothing, looking for contexts at these peers. */
function seeker(peers: string[], withKey = key): BuildContexts {
  const dir = mkdtempSync(join(tmpdir(), "denv-ctx-"));
  dirs.push(dir);
  const c = new BuildContexts(dir);
  const registry = { peers: async () => peers.map((url, i) => ({ id: `rep_${i}`, url })) } as ReplicaRegistry;
  c.fromPeers = contextsFromPeers(registry, withKey);
  return c;
}

before(async () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-ctx-"));
  dirs.push(dir);
  holder = new BuildContexts(dir);
  await holder.put(team, digest, Readable.from([body]));
  holderUrl = await listen((req, res) => void servePeerContext(req, res, holder, key));
  // A peer that answers any context with other bytes.
  liar = await listen((_req, res) => res.end("not the context you asked for"));
});

after(async () => {
  for (const s of servers) {
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  dirs = [];
});

test("a context uploaded to another replica is fetched from it, checked, and kept here", async () => {
  const here = seeker([holderUrl]);
  assert.equal(await here.storedSize(team, digest), null);
  assert.equal(await here.size(team, digest), body.length);
  assert.equal(await here.storedSize(team, digest), body.length, "kept on this replica's disk");
  assert.equal(await text(here.open(team, digest)), body.toString());
});

test("a peer answering other bytes under the digest is not believed; the next peer is asked", async () => {
  const fooled = seeker([liar]);
  assert.equal(await fooled.size(team, digest), null);
  assert.equal(await fooled.storedSize(team, digest), null);
  assert.deepEqual(
    readdirSync(join(fooled.dir, team)).filter((n) => n.endsWith(".part")),
    [],
    "nothing half-written is left",
  );
  const next = seeker([liar, holderUrl]);
  assert.equal(await next.size(team, digest), body.length);
});

test("a context is served only with the replicas' key, only by its exact path", async () => {
  const stranger = seeker([holderUrl], "another-key");
  assert.equal(await stranger.size(team, digest), null);
  const auth = { authorization: `Bearer ${key}` };
  for (const path of [
    `/v1/replicas/contexts/${team}/${digest}/../x`,
    `/v1/replicas/contexts/../${team}/${digest}`,
    `/v1/replicas/contexts/${team}/sha256:${"0".repeat(64)}`,
    `/v1/replicas/contexts/team_other/${digest}`,
  ])
    assert.equal((await fetch(`${holderUrl}${path}`, { headers: auth })).status, 404, path);
  assert.equal((await fetch(`${holderUrl}/v1/replicas/contexts/${team}/${digest}`)).status, 401);
  const ok = await fetch(`${holderUrl}/v1/replicas/contexts/${team}/${digest}`, { headers: auth });
  assert.equal(ok.status, 200);
  assert.equal(await ok.text(), body.toString());
});
