/**
 * The gateway's socket: only a relay's hello (RELAY_MAGIC, the caller's address) lets bytes
 * through to the proxy. Anything else reaching it (a short write, another magic, junk) is closed
 * at once, with nothing logged and nothing dialled.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { parseEgressPolicy } from "@denv/spec";
import { encodeRecord, RELAY_MAGIC } from "../exec/agent-protocol.ts";
import type { ContainerRuntime } from "../runtime/container-runtime.ts";
import { EgressGateways } from "./egress-gateways.ts";

const dir = mkdtempSync(join(tmpdir(), "egress-gw-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** What the socket answers these bytes with, once it closes. */
function send(socket: string, bytes: Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(socket);
    let got = "";
    s.on("data", (c: Buffer) => {
      got += c.toString();
    });
    s.on("close", () => resolve(got));
    s.on("error", reject);
    s.end(bytes);
  });
}

test("a hello that is not a relay's is closed with nothing logged; a relay's reaches the proxy", async () => {
  const gateways = new EgressGateways({
    stateDir: dir,
    runtime: { inspectContainer: async () => ({ addresses: {} }) } as unknown as ContainerRuntime,
    containersOf: () => ({}),
    hosts: {},
  });
  const policy = parseEgressPolicy({ allow: ["pkg.mirror.test"], deny: [] });
  assert.ok(!("errors" in policy));
  const relayDir = await gateways.open({ id: "stk_000000000001" }, policy);
  const socket = join(relayDir, "relay.sock");
  try {
    const request = Buffer.from("GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n");
    for (const junk of [
      Buffer.alloc(0),
      Buffer.from([1, 2, 3]),
      Buffer.concat([encodeRecord("relay_hello", { magic: 0x41414141, addr: 0, port: 0 }), request]),
      request,
    ])
      assert.equal(await send(socket, junk), "", junk.toString("hex").slice(0, 40));
    assert.equal(gateways.readLog("stk_000000000001").records.length, 0);
    const hello = encodeRecord("relay_hello", { magic: RELAY_MAGIC, addr: 0xac140005, port: 40000 });
    const answer = await send(socket, Buffer.concat([hello, request]));
    assert.match(answer, /^HTTP\/1\.1 403 /);
    const [rec] = gateways.readLog("stk_000000000001").records;
    assert.equal(rec?.client, "172.20.0.5:40000");
    assert.equal(rec?.allowed, false);
  } finally {
    await gateways.close("stk_000000000001");
  }
});
