/**
 * Round 4's attacks on the E2B surface, performed with the unmodified E2B SDK and by hand against a
 * live denv (real server, denvd and engine): a read-only member's key lists the team's sandboxes,
 * takes the access token it is handed and tries root through envd, and tries to destroy them by a
 * zero timeout (finding 1); a signed URL made with no user is sent with `Authorization: Basic root:`
 * to read and write as root (finding 8). Each must fail, and the sandbox must be as it was.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import { keyWithRole, type Lab, openLab } from "../harness/lab.ts";

const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
let lab: Lab;
let sbx: Sandbox;
let readOnlyKey: string;
let memberKey: string;

/** One Connect envelope (a server stream's request). */
const envelope = (m: unknown) => {
  const json = Buffer.from(JSON.stringify(m));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(json.length, 1);
  return Buffer.concat([head, json]);
};

/** Every envelope of a server stream's answer, as JSON with its flags. */
function envelopes(bytes: Buffer): { flags: number; json: any }[] {
  const out: { flags: number; json: any }[] = [];
  for (let off = 0; off + 5 <= bytes.length; ) {
    const n = bytes.readUInt32BE(off + 1);
    out.push({
      flags: bytes[off] as number,
      json: JSON.parse(bytes.subarray(off + 5, off + 5 + n).toString()),
    });
    off += 5 + n;
  }
  return out;
}

before(async () => {
  lab = await openLab({ e2bSweepMs: 200 });
  process.env.E2B_API_URL = `${lab.server.url}/e2b`;
  process.env.E2B_SANDBOX_URL = `${lab.server.url}/e2b`;
  sbx = await Sandbox.create(OPSBOX, { apiKey: lab.keyA });
  await sbx.files.write("/tmp/notes.txt", "the admin's notes");
  readOnlyKey = await keyWithRole(lab, "read-only");
  memberKey = await keyWithRole(lab, "member");
});

after(async () => {
  await sbx?.kill().catch(() => {});
  await lab?.close();
});

test("a read-only key reads its team's sandboxes but gets no root, no command and no kill through E2B or envd", async () => {
  const e2b = (method: string, path: string, key: string, body?: unknown) =>
    fetch(`${lab.server.url}/e2b${path}`, {
      method,
      headers: { "x-api-key": key, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  // The attack as found: the list hands the key a token for each sandbox…
  const listed = (await (await e2b("GET", "/v2/sandboxes", readOnlyKey)).json()) as {
    sandboxID: string;
    envdAccessToken: string;
    endAt: string;
  }[];
  const mine = listed.find((s) => s.sandboxID === sbx.sandboxId);
  assert.ok(mine, "a read-only key sees its team's sandboxes");
  const makersToken = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
  assert.notEqual(mine.envdAccessToken, makersToken, "the token is the caller's own, not the maker's");
  // …and that token, with Authorization: Basic root:, asks envd to start a command.
  const started = await fetch(`${lab.server.url}/e2b/process.Process/Start`, {
    method: "POST",
    headers: {
      "content-type": "application/connect+json",
      "e2b-sandbox-id": sbx.sandboxId,
      "x-access-token": mine.envdAccessToken,
      authorization: `Basic ${Buffer.from("root:").toString("base64")}`,
    },
    body: envelope({ process: { cmd: "/bin/sh", args: ["-c", "id; touch /tmp/was-root"] } }),
  });
  const answer = envelopes(Buffer.from(await started.arrayBuffer()));
  assert.equal(answer.length, 1, JSON.stringify(answer));
  assert.equal(answer[0]?.json.error?.code, "permission_denied", JSON.stringify(answer));
  assert.match(answer[0]?.json.error?.message, /read-only/);
  assert.ok(!JSON.stringify(answer).includes("uid=0"));
  // A zero timeout (which the sweep would act on at once) and a kill: refused, nothing changed.
  const timeout = await e2b("POST", `/sandboxes/${sbx.sandboxId}/timeout`, readOnlyKey, { timeout: 0 });
  assert.equal(timeout.status, 403, await timeout.text());
  assert.equal((await e2b("DELETE", `/sandboxes/${sbx.sandboxId}`, readOnlyKey)).status, 403);
  const now = (await (await e2b("GET", `/sandboxes/${sbx.sandboxId}`, lab.keyA)).json()) as { endAt: string };
  assert.equal(now.endAt, mine.endAt, "the sandbox's end is where it was");
  assert.equal((await sbx.commands.run("test ! -e /tmp/was-root && echo untouched")).stdout, "untouched\n");

  // Through the SDK as a read-only user would use it: it connects and reads; commands are refused.
  const looking = await Sandbox.connect(sbx.sandboxId, { apiKey: readOnlyKey });
  assert.equal(await looking.files.read("/tmp/notes.txt"), "the admin's notes");
  assert.ok((await looking.files.list("/tmp")).some((e) => e.name === "notes.txt"));
  await assert.rejects(looking.commands.run("id", { user: "root" }), /read-only/);
  await assert.rejects(looking.files.write("/tmp/by-reader.txt", "x"), /read-only/);
  await assert.rejects(Sandbox.kill(sbx.sandboxId, { apiKey: readOnlyKey }), /read-only|403/);
  assert.equal((await sbx.commands.run("echo alive")).stdout, "alive\n");

  // A member of the team does what members do, as itself.
  const working = await Sandbox.connect(sbx.sandboxId, { apiKey: memberKey });
  assert.equal((await working.commands.run("id -u")).stdout.trim(), "1000");
});

test("a signed URL made with no user never takes its user from a header: no root read, no root-owned file", async () => {
  await sbx.commands.run("echo root-only > /root/secret && chmod 600 /root/secret", { user: "root" });
  const headers = {
    "e2b-sandbox-id": sbx.sandboxId,
    authorization: `Basic ${Buffer.from("root:").toString("base64")}`,
  };
  // The SDK builds a signed URL on envd's own origin (`/files` at the root of a sandbox's host
  // name); here envd is served under /e2b, named by E2b-Sandbox-Id.
  const onGateway = (url: string) => url.replace(`${lab.server.url}/files`, `${lab.server.url}/e2b/files`);
  // The SDK signs user "" when none is given; the header asks for root on top of it.
  const notes = onGateway(await sbx.downloadUrl("/tmp/notes.txt", { useSignatureExpiration: 600 }));
  const readable = await fetch(notes, { headers });
  assert.equal(readable.status, 200, "a signed URL reads what the sandbox's user may read");
  assert.equal(await readable.text(), "the admin's notes");
  const down = onGateway(await sbx.downloadUrl("/root/secret", { useSignatureExpiration: 600 }));
  assert.match(down, /signature=v1_/);
  const read = await fetch(down, { headers });
  const text = await read.text();
  assert.equal(read.status, 403, text);
  assert.ok(!text.includes("root-only"), text);
  const up = onGateway(await sbx.uploadUrl("/tmp/signed-up.txt", { useSignatureExpiration: 600 }));
  const put = await fetch(up, {
    method: "POST",
    headers: { ...headers, "content-type": "application/octet-stream" },
    body: "by a signed url",
  });
  assert.equal(put.status, 200, await put.text());
  // Written as the sandbox's own unprivileged user, as the URL was signed for no one in particular.
  assert.equal((await sbx.commands.run("stat -c %u /tmp/signed-up.txt")).stdout.trim(), "1000");
  // The same signature is no key to another path.
  const other = await fetch(notes.replace("notes.txt", "signed-up.txt"), { headers });
  assert.equal(other.status, 401, await other.text());
});
