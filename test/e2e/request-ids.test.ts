/**
 * A request's id from the API through the hub to the host: answered in `x-request-id` (the
 * caller's own when it is a plain token, a fresh one otherwise), and sent with every operation the
 * request and the deployment it started ask of a host, beside the deployment's id, so the host's
 * log lines name both. The host is team B's, spoken by hand (security-lab.ts), recording what the
 * server sends it; it refuses each operation, so nothing is made.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { joinRawHost, type Lab, openLab, type RawHost } from "../harness/lab.ts";

let lab: Lab;
let host: RawHost;

before(async () => {
  lab = await openLab();
  host = await joinRawHost(lab, lab.keyB);
  // Every operation is answered at once with a refusal.
  host.ws.on("message", (data, binary) => {
    if (binary) return;
    const msg = JSON.parse(data.toString()) as { type: string; op_id?: string };
    if (msg.type === "op")
      host.send({
        type: "result",
        op_id: msg.op_id,
        ok: false,
        error: { code: "unavailable", message: "no" },
      });
  });
});

after(async () => {
  await host?.close();
  await lab?.close();
});

async function sandbox(requestId: string) {
  const res = await fetch(`${lab.server.url}/v1/sandboxes`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${lab.keyB}`,
      "content-type": "application/json",
      "x-request-id": requestId,
    },
    body: JSON.stringify({ image: "127.0.0.1:5000/denv/opsbox:bookworm", cmd: ["sleep", "infinity"] }),
  });
  await res.arrayBuffer();
  return res.headers.get("x-request-id");
}

test("the caller's request id is answered and reaches the host with the deployment's id", async () => {
  const before = host.ops.length;
  assert.equal(await sandbox("trace-abc.123"), "trace-abc.123");
  const sent = host.ops.slice(before) as {
    method: string;
    trace?: { request_id?: string; deployment_id?: string };
  }[];
  assert.ok(sent.length > 0, "the sandbox asked the host for something");
  for (const op of sent) {
    assert.equal(op.trace?.request_id, "trace-abc.123", JSON.stringify(op));
    assert.match(op.trace?.deployment_id ?? "", /^dep_[0-9a-f]{12}$/, JSON.stringify(op));
  }
});

test("a request id that is not a plain token is replaced, never passed on", async () => {
  for (const hostile of ['x"}{"level":60', "a".repeat(101), "with space"]) {
    const before = host.ops.length;
    const answered = await sandbox(hostile);
    assert.match(answered ?? "", /^req_[0-9a-f]{12}$/, JSON.stringify(hostile));
    const sent = host.ops.slice(before) as { trace?: { request_id?: string } }[];
    for (const op of sent) assert.equal(op.trace?.request_id, answered);
  }
});
