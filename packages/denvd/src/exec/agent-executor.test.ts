/**
 * An agent of an older protocol (a container an older denvd started, still running after denvd's
 * upgrade) is spoken to in its own layout: the exec request without the fields added since, and a
 * terminal, which it cannot make, refused saying why. The agent here is a socket that records the
 * request and answers as an agent does.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { AgentExecutor } from "./agent-executor.ts";
import { encodeRecord, encodeRequest, FRAME_OUT } from "./agent-protocol.ts";
import type { Executor } from "./executor.ts";

const dir = mkdtempSync(join(tmpdir(), "denv-agent-exec-"));
const servers: Server[] = [];
after(() => {
  for (const s of servers) s.close();
  rmSync(dir, { recursive: true, force: true });
});

const frame = (type: number, data: Buffer) => {
  const head = Buffer.alloc(5);
  head[0] = type;
  head.writeUInt32LE(data.length, 1);
  return Buffer.concat([head, data]);
};

/** An "agent" that takes `requestBytes` bytes (a request and stdin's end), then answers "hi" and status 0. */
async function fakeAgent(requestBytes: () => number): Promise<{ path: string; received: Promise<Buffer> }> {
  const path = join(dir, `a${servers.length}.sock`);
  let resolve!: (b: Buffer) => void;
  const received = new Promise<Buffer>((r) => (resolve = r));
  const server = createServer((sock: Socket) => {
    let got = Buffer.alloc(0);
    sock.on("data", (c: Buffer) => {
      got = Buffer.concat([got, c]);
      if (got.length < requestBytes()) return;
      resolve(got);
      sock.write(frame(FRAME_OUT.STDOUT, Buffer.from("hi")));
      sock.end(frame(FRAME_OUT.STATUS, encodeRecord("status", { status: 0 })));
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(path, r));
  return { path, received };
}

const never: Executor = {
  exec: () => Promise.reject(new Error("the engine is not asked while an agent answers")),
};

const request = { argv: ["echo", "hi"], env: [], cwd: "", user: "", flags: 0, rows: 0, cols: 0 };

test("an agent of protocol 2 is sent the exec request without the terminal's fields, and answers", async () => {
  const v2 = encodeRequest("exec", request, 2);
  assert.equal(encodeRequest("exec", request).length - v2.length, 8, "rows and cols came in protocol 3");
  const agent = await fakeAgent(() => v2.length + 5);
  const executor = new AgentExecutor(never, () => ({
    dial: async () => connect(agent.path),
    defaultUser: null,
    homeSet: true,
    version: () => 2,
  }));
  const r = await executor.exec("c1", { command: ["echo", "hi"] });
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout.toString(), "hi");
  const got = await agent.received;
  assert.deepEqual(got.subarray(0, v2.length), v2);
  // Then stdin's end (empty stdin), a frame as every protocol has it.
  assert.deepEqual(got.subarray(v2.length), frame(1, Buffer.alloc(0)));
});

test("the current agent gets every field; a terminal asked of an older one is refused saying why", async () => {
  const v3 = encodeRequest("exec", { ...request, rows: 40, cols: 120, flags: 4 });
  const agent = await fakeAgent(() => v3.length + 5);
  const current = new AgentExecutor(never, () => ({
    dial: async () => connect(agent.path),
    defaultUser: null,
    homeSet: true,
    version: () => 3,
  }));
  const r = await current.exec("c1", { command: ["echo", "hi"], tty: { rows: 40, cols: 120 } });
  assert.equal(r.exitCode, 0);
  assert.deepEqual((await agent.received).subarray(0, v3.length), v3);
  const old = new AgentExecutor(never, () => ({
    dial: async () => connect(agent.path),
    defaultUser: null,
    homeSet: true,
    version: () => 2,
  }));
  await assert.rejects(old.exec("c1", { command: ["sh"], tty: { rows: 24, cols: 80 } }), (err: Error) => {
    assert.match(err.message, /predates terminals/);
    return true;
  });
});
