import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { WebSocket } from "ws";
import { SecretBox } from "../../clouds/secret-box.ts";
import { constantTimeEqual, linkKey } from "../../replicas/link-key.ts";
import { openStore, type Store } from "../../store/open-store.ts";
import { openHostConnections } from "./host-connections.ts";
import { LINK_PATH, PeerLinks } from "./peer-links.ts";

let dir: string;
let store: Store;
let url: string;
let key: string;
let links: PeerLinks;
const server = createServer((_req, res) => res.end());

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "denv-links-"));
  store = await openStore(join(dir, "store"));
  key = linkKey(new SecretBox(randomBytes(32)));
  links = new PeerLinks({ hub: openHostConnections(store, { waitForHostMs: 0 }), key });
  server.on("upgrade", (req, socket, head) => links.handleUpgrade(req, socket, head));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  url = `ws://127.0.0.1:${(server.address() as AddressInfo).port}${LINK_PATH}`;
});

after(async () => {
  links.close();
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
  await store.destroy();
  rmSync(dir, { recursive: true, force: true });
});

/** Opens a link with this key: the HTTP status it was refused with, or the open socket. */
function dial(withKey: string | null): Promise<WebSocket | number> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, withKey ? { headers: { authorization: `Bearer ${withKey}` } } : {});
    ws.once("open", () => resolve(ws));
    ws.once("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
    ws.once("error", () => {});
  });
}

function closeCode(ws: WebSocket): Promise<number> {
  return new Promise((r) => ws.once("close", (code) => r(code)));
}

test("the link key is the shared secret key's, one per key, compared whole", () => {
  const box = new SecretBox(randomBytes(32));
  assert.equal(linkKey(box), linkKey(box));
  assert.notEqual(linkKey(box), linkKey(new SecretBox(randomBytes(32))));
  assert.equal(constantTimeEqual("abc", "abc"), true);
  assert.equal(constantTimeEqual("abc", "abd"), false);
  assert.equal(constantTimeEqual("", ""), false, "an empty key never matches");
});

test("a link without the key, or with another, is refused before any call is read", async () => {
  assert.equal(await dial(null), 401);
  assert.equal(await dial("not-the-key"), 401);
  assert.equal(await dial(`${key}x`), 401);
  assert.equal(await dial(linkKey(new SecretBox(randomBytes(32)))), 401);
});

test("a peer's malformed call closes its link; an operation that is not one is refused", async () => {
  const a = (await dial(key)) as WebSocket;
  const closedA = closeCode(a);
  a.send("{not json");
  assert.equal(await closedA, 4400);
  const b = (await dial(key)) as WebSocket;
  const closedB = closeCode(b);
  b.send(
    JSON.stringify({
      type: "call",
      id: "lc_1",
      host_id: "host_1",
      method: "rm_rf",
      params: {},
      op_id: "op_1",
    }),
  );
  assert.equal(await closedB, 4400);
  const c = (await dial(key)) as WebSocket;
  const closedC = closeCode(c);
  const streams = Array.from({ length: 17 }, (_, i) => i + 1);
  c.send(
    JSON.stringify({
      type: "call",
      id: "lc_2",
      host_id: "h",
      method: "exec",
      params: {},
      op_id: "op_2",
      streams,
    }),
  );
  assert.equal(await closedC, 4400, "more streams than any operation names");
});

test("a call for a host this replica does not hold is answered host_unavailable, the link kept", async () => {
  const ws = (await dial(key)) as WebSocket;
  const answer = new Promise<any>((r) => ws.once("message", (d) => r(JSON.parse(d.toString()))));
  ws.send(
    JSON.stringify({
      type: "call",
      id: "lc_3",
      host_id: "host_elsewhere",
      method: "status",
      params: {},
      op_id: "op_3",
      wait_for_host_ms: 0,
    }),
  );
  const a = await answer;
  assert.equal(a.id, "lc_3");
  assert.equal(a.ok, false);
  assert.equal(a.error.code, "host_unavailable");
  assert.equal(ws.readyState, ws.OPEN);
  ws.close();
});
