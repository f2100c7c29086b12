/**
 * A host is untrusted toward every other host: any team can mint a join token and connect a host of
 * its own, then speak the protocol however it likes. Here team B's host (driven by hand) attacks
 * team A's streams and operations, and hosts that vanish or flap must fail calls fast instead of
 * hanging or repeating them.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { TUNNEL_CLOSE, TUNNEL_DATA, TUNNEL_END } from "@denv/protocol";
import { joinRawHost, type Lab, openLab } from "./security-lab.ts";

let lab: Lab;
let sandboxId: string;
let portUrl: string;

before(async () => {
  lab = await openLab({ hostWaitMs: 2000 });
  const sb = await lab.api("POST", "/v1/sandboxes", { image: "127.0.0.1:5000/denv/openenv-echo:0.1" });
  assert.equal(sb.status, 201, JSON.stringify(sb.data));
  sandboxId = sb.data.id;
  portUrl = (await lab.api("POST", `/v1/envs/${sandboxId}/ports/8000`, {})).data.url;
  for (let i = 0; i < 40; i++) {
    const r = await fetch(`${portUrl}/health`).catch(() => null);
    if (r?.status === 200) break;
    await new Promise((r) => setTimeout(r, 250));
  }
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
          evil.sendFrame(TUNNEL_DATA, id, fake);
          evil.sendFrame(id % 2 ? TUNNEL_CLOSE : TUNNEL_END, id);
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

  test("results and events forged for another host's operation are ignored", async () => {
    const evil = await joinRawHost(lab, lab.keyB);
    const opId = "op_forgery_target";
    let forging = true;
    const forge = (async () => {
      while (forging) {
        evil.send({
          type: "event",
          op_id: opId,
          stream: "stdout",
          data_b64: Buffer.from("FORGED").toString("base64"),
        });
        evil.send({
          type: "result",
          op_id: opId,
          ok: true,
          result: { exit_code: 0, stdout_b64: "Rk9SR0VE" },
        });
        await new Promise((r) => setTimeout(r, 1));
      }
    })();
    const host = lab.host.denvd.stacks().find((e) => e.status === "running");
    assert.ok(host, "team A has a running environment");
    const seen: string[] = [];
    const r = await lab.server.hub.call(
      lab.hostId,
      "exec",
      { stack_id: host.id, command: ["sh", "-c", "sleep 0.3; echo genuine"], stream: true },
      { opId, onEvent: (_s, data) => seen.push(data.toString()) },
    );
    forging = false;
    await forge;
    await evil.close();
    assert.equal(Buffer.from(r.stdout_b64, "base64").toString(), "genuine\n");
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
    assert.match(why, /denvd speaks protocol 1, this server 2: upgrade it/);
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
    assert.equal(lab.server.hub.isConnected(lab.hostId), true);
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
      ["put_files", { stack_id: "stk_0123456789ab", path: "/x" }, /put_files: tar_b64/],
    ];
    for (const [method, params, why] of bad) {
      await assert.rejects(
        lab.server.hub.call(lab.hostId, method as "exec", params as never),
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
    await assert.rejects(lab.server.hub.call(evil.hostId, "status", {}), (err: Error & { code?: string }) => {
      assert.equal(err.code, "host_unavailable");
      assert.match(err.message, /not connected/);
      return true;
    });
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
      lab.server.hub.call(identity.hostId, "status", {}),
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

  test("a files upload too large for the host link is refused at once and the link stays up", async () => {
    const r = await lab.api(
      "PUT",
      `/v1/envs/${sandboxId}/files?path=/work`,
      new Uint8Array(80 * 1024 * 1024),
    );
    assert.equal(r.status, 413);
    assert.equal(r.data.error.code, "payload_too_large");
    assert.equal(lab.server.hub.isConnected(lab.hostId), true);
    const e = await lab.api("POST", `/v1/envs/${sandboxId}/exec`, { command: "echo still" });
    assert.equal(e.data.stdout, "still\n");
  });
});
