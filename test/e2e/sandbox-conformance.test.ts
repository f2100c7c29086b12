/**
 * What a framework's sandbox self-check asks of a provider (Inspect's, chiefly), asked through the
 * raw /v1 API alone — no SDK, no adapter — on two kinds of sandbox: a fork of ops-world (its agent
 * service, opsbox) and a one-service sandbox from an image. Files: text, binary, 50 MiB and empty,
 * parents made, names with spaces, overwrite, and missing / permission / is-a-directory each its
 * own code. Commands: exact stdout and stderr, exit codes, signals, timeouts that kill the whole
 * tree, env, stdin with NUL bytes, 1 MiB of argv, the default user not root, a user that does not
 * exist, and cwd.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import tar from "tar-stream";
import { deployOpsWorld, type Lab, openLab } from "../harness/lab.ts";

let lab: Lab;
/** The sandboxes the same checks run on: name → environment id and service. */
const targets: Record<string, { id: string; service: string }> = {};

async function tarOf(entries: { name: string; body: Buffer | string }[]): Promise<Uint8Array> {
  const pack = tar.pack();
  for (const e of entries) pack.entry({ name: e.name, mode: 0o644 }, Buffer.from(e.body));
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack) chunks.push(c as Buffer);
  return new Uint8Array(Buffer.concat(chunks));
}

/** The first regular file of a tar. */
async function fileOf(archive: Buffer): Promise<Buffer | null> {
  const extract = tar.extract();
  let found: Buffer | null = null;
  extract.on("entry", (header, stream, next) => {
    const parts: Buffer[] = [];
    stream.on("data", (c: unknown) => parts.push(c as Buffer));
    stream.on("end", () => {
      if (found === null && header.type === "file") found = Buffer.concat(parts);
      next();
    });
  });
  await new Promise<void>((resolve, reject) => {
    extract.on("finish", resolve);
    extract.on("error", reject);
    extract.end(archive);
  });
  return found;
}

before(async () => {
  lab = await openLab();
  // A fork of ops-world, as every rollout gets one.
  const versionId = await deployOpsWorld(lab);
  const fork = await lab.api("POST", "/v1/sandboxes", { from_version: versionId });
  assert.equal(fork.status, 201, JSON.stringify(fork.data));
  targets["a fork of ops-world"] = { id: fork.data.id, service: "opsbox" };
  // A sandbox from an image, as E2B's and Modal's are made.
  const image = await lab.api("POST", "/v1/sandboxes", {
    image: "127.0.0.1:5000/denv/opsbox:bookworm",
    cmd: ["sleep", "infinity"],
    user: "1000:1000",
    volumes: ["/home/ubuntu"],
  });
  assert.equal(image.status, 201, JSON.stringify(image.data));
  targets["an image sandbox"] = { id: image.data.id, service: "main" };
});

after(async () => {
  await lab?.close();
});

for (const name of ["a fork of ops-world", "an image sandbox"]) {
  describe(name, () => {
    const t = () => targets[name] as { id: string; service: string };
    const q = (path: string, extra = "") =>
      `?service=${t().service}&path=${encodeURIComponent(path)}${extra}`;
    const put = (dir: string, archive: Uint8Array) =>
      lab.api("PUT", `/v1/envs/${t().id}/files${q(dir)}`, archive);
    const get = (path: string) => lab.api("GET", `/v1/envs/${t().id}/files${q(path)}`);
    const write = async (path: string, body: Buffer | string) => {
      const slash = path.lastIndexOf("/");
      return put(path.slice(0, slash) || "/", await tarOf([{ name: path.slice(slash + 1), body }]));
    };
    const read = async (path: string) => {
      const r = await get(path);
      assert.equal(r.status, 200, JSON.stringify(r.data));
      return fileOf(r.data as Buffer);
    };
    const exec = async (body: Record<string, unknown>) => {
      const r = await lab.api("POST", `/v1/envs/${t().id}/exec`, {
        service: t().service,
        encoding: "base64",
        ...body,
      });
      assert.equal(r.status, 200, JSON.stringify(r.data));
      const d = r.data as { exit_code: number; stdout: string; stderr: string; timed_out: boolean };
      return { ...d, out: Buffer.from(d.stdout, "base64"), err: Buffer.from(d.stderr, "base64") };
    };
    const refused = (r: { status: number; data: any }, status: number, code: string) => {
      assert.equal(r.status, status, JSON.stringify(r.data));
      assert.equal(r.data.error.code, code);
      // denv's words: no engine text, no container ids.
      assert.doesNotMatch(r.data.error.message, /HTTP code|[0-9a-f]{64}|no such container/i);
    };

    test("text (CRLF kept, UTF-8), binary, empty and 50 MiB files come back byte for byte", async () => {
      const text = "line one\r\nligne deux — ünïcödé ✓\n";
      const binary = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      const big = randomBytes(50 * 1024 * 1024);
      for (const [file, body] of [
        ["text.txt", Buffer.from(text)],
        ["binary.bin", binary],
        ["empty", Buffer.alloc(0)],
        ["big.bin", big],
      ] as const) {
        const w = await write(`/home/ubuntu/conf/${file}`, body);
        assert.equal(w.status, 200, JSON.stringify(w.data));
        const back = await read(`/home/ubuntu/conf/${file}`);
        assert.ok(back, `${file} came back`);
        assert.equal(
          createHash("sha256").update(back).digest("hex"),
          createHash("sha256").update(body).digest("hex"),
        );
      }
      const stat = await lab.api("GET", `/v1/envs/${t().id}/files/stat${q("/home/ubuntu/conf/big.bin")}`);
      assert.equal(stat.data.size, big.length);
      assert.equal(stat.data.owner, "ubuntu");
    });

    test("parents are made, owned by the user; names with spaces; an overwrite replaces the content", async () => {
      assert.equal((await write("/home/ubuntu/conf/a/b c/d/file with space.txt", "first")).status, 200);
      assert.equal((await read("/home/ubuntu/conf/a/b c/d/file with space.txt"))?.toString(), "first");
      const parent = await lab.api("GET", `/v1/envs/${t().id}/files/stat${q("/home/ubuntu/conf/a/b c")}`);
      assert.equal(parent.data.type, "directory");
      assert.equal(parent.data.uid, 1000);
      assert.equal(
        (await write("/home/ubuntu/conf/a/b c/d/file with space.txt", "second, longer")).status,
        200,
      );
      assert.equal(
        (await read("/home/ubuntu/conf/a/b c/d/file with space.txt"))?.toString(),
        "second, longer",
      );
    });

    test("missing, forbidden and is-a-directory each answer their own code", async () => {
      refused(await get("/home/ubuntu/conf/none.txt"), 404, "not_found");
      refused(await write("/etc/conformance.conf", "x"), 403, "permission_denied");
      await exec({ command: "echo secret > /home/ubuntu/conf/locked && chmod 000 /home/ubuntu/conf/locked" });
      refused(await get("/home/ubuntu/conf/locked"), 403, "permission_denied");
      await exec({ command: "mkdir -p /home/ubuntu/conf/adir && echo kept > /home/ubuntu/conf/adir/x" });
      refused(await write("/home/ubuntu/conf/adir", "flat"), 409, "is_directory");
      assert.equal((await exec({ command: "cat /home/ubuntu/conf/adir/x" })).out.toString(), "kept\n");
      refused(await write("/home/ubuntu/conf/text.txt/inner", "x"), 409, "not_a_directory");
    });

    test("stdout and stderr exactly, exit codes, and deaths by signal as 128+N", async () => {
      const r = await exec({ command: ["sh", "-c", "printf 'no newline'; printf 'e\\0rr' >&2; exit 3"] });
      assert.equal(r.out.toString(), "no newline");
      assert.deepEqual([...r.err], [...Buffer.from("e\0rr")]);
      assert.equal(r.exit_code, 3);
      for (const code of [0, 1, 42, 255])
        assert.equal((await exec({ command: `exit ${code}` })).exit_code, code);
      assert.equal((await exec({ command: ["sh", "-c", "kill -TERM $$"] })).exit_code, 143);
      assert.equal((await exec({ command: ["sh", "-c", "kill -KILL $$"] })).exit_code, 137);
      // A missing program is a failed command, not an error of the API.
      assert.equal((await exec({ command: ["no-such-program-here"] })).exit_code, 127);
      // A program is looked up in the command's own PATH: the request's, when it sets one.
      await exec({
        command:
          "mkdir -p /tmp/confbin && printf '#!/bin/sh\\necho found\\n' > /tmp/confbin/only-here && chmod +x /tmp/confbin/only-here",
      });
      const found = await exec({ command: ["only-here"], env: { PATH: "/tmp/confbin:/usr/bin:/bin" } });
      assert.equal(found.out.toString(), "found\n");
      assert.equal((await exec({ command: ["only-here"] })).exit_code, 127);
    });

    test("a timeout kills the whole tree, setsid and double-forked processes included", async () => {
      const r = await exec({
        command: ["sh", "-c", "setsid sleep 3301 & (sleep 3302 &); sleep 3303"],
        timeout_ms: 700,
      });
      assert.equal(r.timed_out, true);
      assert.equal(r.exit_code, 137);
      const left = await exec({ command: "ps -eo args | grep -c '^sleep 330[123]' || true" });
      assert.equal(left.out.toString().trim(), "0");
    });

    test("env, stdin with NUL bytes, and 1 MiB of argv", async () => {
      const env = await exec({ command: 'printf %s "$GREETING|$USER|$HOME"', env: { GREETING: "a b=c" } });
      assert.equal(env.out.toString(), "a b=c|ubuntu|/home/ubuntu");
      const stdin = Buffer.from([0, 1, 0, 255, 0, 10, 0]);
      const cat = await exec({ command: ["cat"], stdin: stdin.toString("base64") });
      assert.deepEqual([...cat.out], [...stdin]);
      // 16 arguments of 64 KiB: Linux caps one argument at 128 KiB, not the whole argv.
      const args = Array.from({ length: 16 }, (_, i) => String.fromCharCode(97 + i).repeat(64 * 1024));
      const argv = await exec({
        command: ["sh", "-c", 'echo $#; for a; do printf %s "$a"; done | wc -c', "sh", ...args],
      });
      assert.equal(argv.out.toString(), `16\n${1024 * 1024}\n`);
    });

    test("the default user is not root; another user, a missing user and cwd", async () => {
      assert.equal((await exec({ command: "id -u" })).out.toString(), "1000\n");
      assert.equal((await exec({ command: "id -u", user: "root" })).out.toString(), "0\n");
      const missing = await exec({ command: "true", user: "no-such-user-here" });
      assert.notEqual(missing.exit_code, 0);
      assert.match(missing.err.toString(), /no-such-user-here/);
      assert.equal((await exec({ command: "pwd", cwd: "/tmp" })).out.toString(), "/tmp\n");
      const badCwd = await exec({ command: "pwd", cwd: "/no/such/dir" });
      assert.notEqual(badCwd.exit_code, 0);
      assert.match(badCwd.err.toString(), /\/no\/such\/dir/);
    });
  });
}
