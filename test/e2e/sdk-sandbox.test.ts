/**
 * The TypeScript SDK's sandbox surface against a real denv: Denv → sandbox → commands and files,
 * errors as classes, snapshot and fork, and `await using` destroying what it made.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, test } from "node:test";
import {
  ConflictError,
  Denv,
  NotFoundError,
  PermissionDeniedError,
  type Sandbox,
  TimeoutError,
} from "@denv/sdk";
import { type Lab, openLab } from "../harness/lab.ts";

let lab: Lab;
let denv: Denv;
let sb: Sandbox;

before(async () => {
  lab = await openLab();
  denv = Denv.fromEnv({ DENV_SERVER: lab.server.url, DENV_API_KEY: lab.keyA });
  sb = await denv.sandbox({
    image: "127.0.0.1:5000/denv/opsbox:bookworm",
    cmd: ["sleep", "infinity"],
    user: "1000:1000",
    volumes: ["/home/ubuntu"],
  });
});

after(async () => {
  await sb?.destroy();
  await lab?.close();
});

test("commands.run: exit codes, output, stdin, env, cwd, streaming, and a timeout that kills", async () => {
  const r = await sb.commands.run(["sh", "-c", 'echo "$USER in $(pwd)"; echo err >&2; exit 3'], {
    cwd: "/tmp",
  });
  assert.equal(r.exitCode, 3);
  assert.equal(r.stdout, "ubuntu in /tmp\n");
  assert.equal(r.stderr, "err\n");
  const cat = await sb.commands.run("cat", { stdin: new Uint8Array([0, 1, 2, 255]) });
  assert.deepEqual([...cat.stdoutBytes], [0, 1, 2, 255]);
  assert.equal((await sb.commands.run("echo $GREETING", { env: { GREETING: "hi" } })).stdout, "hi\n");
  const seen: string[] = [];
  const streamed = await sb.commands.run("for i in 1 2 3; do echo $i; done", {
    onStdout: (d) => seen.push(Buffer.from(d).toString()),
  });
  assert.equal(seen.join(""), "1\n2\n3\n");
  assert.equal(streamed.stdout, "1\n2\n3\n");
  const slow = await sb.commands.run("sleep 30", { timeoutMs: 500 });
  assert.equal(slow.timedOut, true);
  assert.equal(slow.exitCode, 137);
});

test("files: write, read, list, stat, mkdir, rename, remove, exists; failures as classes", async () => {
  await sb.files.write("/home/ubuntu/sdk/notes/a.txt", "alpha\n");
  assert.equal(await sb.files.readText("/home/ubuntu/sdk/notes/a.txt"), "alpha\n");
  const st = await sb.files.stat("/home/ubuntu/sdk/notes/a.txt");
  assert.equal(st.owner, "ubuntu");
  assert.equal(st.size, 6);
  assert.equal(await sb.files.mkdir("/home/ubuntu/sdk/empty"), true);
  assert.deepEqual(
    (await sb.files.list("/home/ubuntu/sdk", { depth: 2 })).map((e) => `${e.type}:${e.name}`),
    ["directory:empty", "directory:notes", "file:a.txt"],
  );
  await assert.rejects(sb.files.write("/home/ubuntu/sdk/notes", "x"), (e: unknown) => {
    assert.ok(e instanceof ConflictError);
    assert.equal(e.code, "is_directory");
    return true;
  });
  await assert.rejects(sb.files.write("/etc/sdk.conf", "x"), PermissionDeniedError);
  await sb.files.write("/etc/sdk.conf", "x", { user: "root" });
  await assert.rejects(sb.files.read("/home/ubuntu/nothing"), NotFoundError);
  await sb.files.rename("/home/ubuntu/sdk/notes/a.txt", "/home/ubuntu/sdk/b.txt");
  assert.equal(await sb.files.exists("/home/ubuntu/sdk/notes/a.txt"), false);
  await sb.files.remove("/home/ubuntu/sdk", { recursive: true });
  assert.equal(await sb.files.exists("/home/ubuntu/sdk"), false);
});

/** `bytes` of a pattern that changes every KiB, made as it is read. */
async function* pattern(bytes: number): AsyncGenerator<Uint8Array> {
  const block = Buffer.alloc(1024 * 1024);
  for (let off = 0; off < bytes; off += block.length) {
    for (let k = 0; k < block.length; k += 1024) block.writeUInt32LE((off + k) >>> 10, k);
    yield Buffer.from(block.subarray(0, Math.min(block.length, bytes - off)));
  }
}

async function sha256(source: AsyncIterable<Uint8Array> | ReadableStream<Uint8Array>): Promise<string> {
  const h = createHash("sha256");
  for await (const c of source as AsyncIterable<Uint8Array>) h.update(c);
  return h.digest("hex");
}

test("streams: a file written and read as streams, and a command's stdin streamed to it", async () => {
  const size = 48 * 1024 * 1024 + 123;
  await sb.files.write("/home/ubuntu/sdk/big.bin", pattern(size), { size });
  assert.equal((await sb.files.stat("/home/ubuntu/sdk/big.bin")).size, size);
  assert.equal(
    await sha256(await sb.files.readStream("/home/ubuntu/sdk/big.bin")),
    await sha256(pattern(size)),
  );
  // A stream's size is part of what is written: without it nothing is sent.
  await assert.rejects(sb.files.write("/home/ubuntu/sdk/nosize.bin", pattern(10)), /with its size/);
  // A stream shorter than its size is refused by the tar it travels in, and leaves no file.
  await assert.rejects(sb.files.write("/home/ubuntu/sdk/short.bin", pattern(10), { size: 20 }));
  assert.equal(await sb.files.exists("/home/ubuntu/sdk/short.bin"), false);
  await assert.rejects(sb.files.readStream("/home/ubuntu/sdk/absent.bin"), NotFoundError);
  const seen: number[] = [];
  const wc = await sb.commands.run(["sh", "-c", "sha256sum | cut -c1-64; echo done >&2"], {
    stdin: pattern(size),
    onStdout: (d) => seen.push(d.length),
  });
  assert.equal(wc.exitCode, 0, wc.stderr);
  assert.equal(wc.stdout.trim(), await sha256(pattern(size)));
  assert.equal(wc.stderr, "done\n");
  assert.ok(seen.length > 0);
});

test("snapshot and fork carry the files; await using destroys the fork", async () => {
  await sb.files.write("/home/ubuntu/state.txt", "before\n");
  const d = await sb.snapshot();
  assert.equal(d.status, "succeeded");
  assert.match(d.version_id ?? "", /^ver_/);
  let forkId = "";
  {
    await using fork = await sb.fork({ name: "sdk-fork" });
    forkId = fork.id;
    assert.equal(await fork.files.readText("/home/ubuntu/state.txt"), "before\n");
    await fork.files.write("/home/ubuntu/state.txt", "fork\n");
    assert.equal(await sb.files.readText("/home/ubuntu/state.txt"), "before\n");
  }
  await assert.rejects(denv.environment(forkId), NotFoundError);
  const url = await sb.portUrl(8000);
  assert.match(url, /\/v1\/tunnels\//);
  assert.notEqual(new URL(url).origin, new URL(lab.server.url).origin);
});

test("a bad key and a timeout come back as their classes", async () => {
  const wrong = new Denv({ baseUrl: lab.server.url, apiKey: "dk_wrong" });
  await assert.rejects(wrong.environment(sb.id), (e: unknown) => (e as Error).name === "AuthenticationError");
  assert.ok(new TimeoutError("timeout", "t", 504) instanceof Error);
});
