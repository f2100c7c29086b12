/**
 * Modal as a target: `denv cloud connect modal`, its row, a sandbox on it by name, commands (as
 * the unprivileged user denv makes, or as one named), a command past its timeout, files, a
 * snapshot kept as a version and forks of it, destroy; through Modal's official SDK against a
 * local gRPC double of Modal's published API. Then what it refuses: a token that is not one, a key
 * Modal does not take, a command router the provider names that the server may not call, another
 * team.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type ModalDouble, startModalDouble } from "../doubles/modal-double.ts";
import { cliRunner } from "../harness/cli-runner.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { streamedOutput } from "../harness/stream-proof.ts";
import { filesOf, tarOf } from "../harness/tar-files.ts";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

const IMAGE = "127.0.0.1:5000/denv/opsbox:bookworm";
let lab: Lab;
let modal: ModalDouble;
let denv: ReturnType<typeof cliRunner>;

before(async () => {
  modal = await startModalDouble();
  lab = await openLab({ fetchAllow: [...LOCAL_REGISTRY, new URL(modal.url).host] });
  denv = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));
});

after(async () => {
  if (lab)
    for (const e of (await lab.api("GET", "/v1/envs")).data.environments ?? [])
      await lab.api("DELETE", `/v1/envs/${e.id}?wait=true`);
  await lab?.close();
  await modal?.close();
});

async function connectModal(): Promise<void> {
  if ((await lab.api("GET", "/v1/clouds")).data.clouds.some((c: any) => c.name === "modal")) return;
  const c = await lab.api("POST", "/v1/clouds", {
    provider: "modal",
    name: "modal",
    token: modal.token,
    api_url: modal.url,
  });
  assert.equal(c.status, 201, JSON.stringify(c.data));
}

const exec = (id: string, body: Record<string, unknown>) => lab.api("POST", `/v1/envs/${id}/exec`, body);
const run = async (id: string, command: string) => {
  const r = await exec(id, { command });
  assert.equal(r.data.exit_code, 0, JSON.stringify(r.data));
  return r.data.stdout as string;
};

test("connect modal, its row, a sandbox on it: commands, a timeout, files and destroy through the SDK over gRPC", async () => {
  const connect = (token: string) =>
    denv("cloud", "connect", "modal", "--name", "modal", "--token", token, "--api-url", modal.url);
  // A token is its id and secret: one part alone is refused, without the token in the message.
  const half = await connect("as-onlythesecretpart");
  assert.notEqual(half.code, 0);
  assert.match(half.stderr, /a Modal token is its id and its secret joined by a colon/);
  assert.doesNotMatch(half.stderr, /onlythesecretpart/);
  const wrong = await connect("ak-0:as-0");
  assert.notEqual(wrong.code, 0);
  assert.match(wrong.stderr, /Modal did not accept the token: .*Token ID or secret is invalid/);
  const ok = await connect(modal.token);
  assert.equal(ok.code, 0, ok.stderr);
  const row = (await lab.api("GET", "/v1/targets")).data.targets.find((t: any) => t.name === "modal");
  assert.equal(row?.type, "modal");
  assert.match(row.capabilities.egress_deny_verified, /block_network/);
  assert.match(row.capabilities.consistent_snapshot, /filesystem snapshot/);
  assert.match(row.note, /not against the live Modal/);

  const made = await lab.api("POST", "/v1/targets/modal/sandboxes", {
    image: IMAGE,
    cmd: ["sh", "-c", "echo started > /work/cmd.txt; exec sleep infinity"],
    env: { GREETING: "hello from denv" },
  });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  assert.equal(made.data.target, "modal");
  const id = made.data.id as string;
  const [at] = modal.sandboxes();
  assert.equal(at?.networkBlocked, true, "egress deny is the provider's block_network");
  assert.equal(at?.image, IMAGE, "Modal pulled the image the sandbox names");

  const hello = await exec(id, { command: "echo $GREETING; id -un" });
  assert.equal(hello.status, 200, JSON.stringify(hello.data));
  assert.equal(hello.data.stdout, "hello from denv\nuser\n", "the agent's commands are not root's");
  const asRoot = await exec(id, { command: "id -u", user: "root" });
  assert.equal(asRoot.data.stdout, "0\n", "a named user is carried");
  const split = await exec(id, { command: "echo out; echo err >&2; exit 3" });
  assert.deepEqual([split.data.exit_code, split.data.stdout, split.data.stderr], [3, "out\n", "err\n"]);
  // Output comes as the command writes it (the second command is sent only once "ready" arrived).
  assert.equal(
    await streamedOutput({ url: lab.server.url, key: lab.keyA }, id),
    "stdout:ready\nstdout:done\n",
  );
  const where = await exec(id, {
    command: 'printf "%s|%s" "$X" "$PWD"',
    env: { X: "it's $HOME" },
    cwd: "/tmp",
  });
  assert.equal(where.data.stdout, "it's $HOME|/tmp");
  // Bytes that are not UTF-8 come back as they were (the SDK's binary mode).
  const raw = await exec(id, { command: "printf '\\377\\376ok'", encoding: "base64" });
  assert.deepEqual(Buffer.from(raw.data.stdout, "base64"), Buffer.from([0xff, 0xfe, 0x6f, 0x6b]));
  const slow = await exec(id, { command: "sleep 30", timeout_ms: 1000 });
  assert.deepEqual([slow.data.timed_out, slow.data.exit_code], [true, 124], JSON.stringify(slow.data));

  const started = await waitFor(
    "the sandbox's cmd to run",
    async () =>
      (await exec(id, { command: "cat /work/cmd.txt 2>/dev/null || true" })).data.stdout || undefined,
  );
  assert.equal(started, "started\n", "the sandbox's cmd ran in the background");

  const put = await lab.api(
    "PUT",
    `/v1/envs/${id}/files?path=${encodeURIComponent("/work/in")}`,
    await tarOf("note.txt", "through the command router\n"),
  );
  assert.equal(put.status, 200, JSON.stringify(put.data));
  assert.equal(
    await run(id, "stat -c %U /work/in/note.txt; cat /work/in/note.txt"),
    "user\nthrough the command router\n",
  );
  const got = await lab.api("GET", `/v1/envs/${id}/files?path=${encodeURIComponent("/work/in/note.txt")}`);
  assert.equal(got.status, 200);
  assert.deepEqual(await filesOf(got.data as Buffer), { "note.txt": "through the command router\n" });
  const missing = await lab.api("GET", `/v1/envs/${id}/files?path=${encodeURIComponent("/work/none")}`);
  assert.equal(missing.status, 404, JSON.stringify(missing.data));

  const gone = await lab.api("DELETE", `/v1/envs/${id}?wait=true`);
  assert.equal(gone.data.status, "succeeded", JSON.stringify(gone.data));
  assert.equal(modal.sandboxes()[0]?.terminated, true);
});

test("a sandbox on Modal is snapshotted there as a version (an image), forked from it, and the image deleted with it", async () => {
  await connectModal();
  const made = await lab.api("POST", "/v1/targets/modal/sandboxes", { image: IMAGE, name: "snap-src" });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  const src = made.data.id as string;
  await run(src, "echo before > /work/state.txt");
  const snap = await lab.api("POST", `/v1/envs/${src}/snapshot?wait=true`);
  assert.equal(snap.data.status, "succeeded", JSON.stringify(snap.data));
  const versionId = (await lab.api("GET", `/v1/envs/${src}`)).data.current_version_id as string;
  const version = (await lab.api("GET", `/v1/versions/${versionId}`)).data;
  assert.equal(version.target, "modal");
  assert.equal(version.evidence.provider, "Modal");
  const ref = version.evidence.snapshot_ref as string;
  assert.ok(modal.images().has(ref), `${ref} is an image at Modal`);
  await run(src, "echo after > /work/state.txt");

  const fork = await lab.api("POST", "/v1/sandboxes", { from_version: versionId, name: "modal-fork" });
  assert.equal(fork.status, 201, JSON.stringify(fork.data));
  assert.equal(fork.data.target, "modal");
  assert.equal(await run(fork.data.id, "cat /work/state.txt; id -un"), "before\nuser\n");
  assert.equal(await run(src, "cat /work/state.txt"), "after\n");
  const forked = modal.sandboxes().find((s) => s.image.includes(ref));
  assert.equal(forked?.networkBlocked, true, "a fork's egress is denied");

  for (const e of [fork.data.id, src]) await lab.api("DELETE", `/v1/envs/${e}?wait=true`);
  const del = await lab.api("DELETE", `/v1/versions/${versionId}`);
  assert.ok(del.status < 300, JSON.stringify(del.data));
  assert.ok(!modal.images().has(ref), "deleting the version deleted Modal's image");
});

test("a command router the provider names is dialled only when the server may call it; another team gets nothing", async () => {
  await connectModal();
  const live = () => modal.sandboxes().filter((s) => !s.terminated).length;
  const before = live();
  const seen = modal.seen.length;
  // An address outside the fetch policy (loopback, another port): the SDK would carry the
  // sandbox's token there. It is refused before a call is made, and the sandbox is ended.
  modal.routerUrl("https://127.0.0.2:9");
  try {
    const elsewhere = await lab.api("POST", "/v1/targets/modal/sandboxes", { image: IMAGE });
    assert.equal(elsewhere.status, 403, JSON.stringify(elsewhere.data));
    assert.match(
      elsewhere.data.error.message,
      /Modal's command router: 127\.0\.0\.2:9 is not a host this server fetches from/,
    );
  } finally {
    modal.routerUrl(null);
  }
  assert.equal(live(), before, "the refused sandbox was terminated at the provider");
  const calls = modal.seen.slice(seen);
  assert.ok(!calls.some((m) => m.startsWith("TaskExec")), calls.join(", "));

  const ok = await lab.api("POST", "/v1/targets/modal/sandboxes", { image: IMAGE });
  assert.equal(ok.status, 201, JSON.stringify(ok.data));
  const theirs = await lab.api("POST", `/v1/envs/${ok.data.id}/exec`, { command: "id" }, lab.keyB);
  assert.equal(theirs.status, 404);
  const notTheirs = await lab.api("POST", "/v1/targets/modal/sandboxes", { image: IMAGE }, lab.keyB);
  assert.equal(notTheirs.status, 404);
});
