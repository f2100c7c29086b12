/**
 * A host is untrusted toward every other host: any team can mint a join token and connect a host of
 * its own, then speak the protocol however it likes. Here team B's host (driven by hand) attacks
 * team A's streams and operations, and hosts that vanish or flap must fail calls fast instead of
 * hanging or repeating them.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { PROTOCOL_VERSION, STREAM_CLOSE, STREAM_DATA, STREAM_END } from "@denv/protocol";
import { joinRawHost, type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

let lab: Lab;
let sandboxId: string;
let portUrl: string;

before(async () => {
  lab = await openLab({ hostWaitMs: 2000 });
  const sb = await lab.api("POST", "/v1/sandboxes", { image: "127.0.0.1:5000/denv/openenv-echo:0.1" });
  assert.equal(sb.status, 201, JSON.stringify(sb.data));
  sandboxId = sb.data.id;
  portUrl = (await lab.api("POST", `/v1/envs/${sandboxId}/ports/8000`, {})).data.url;
  await waitFor("the sandbox's service to answer through its port URL", async () => {
    const r = await fetch(`${portUrl}/health`).catch(() => null);
    return r?.status === 200;
  });
});

after(async () => {
  await lab?.close();
});

describe("a hostile host of another team", () => {
  test("spraying tunnel frames at every stream id never answers or closes another team's port URL", async () => {
    const evil = await joinRawHost(lab, lab.keyB);
    const fake = Buffer.from("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nPWNED!");
    let spraying = true;
    const spray = (async () => {
      while (spraying) {
        for (let id = 0; id < 512; id++) {
          evil.sendFrame(STREAM_DATA, id, fake);
          evil.sendFrame(id % 2 ? STREAM_CLOSE : STREAM_END, id);
        }
        await new Promise((r) => setImmediate(r));
      }
    })();
    const answers: string[] = [];
    for (let i = 0; i < 25; i++) {
      const res = await fetch(`${portUrl}/health`);
      answers.push(`${res.status} ${await res.text()}`);
    }
    spraying = false;
    await spray;
    await evil.close();
    assert.equal(answers.length, 25);
    for (const a of answers) assert.equal(a, '200 {"status": "healthy"}');
  });

  test("results and stream frames forged for another host's operation are ignored", async () => {
    const evil = await joinRawHost(lab, lab.keyB);
    const opId = "op_forgery_target";
    let forging = true;
    const forge = (async () => {
      while (forging) {
        // Output frames for every stream id this server might have picked, and a result for the op.
        for (let id = 1; id < 64; id++) evil.sendFrame(STREAM_DATA, id, Buffer.from("FORGED"));
        evil.send({
          type: "result",
          op_id: opId,
          ok: true,
          result: {
            exit_code: 0,
            stdout_truncated: false,
            stderr_truncated: false,
            stdout_dropped_bytes: 0,
            stderr_dropped_bytes: 0,
            timed_out: false,
            duration_ms: 1,
          },
        });
        await new Promise((r) => setTimeout(r, 1));
      }
    })();
    const host = lab.host.denvd.stacks().find((e) => e.status === "running");
    assert.ok(host, "team A has a running environment");
    const { streams, result } = await lab.server.denvd.operations.streamCall(
      lab.hostId,
      "exec",
      2,
      ([out, err]) => ({
        stack_id: host.id,
        command: ["sh", "-c", "sleep 0.3; echo genuine"],
        stdout_stream: out as number,
        stderr_stream: err as number,
      }),
      { opId },
    );
    const seen: string[] = [];
    const reading = (async () => {
      for await (const c of streams[0] as AsyncIterable<Buffer>) seen.push(c.toString());
    })();
    const r = await result;
    await reading;
    forging = false;
    await forge;
    await evil.close();
    assert.equal(r.duration_ms > 1, true, "the genuine host's result, not the forged one");
    assert.deepEqual(seen.join(""), "genuine\n");
  });

  test("a host that speaks another protocol version is told so and let go", async () => {
    const evil = await joinRawHost(lab, lab.keyB, { hello: false });
    const closed = new Promise<[number, string]>((r) =>
      evil.ws.once("close", (code, why) => r([code, why.toString()])),
    );
    evil.send({
      type: "hello",
      protocol: 1,
      arch: "x86_64",
      storage: "dir",
      capacity: { total_bytes: 1, free_bytes: 1, cpus: 1, memory_bytes: 1 },
      version: "old",
      known_ops: [],
    });
    const [code, why] = await closed;
    assert.equal(code, 4426);
    assert.match(why, new RegExp(`denvd speaks protocol 1, this server ${PROTOCOL_VERSION}: upgrade it`));
  });

  test("malformed or oversized host messages close that host's connection, and nothing else", async () => {
    const evil = await joinRawHost(lab, lab.keyB);
    const closed = new Promise<number>((r) => evil.ws.once("close", (code) => r(code)));
    evil.send({
      type: "hello",
      protocol: 1,
      arch: "x".repeat(10_000),
      storage: "dir",
      capacity: {},
      version: "",
      known_ops: [],
    });
    assert.equal(await closed, 4400);
    assert.equal(lab.server.denvd.operations.isConnected(lab.hostId), true);
    const e = await lab.api("POST", `/v1/envs/${sandboxId}/exec`, { command: "echo ok" });
    assert.equal(e.data.stdout, "ok\n");
  });
});

describe("the protocol table on the host's side", () => {
  test("denvd checks every operation's params before it runs anything", async () => {
    const bad: [string, Record<string, unknown>, RegExp][] = [
      ["exec", { stack_id: "../../etc", command: "id" }, /exec: stack_id: a stack id/],
      ["exec", { stack_id: "stk_0123456789ab", command: [] }, /exec: command/],
      ["destroy", { stack_id: "stk_0123456789ab", extra: 1 }, /destroy: .*unrecognized/i],
      ["put_files", { stack_id: "stk_0123456789ab", path: "/x" }, /put_files: tar_stream/],
    ];
    for (const [method, params, why] of bad) {
      await assert.rejects(
        lab.server.denvd.operations.call(lab.hostId, method as "exec", params as never),
        (err: Error & { code?: string }) => {
          assert.equal(err.code, "invalid_argument");
          assert.match(err.message, why);
          return true;
        },
      );
    }
  });
});

describe("hosts that are away", () => {
  test("a call to a host that is not connected fails with host_unavailable instead of hanging", async () => {
    const evil = await joinRawHost(lab, lab.keyB);
    await evil.close();
    await assert.rejects(
      lab.server.denvd.operations.call(evil.hostId, "status", {}),
      (err: Error & { code?: string }) => {
        assert.equal(err.code, "host_unavailable");
        assert.match(err.message, /not connected/);
        return true;
      },
    );
  });

  test("an environment whose host went away answers 503 host_unavailable through the API", async () => {
    await lab.stopSidecar();
    const r = await lab.api("POST", `/v1/envs/${sandboxId}/exec`, { command: "true" });
    await lab.restartSidecar();
    assert.equal(r.status, 503);
    assert.equal(r.data.error.code, "host_unavailable");
    const again = await lab.api("POST", `/v1/envs/${sandboxId}/exec`, { command: "echo back" });
    assert.equal(again.data.stdout, "back\n");
  });

  test("an operation whose host drops the connection on every try fails after three sends, not forever", async () => {
    const first = await joinRawHost(lab, lab.keyB);
    const identity = { hostId: first.hostId, secret: first.secret };
    let sends = 0;
    let stop = false;
    let latest = first;
    // The host drops whenever it is sent the operation, and comes back at once.
    const flap = async (h: Awaited<ReturnType<typeof joinRawHost>>): Promise<void> => {
      const drop = () => {
        if (stop) return;
        sends++;
        h.ws.terminate();
      };
      // The operation may have come with the welcome, before this listener.
      if (h.ops.length) drop();
      else h.ws.once("message", (_d, binary) => !binary && drop());
      await new Promise((r) => h.ws.once("close", r));
      if (stop) return;
      latest = await joinRawHost(lab, lab.keyB, { secret: identity });
      if (stop) return latest.close();
      await flap(latest);
    };
    const flapping = flap(first);
    await assert.rejects(
      lab.server.denvd.operations.call(identity.hostId, "status", {}),
      (err: Error & { code?: string }) => {
        assert.equal(err.code, "host_unavailable");
        assert.match(err.message, /dropped its connection 3 times/);
        return true;
      },
    );
    stop = true;
    assert.equal(sends, 3);
    await latest.close();
    await flapping;
  });

  test("80 MiB of something that is not a tar streams to the host, is refused there, and the link stays up", async () => {
    const r = await lab.api(
      "PUT",
      `/v1/envs/${sandboxId}/files?path=/work`,
      new Uint8Array(80 * 1024 * 1024).fill(0x41),
    );
    assert.equal(r.status, 400, JSON.stringify(r.data));
    assert.equal(r.data.error.code, "invalid_argument");
    assert.equal(lab.server.denvd.operations.isConnected(lab.hostId), true);
    const e = await lab.api("POST", `/v1/envs/${sandboxId}/exec`, {
      command: "echo still; ls /work | wc -l",
    });
    assert.equal(e.data.stdout, "still\n0\n");
  });
});
