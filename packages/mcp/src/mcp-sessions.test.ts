import assert from "node:assert/strict";
import { test } from "node:test";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { McpSessions } from "./mcp-sessions.ts";

const ACCEPT = "application/json, text/event-stream";

function initialize(): Request {
  return new Request("http://x/v1/mcp", {
    method: "POST",
    headers: { "content-type": "application/json", accept: ACCEPT },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } },
    }),
  });
}

function listTools(sid: string): Request {
  return new Request("http://x/v1/mcp", {
    method: "POST",
    headers: { "content-type": "application/json", accept: ACCEPT, "mcp-session-id": sid },
    body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list" }),
  });
}

function sessions(max = 16) {
  const keys: string[] = [];
  const s = new McpSessions({
    maxPerOwner: max,
    makeServer: (key) => {
      keys.push(key);
      const server = new McpServer({ name: "t", version: "1" });
      server.registerTool("whoami", { description: "the key's owner" }, () => ({
        content: [{ type: "text", text: key }],
      }));
      return server;
    },
  });
  return { s, keys };
}

test("a session is bound to the key that opened it: another key's request finds no session", async () => {
  const { s, keys } = sessions();
  const res = await s.handle(initialize(), "key_a", "dk_a");
  assert.equal(res.status, 200);
  const sid = res.headers.get("mcp-session-id") as string;
  assert.match(sid, /^[0-9a-f-]{36}$/);
  assert.deepEqual(keys, ["dk_a"], "the session's tools act with the opening key");
  const mine = await s.handle(listTools(sid), "key_a", "dk_a");
  assert.equal(mine.status, 200);
  assert.match(await mine.text(), /whoami/);
  const theirs = await s.handle(listTools(sid), "key_b", "dk_b");
  assert.equal(theirs.status, 404);
  assert.doesNotMatch(await theirs.text(), /whoami|dk_a/);
  assert.deepEqual(keys, ["dk_a"], "no server was made for the other key");
  await s.closeAll();
});

test("without a session: GET and DELETE are refused, a non-initialize POST keeps nothing", async () => {
  const { s } = sessions();
  for (const method of ["GET", "DELETE"]) {
    const r = await s.handle(
      new Request("http://x/v1/mcp", { method, headers: { accept: ACCEPT } }),
      "k",
      "dk",
    );
    assert.equal(r.status, 400, method);
  }
  const stray = await s.handle(listTools("not-a-session").clone(), "k", "dk");
  assert.equal(stray.status, 404);
  const noSession = new Request("http://x/v1/mcp", {
    method: "POST",
    headers: { "content-type": "application/json", accept: ACCEPT },
    body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list" }),
  });
  assert.equal((await s.handle(noSession, "k", "dk")).status, 400);
  assert.equal(s.size, 0);
  await s.closeAll();
});

test("a key holds at most maxPerOwner sessions: the least recently used one closes", async () => {
  const { s } = sessions(2);
  const ids: string[] = [];
  for (let i = 0; i < 3; i++)
    ids.push((await s.handle(initialize(), "k", "dk")).headers.get("mcp-session-id") as string);
  assert.equal(s.size, 2);
  assert.equal((await s.handle(listTools(ids[0] as string), "k", "dk")).status, 404, "the oldest was closed");
  assert.equal((await s.handle(listTools(ids[2] as string), "k", "dk")).status, 200);
  // Another key's sessions do not count against this one's.
  await s.handle(initialize(), "other", "dk2");
  assert.equal(s.size, 3);
  await s.closeAll();
});
