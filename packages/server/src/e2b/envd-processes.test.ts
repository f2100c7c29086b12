import assert from "node:assert/strict";
import type { PassThrough } from "node:stream";
import { test } from "node:test";
import { elapse, waitFor } from "../../../../test/harness/wait-for.ts";
import { ConnectError } from "./connect-protocol.ts";
import {
  EnvdProcess,
  EnvdProcesses,
  MAX_PROCESSES_PER_SANDBOX,
  type ProcessEvent,
} from "./envd-processes.ts";

/** exec's stream form: u8 kind, three zero bytes, u32 length, the bytes. */
function frame(kind: number, payload: string | Buffer): Buffer {
  const body = Buffer.from(payload);
  const head = Buffer.alloc(8);
  head[0] = kind;
  head.writeUInt32BE(body.length, 4);
  return Buffer.concat([head, body]);
}

/** An exec call answering these bytes, cut into pieces of `piece` bytes. */
function answering(bytes: Buffer, piece: number) {
  return async (_env: string, _req: Record<string, unknown>, _stdin: PassThrough, _signal: AbortSignal) => {
    const parts: Buffer[] = [];
    for (let i = 0; i < bytes.length; i += piece) parts.push(bytes.subarray(i, i + piece));
    return new Response(
      new ReadableStream({
        start(c) {
          for (const p of parts) c.enqueue(p);
          c.close();
        },
      }),
    );
  };
}

const decode = (e: ProcessEvent) =>
  "data" in e
    ? {
        ...("stdout" in e.data ? { stdout: Buffer.from(e.data.stdout, "base64").toString() } : {}),
        ...("stderr" in e.data ? { stderr: Buffer.from(e.data.stderr, "base64").toString() } : {}),
      }
    : e;

test("the pid line is kept back wherever the reads cut it; output before it still reaches the watcher", async () => {
  const wire = Buffer.concat([
    frame(1, "early out\n"),
    frame(2, "4242\nafter pid on stderr\n"),
    frame(1, "more out\n"),
    frame(3, JSON.stringify({ exit_code: 7, timed_out: false })),
  ]);
  for (const piece of [1, 3, 8, 13, wire.length]) {
    const p = new EnvdProcess("env_a", { cmd: "/bin/bash", args: [], envs: {} }, undefined, undefined);
    const events: ProcessEvent[] = [];
    p.watch((e) => {
      events.push(e);
    });
    assert.equal(await p.start(answering(wire, piece), {}), 4242);
    await new Promise((r) => setImmediate(r));
    await waitFor("the process to end", () => p.ended);
    const seen = events.map(decode);
    assert.deepEqual(
      seen.filter((e) => "stdout" in e || "stderr" in e),
      [{ stdout: "early out\n" }, { stderr: "after pid on stderr\n" }, { stdout: "more out\n" }],
    );
    assert.deepEqual(
      seen.find((e) => "start" in e),
      { start: { pid: 4242 } },
    );
    assert.deepEqual(p.ended, { end: { exitCode: 7, exited: true, status: "exit status 7" } });
  }
});

test("a process that never says a pid (hostile or broken output) is refused, never given one", async () => {
  for (const stderr of ["x".repeat(40), "not-a-pid\n", "-5\n", "0\n"]) {
    const p = new EnvdProcess("env_a", { cmd: "sh", args: [], envs: {} }, undefined, undefined);
    const wire = Buffer.concat([frame(2, stderr), frame(3, JSON.stringify({ exit_code: 0 }))]);
    await assert.rejects(p.start(answering(wire, 5), {}), (e: unknown) => e instanceof ConnectError);
    assert.equal(p.pid, 0);
  }
});

test("a sandbox's processes are found only in it, by pid or tag, and capped", () => {
  const all = new EnvdProcesses();
  const make = (env: string, pid: number, tag?: string) => {
    const p = new EnvdProcess(env, { cmd: "sleep", args: [], envs: {} }, tag, undefined);
    p.pid = pid;
    all.add(p);
    return p;
  };
  make("env_a", 10, "web");
  make("env_b", 11);
  assert.equal(all.find("env_a", { pid: 10 }).pid, 10);
  assert.equal(all.find("env_a", { tag: "web" }).pid, 10);
  assert.throws(() => all.find("env_a", { pid: 11 }), /no running process 11/);
  assert.throws(() => all.find("env_b", { tag: "web" }), /no running process tagged web/);
  assert.throws(() => all.find("env_a", {}), ConnectError);
  for (let i = 1; i < MAX_PROCESSES_PER_SANDBOX; i++) make("env_a", 1000 + i);
  assert.throws(() => all.assertRoom("env_a"), /already runs 256/);
  all.assertRoom("env_b");
});

test("a watcher that stops taking events stops the command's output being read; a dropped process lets go", async () => {
  // An endless command: its stream yields as much as it is pulled for, and counts the pulls.
  let pulled = 0;
  const endless = async () =>
    new Response(
      new ReadableStream({
        start(c) {
          c.enqueue(frame(2, "77\n"));
        },
        pull(c) {
          pulled++;
          c.enqueue(frame(1, Buffer.alloc(64 * 1024)));
        },
      }),
    );
  const p = new EnvdProcess("env_a", { cmd: "yes", args: [], envs: {} }, undefined, undefined);
  let taken = 0;
  let release: () => void = () => {};
  // Takes three events, then takes nothing more (a client that stopped reading its stream).
  p.watch(() => {
    taken++;
    if (taken < 3) return Promise.resolve();
    return new Promise<void>((r) => {
      release = r;
    });
  });
  assert.equal(await p.start(endless, {}), 77);
  await waitFor("the watcher to take three events", () => taken >= 3);
  const pulledThen = pulled;
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
  await elapse(50, "no event may be sent past the one not taken, however long the watcher waits");
  assert.equal(taken, 3, "no event is sent past the one not taken");
  // The response's own queue (one chunk ahead) is all that was pulled while the watcher waited.
  assert.ok(pulled <= pulledThen + 2, `pulled ${pulled - pulledThen} more chunks while held`);
  // A dropped process does not wait on its watcher: its reading ends.
  p.abort.abort();
  release();
});
